"""Usage over time as charts: SVG drawn on the server by pygal, so the page needs no script
and no asset from elsewhere (pygal's own tooltip script, loaded from the web, is turned off)."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pygal
from pygal.style import CleanStyle

from gateway.turns.pricing import Price, estimate
from gateway.web.timeline import hit_rate
from storage.models import UsageTotals

Days = Mapping[str, Mapping[str, UsageTotals]]
# pygal always writes an inline script holding its tooltip settings; without its tooltip
# library it does nothing, and the page stays script-free without it.
_SCRIPT = re.compile(r"<script\b.*?</script>", re.S)


def _config(title: str) -> pygal.Config:
    config = pygal.Config()
    config.title = title
    config.js = []  # no script from a CDN: a plain, static SVG
    config.disable_xml_declaration = True  # embedded in the page
    config.width, config.height, config.explicit_size = 900, 320, True
    config.x_label_rotation = 30
    config.legend_at_bottom = True
    config.style = CleanStyle
    return config


def _summed(models: Mapping[str, UsageTotals]) -> UsageTotals:
    parts = list(models.values())
    return UsageTotals(input_tokens=sum(u.input_tokens for u in parts),
                       output_tokens=sum(u.output_tokens for u in parts),
                       cache_read_tokens=sum(u.cache_read_tokens for u in parts),
                       cache_write_tokens=sum(u.cache_write_tokens for u in parts),
                       reasoning_tokens=sum(u.reasoning_tokens for u in parts),
                       calls=sum(u.calls for u in parts))


def usage_charts(days: Days, prices: Mapping[str, Price]) -> list[tuple[str, str]]:
    """(title, SVG) of each chart; none when nothing was spent yet."""
    if not days:
        return []
    labels = list(days)
    totals = [_summed(days[d]) for d in labels]
    charts = []
    kinds = pygal.StackedBar(_config("Tokens by kind, per day"))
    kinds.x_labels = labels
    for name, field in (("input", "input_tokens"), ("cache read", "cache_read_tokens"),
                        ("cache write", "cache_write_tokens"), ("output", "output_tokens")):
        kinds.add(name, [getattr(t, field) for t in totals])
    charts.append(("kinds", _svg(kinds)))
    models = pygal.StackedBar(_config("Tokens by model, per day"))
    models.x_labels = labels
    for model in sorted({m for day in days.values() for m in day}):
        models.add(model, [_tokens(days[d].get(model)) for d in labels])
    charts.append(("models", _svg(models)))
    rate = pygal.Line(_config("Cache hit rate, per day (%)"))
    rate.x_labels = labels
    rate.add("cache reads / all read", [None if (r := hit_rate(t)) is None else round(100 * r, 1)
                                         for t in totals])
    charts.append(("cache", _svg(rate)))
    if prices:
        cost = pygal.Bar(_config("Estimated cost, per day (USD)"))
        cost.x_labels = labels
        cost.add("USD", [round(found.usd, 4) if (found := estimate(days[d], prices, ""))
                         else None for d in labels])
        charts.append(("cost", _svg(cost)))
    return charts


def _svg(chart: pygal.graph.graph.Graph) -> str:
    return _SCRIPT.sub("", chart.render(is_unicode=True))


def _tokens(usage: UsageTotals | None) -> int:
    if usage is None:
        return 0
    return (usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
            + usage.output_tokens)
