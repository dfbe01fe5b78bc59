"""`budgets:`: what one user, one chat and the whole bot may spend per day and per month,
in USD (priced from `prices:`) and/or tokens (docs/budgets.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from gateway.config.base import Section, Zone, _none_to_mapping, dollars, rule_error
from gateway.config.entries import ModelEntry

Dollars = dollars("USD")


class Limit(Section):
    """null: no limit of that kind."""

    usd: Dollars | None = None
    tokens: int | None = Field(None, ge=0)

    @property
    def set(self) -> bool:
        return self.usd is not None or self.tokens is not None


class Periods(Section):
    day: Limit = Field(default_factory=Limit)
    month: Limit = Field(default_factory=Limit)


class Override(Section):
    """For one chat key or one `platform:user_id`: limits that replace the general ones
    where given (a period or a kind left out keeps the general limit), or an exemption."""

    day: Limit | None = None
    month: Limit | None = None
    exempt: bool | None = None


class BudgetsConfig(Section):
    timezone: Zone = "UTC"  # where a day and a month begin
    user: Periods = Field(default_factory=Periods)
    chat: Periods = Field(default_factory=Periods)
    bot: Periods = Field(default_factory=Periods)
    exempt_admins: bool = True
    on_limit: Literal["refuse", "fallback"] = "refuse"
    fallback_model: ModelEntry | None = None  # runs the turn past a limit (on_limit: fallback)
    overrides: Annotated[dict[str, Override], BeforeValidator(_none_to_mapping)] = Field(
        default_factory=dict)

    @field_validator("overrides")
    @classmethod
    def _keys(cls, value: dict[str, Override]) -> dict[str, Override]:
        for key in value:
            platform, _, rest = key.partition(":")
            if platform not in ("telegram", "discord", "console") or not rest.strip():
                raise ValueError(f"{key!r} is neither a chat key (telegram:<chat id>, "
                                 "discord:<channel id>) nor a user (telegram:<user id>)")
        return value

    @model_validator(mode="after")
    def _fallback_named(self) -> BudgetsConfig:
        if self.on_limit == "fallback" and self.fallback_model is None:
            raise rule_error("fallback_model", "on_limit: fallback needs a fallback_model "
                             "(a model entry like model:, e.g. the local model)")
        return self

    @property
    def any(self) -> bool:
        """Whether any limit is set anywhere."""
        periods = (self.user, self.chat, self.bot)
        return any(p.day.set or p.month.set for p in periods) or any(
            (o.day and o.day.set) or (o.month and o.month.set)
            for o in self.overrides.values())
