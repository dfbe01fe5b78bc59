"""What tokens cost: per-model prices (config `prices:`), a chat's estimated spend, and how
both read in /usage. Pure arithmetic; the store and the config are the callers' business."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from storage.models import TokenCounts

PER = 1_000_000  # prices are USD per million tokens
# Anthropic's published ratios to the input price (5-minute cache), used when a model's
# cache prices are not configured.
CACHE_READ_RATIO = 0.1
CACHE_WRITE_RATIO = 1.25


@dataclass(frozen=True)
class Price:
    """One model's prices, USD per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    @classmethod
    def per_million(cls, input: float, output: float, cache_read: float | None = None,
                    cache_write: float | None = None) -> Price:
        """The configured prices, cache prices defaulting to Anthropic's ratios."""
        return cls(input, output,
                   input * CACHE_READ_RATIO if cache_read is None else cache_read,
                   input * CACHE_WRITE_RATIO if cache_write is None else cache_write)


def cost(totals: TokenCounts, price: Price) -> float:
    """USD for these tokens. Reasoning is not billed apart: it is already inside output."""
    return (totals.input_tokens * price.input
            + totals.cache_read_tokens * price.cache_read
            + totals.cache_write_tokens * price.cache_write
            + totals.output_tokens * price.output) / PER


@dataclass(frozen=True)
class Estimate:
    """A spend summed over the models that have prices; the others are named, not guessed."""

    usd: float
    priced: tuple[str, ...]
    unpriced: tuple[str, ...]  # models that were used but have no price entry


def estimate(by_model: Mapping[str, TokenCounts], prices: Mapping[str, Price],
             model: str) -> Estimate | None:
    """Each model's tokens at that model's prices (a summary model may differ from the
    chat's); None when neither `model` (the chat's) nor any model used has a price."""
    used = sorted(by_model)
    priced = sorted({m for m in used if m in prices} | ({model} if model in prices else set()))
    if not priced:
        return None
    usd = sum(cost(by_model[m], prices[m]) for m in priced if m in by_model)
    return Estimate(usd, tuple(priced), tuple(m for m in used if m not in prices))


def format_usd(usd: float) -> str:
    """Dollars to four decimals (a short chat costs fractions of a cent)."""
    return f"${usd:,.4f}"


def cost_line(found: Estimate | None, model: str) -> str:
    """The /usage line about money."""
    if found is None:
        return f"Cost: no prices configured for this model ({model})"
    line = f"Estimated cost: {format_usd(found.usd)} (prices for {', '.join(found.priced)})"
    if found.unpriced:
        line += f"; not counted, no prices for {', '.join(found.unpriced)}"
    return line
