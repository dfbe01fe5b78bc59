"""What every config section shares: strictness, optional strings, user ids, the
cross-field error and paths relative to the config file."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import PydanticCustomError


def rule_error(key: str, message: str) -> PydanticCustomError:
    """A cross-field error; `key` is the offending key relative to the model being validated."""
    # The message travels in ctx so braces in it (e.g. "${VAR}") are never re-formatted.
    return PydanticCustomError("config_rule", "{message}", {"key": key, "message": message})


def resolve_path(value: str | os.PathLike[str], context: Any) -> Path:
    """Expand ~ and make a relative path relative to the config file's directory."""
    path = Path(value).expanduser()
    base = context.get("base_dir") if isinstance(context, dict) else None
    return path if path.is_absolute() or base is None else Path(base) / path


def _none_to_empty(value: Any) -> str | None:
    # `${VAR:-}` yields ""; for optional strings that means "not set".
    return None if value == "" else value


def _user_id(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected a user id (number or string), got {str(value).lower()}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise ValueError(f"expected a user id (number or string), got {value!r}")


def _none_to_mapping(value: Any) -> Any:
    return {} if value is None else value


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


def dollars(meaning: str) -> Any:
    """A type for an amount of US dollars: a finite number >= 0, never a YAML boolean
    (`true` would pass as 1.0); `meaning` goes into the error."""
    expected = f"expected a number >= 0 ({meaning})"

    def not_bool(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"{expected}, got {str(value).lower()}")
        return value

    def finite(value: float) -> float:
        if not math.isfinite(value) or value < 0:
            raise ValueError(expected)
        return value

    return Annotated[float, BeforeValidator(not_bool), AfterValidator(finite)]


def _known_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {value!r}; use an IANA name such as 'UTC' or 'Europe/Berlin'"
        ) from None
    return value


Zone = Annotated[str, AfterValidator(_known_zone)]  # an IANA time zone name
OptStr = Annotated[str | None, BeforeValidator(_none_to_empty)]
UserId = Annotated[str, BeforeValidator(_user_id)]


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _empty_section(cls, data: Any) -> Any:
        # `telegram:` with nothing under it means "all defaults", not "not a mapping".
        return {} if data is None else data
