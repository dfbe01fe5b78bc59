"""A model as config names it: `model:` itself, each of `model.fallbacks`, and
`budgets.fallback_model` (docs/budgets.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.base import OptStr, Section, rule_error


class ModelEntry(Section):
    provider: Literal["local", "openai", "anthropic"] = "local"
    name: str = "SmolLM2-135M-Instruct"
    base_url: OptStr = None
    api_key: OptStr = None
    context_length: int | None = Field(None, gt=0)
    max_output_tokens: int = Field(1024, gt=0)
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(2, ge=0)
    vision: bool | None = None  # takes pictures; None: known from the model name

    @model_validator(mode="after")
    def _credentials(self) -> ModelEntry:
        if self.provider == "openai" and not self.base_url and not self.api_key:
            raise rule_error(
                "api_key",
                "provider openai without base_url means api.openai.com and needs an API key; "
                "set api_key: ${OPENAI_API_KEY}, or base_url for an OpenAI-compatible server",
            )
        if self.provider == "anthropic" and not self.api_key:
            raise rule_error(
                "api_key", "provider anthropic needs an API key; set api_key: ${ANTHROPIC_API_KEY}"
            )
        return self


class BreakerConfig(Section):
    """A model that failed `failures` times in a row is skipped for `cooldown_s`, then
    tried once; a success closes it again."""

    failures: int = Field(3, ge=1)
    cooldown_s: float = Field(60.0, gt=0)


class ModelConfig(ModelEntry):
    # Tried in order when a call fails for a reason that is not the request's own.
    fallbacks: list[ModelEntry] = Field(default_factory=list)
    max_wait_s: float = Field(30.0, ge=0)  # a 429 asking for longer falls back instead
    announce_fallback: bool = False  # the reply says which model answered instead
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
