"""Configuration errors: one line naming the file and the key, never a secret value."""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import annotated_types
import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from gateway.config.models import Config

Loc = tuple[str | int, ...]

SECRET_KEYS = {"api_key", "token", "secret_token"}


class ConfigError(Exception):
    """A configuration problem the user can fix; str() is one line naming file and key."""

    def __init__(self, message: str, *, source: str | Path | None = None, key: str | None = None):
        self.source = str(source) if source is not None else None
        self.key = key
        self.detail = " ".join(message.split())
        super().__init__(": ".join(p for p in (self.source, key, self.detail) if p))


def dotted(loc: Loc) -> str:
    """('a', 'b', 0, 'c') -> 'a.b[0].c'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def field_of(model: type[BaseModel] | None, key: str | int) -> FieldInfo | None:
    return model.model_fields.get(key) if model is not None and isinstance(key, str) else None


def submodel(field: FieldInfo | None) -> type[BaseModel] | None:
    annotation = field.annotation if field is not None else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def model_at(loc: Loc) -> type[BaseModel] | None:
    """The section model that the mapping at `loc` is validated against."""
    model: type[BaseModel] | None = Config
    for part in loc:
        model = submodel(field_of(model, part))
    return model


# --- pydantic errors -> one line ---------------------------------------------------------

_PHRASES = {
    "bool_parsing": "expected true or false",
    "bool_type": "expected true or false",
    "string_type": "expected a string (put it in quotes)",
    "list_type": "expected a list, e.g. [a, b]",
    "model_type": "expected a mapping of keys",
    "model_attributes_type": "expected a mapping of keys",
    "dict_type": "expected a mapping of keys",
    "missing": "is required",
    "path_type": "expected a file path",
    "string_too_short": "must not be empty",
    "string_pattern_mismatch": "has characters that are not allowed",
}
_NUMERIC = set(
    "int_parsing int_type int_from_float float_parsing float_type"
    " greater_than greater_than_equal less_than less_than_equal".split()
)


def _numeric_phrase(field: FieldInfo | None, error_type: str) -> str:
    args = typing.get_args(field.annotation) if field is not None else ()
    is_int = error_type.startswith("int") or (
        field is not None and int in (field.annotation, *args)
    )
    kind = "an integer" if is_int else "a number"
    bounds: dict[str, Any] = {}
    for meta in field.metadata if field is not None else ():
        for attr, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if isinstance(meta, getattr(annotated_types, attr.capitalize())):
                bounds[op] = getattr(meta, attr)
    if ">=" in bounds and "<=" in bounds:
        return f"expected {kind} from {bounds['>=']} to {bounds['<=']}"
    if bounds.get(">") == 0 and len(bounds) == 1:
        return f"expected a positive {kind.split()[-1]}"
    return " ".join([f"expected {kind}", *(f"{op} {v}" for op, v in bounds.items())])


def _describe(err: Any, loc: Loc, from_env: dict[Loc, str]) -> tuple[Loc, str]:
    etype, ctx = err["type"], err.get("ctx") or {}
    if etype == "config_rule":
        return (*loc, *ctx["key"].split(".")), ctx["message"]
    if etype == "extra_forbidden":
        model = model_at(loc[:-1])
        known = list(model.model_fields) if model is not None else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else "known keys: " + ", ".join(known)
        return loc[:-1], f"unknown key '{loc[-1]}' ({hint})"
    if etype in ("value_error", "assertion_error"):
        return loc, str(err["msg"]).removeprefix("Value error, ")
    field = field_of(model_at(loc[:-1]), loc[-1]) if loc else None
    if etype == "literal_error":
        phrase = f"expected {ctx['expected']}"
    elif etype in _NUMERIC:
        phrase = _numeric_phrase(field, etype)
    else:
        phrase = _PHRASES.get(etype, str(err["msg"]))
    if etype == "missing":
        return loc, phrase
    value = err.get("input")
    if loc in from_env:  # never echo what came from the environment: it may be a secret
        return loc, f"{phrase}, got the value of ${from_env[loc]}"
    if loc and loc[-1] in SECRET_KEYS or isinstance(value, dict | list):
        return loc, phrase
    return loc, f"{phrase}, got {_show(value)}"


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML (true, null, 'text'), shortened."""
    if value is None or isinstance(value, bool):
        return yaml.safe_dump(value).split("\n")[0]
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def from_validation(
    exc: ValidationError, source: Path | None, from_env: dict[Loc, str]
) -> ConfigError:
    errors = exc.errors()
    loc, message = _describe(errors[0], tuple(errors[0]["loc"]), from_env)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return ConfigError(message, source=source, key=dotted(loc) or None)
