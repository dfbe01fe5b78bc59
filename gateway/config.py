"""Finding, reading and validating config.yaml; every user error becomes one ConfigError line."""

from __future__ import annotations

import difflib
import os
import re
import tempfile
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import annotated_types
import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from gateway.config_models import (
    DB_FILENAME,
    DEFAULT_SYSTEM_PROMPT,
    PLATFORM_NAMES,
    Config,
    default_data_dir,
)

__all__ = [
    "DB_FILENAME",
    "DEFAULT_SYSTEM_PROMPT",
    "EXIT_CONFIG",
    "PLATFORM_NAMES",
    "Config",
    "ConfigError",
    "check_storage_writable",
    "find_config_path",
    "load_config",
    "require_platforms",
    "resolve_config",
]

EXIT_CONFIG = 78  # EX_CONFIG from sysexits.h; the systemd unit does not restart on it

Loc = tuple[str | int, ...]

_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")
_SECRET_KEYS = {"api_key", "token", "secret_token"}
# Spec §2 defaults the platform tokens to these references.
_ENV_DEFAULTS: dict[tuple[str, ...], str] = {
    ("platforms", "telegram", "token"): "${TELEGRAM_BOT_TOKEN}",
    ("platforms", "discord", "token"): "${DISCORD_BOT_TOKEN}",
}


class ConfigError(Exception):
    """A configuration problem the user can fix; str() is one line naming file and key."""

    def __init__(self, message: str, *, source: str | Path | None = None, key: str | None = None):
        self.source = str(source) if source is not None else None
        self.key = key
        self.detail = " ".join(message.split())
        super().__init__(": ".join(p for p in (self.source, key, self.detail) if p))


class _Unset:
    """Placeholder for a value whose ${VAR} is unset and has no default."""


_UNSET = _Unset()


def dotted(loc: Loc) -> str:
    """('a', 'b', 0, 'c') -> 'a.b[0].c'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def find_config_path(
    explicit: str | Path | None = None, env: Mapping[str, str] | None = None
) -> Path | None:
    """--config, $THREADLINE_CONFIG, ./config.yaml, ~/.config/threadline/config.yaml, else None."""
    env = os.environ if env is None else env
    for given, origin in (
        (explicit, "--config"),
        (env.get("THREADLINE_CONFIG"), "THREADLINE_CONFIG"),
    ):
        if given:
            path = Path(given).expanduser()
            if not path.is_file():
                raise ConfigError(
                    f"config file not found (from {origin}); check the path", source=path
                )
            return path
    home = Path(env.get("HOME") or Path.home())
    for path in (Path("config.yaml"), home / ".config" / "threadline" / "config.yaml"):
        if path.is_file():
            return path
    return None


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Load and validate one file; None means the built-in defaults (no lookup here)."""
    env = os.environ if env is None else env
    source = Path(path) if path is not None else None
    data = _read_yaml(source) if source is not None else {}
    for loc, ref in _ENV_DEFAULTS.items():
        _set_default(data, loc, ref)
    from_env: dict[Loc, str] = {}
    unset: list[tuple[Loc, str]] = []
    data = _substitute(data, (), env, from_env, unset, source)
    for loc, var in unset:
        if not _in_disabled_section(data, loc):
            raise ConfigError(
                f"environment variable {var} is not set; set it (e.g. in threadline.env) "
                f"or write ${{{var}:-default}}",
                source=source,
                key=dotted(loc),
            )
    data = _prune(data)
    base_dir = source.parent if source is not None else Path.cwd()
    try:
        cfg = Config.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise _from_validation(exc, source, from_env) from None
    cfg._source = source
    cfg._home = default_data_dir(env)
    return cfg


def resolve_config(
    explicit: str | Path | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """find_config_path + load_config: what every CLI command does."""
    return load_config(find_config_path(explicit, env), env)


def require_platforms(cfg: Config) -> None:
    """`threadline run` needs at least one enabled platform."""
    if not cfg.enabled_platforms():
        raise ConfigError(
            "no platform is enabled; set enabled: true under platforms.console, "
            "platforms.telegram or platforms.discord",
            source=cfg.source,
            key="platforms",
        )


def check_storage_writable(cfg: Config) -> None:
    """Create the database directory if needed and prove a file can be written there."""
    db = cfg.db_path
    hint = "choose a writable path" if cfg.storage.path else "set THREADLINE_HOME or storage.path"

    def fail(reason: str) -> ConfigError:
        return ConfigError(
            f"cannot write {db} ({reason}); {hint}", source=cfg.source, key="storage.path"
        )

    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=db.parent):
            pass
    except FileExistsError:
        raise fail(f"{db.parent} is not a directory") from None
    except OSError as exc:
        raise fail((exc.strerror or str(exc)).lower()) from None
    if db.is_dir():
        raise fail("it is a directory")
    if db.exists() and not os.access(db, os.R_OK | os.W_OK):
        raise fail("permission denied")


# --- reading -------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (a silently overridden key is a typo)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if isinstance(key, typing.Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(source: Path) -> dict[str, Any]:
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("config file not found; check the path", source=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise ConfigError(f"cannot read config file ({reason})", source=source) from None
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}invalid YAML: {problem}", source=source) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"the top level must be a mapping of keys (model:, platforms:, ...), "
            f"got {type(data).__name__}",
            source=source,
        )
    return data


def _set_default(data: dict[str, Any], loc: tuple[str, ...], value: Any) -> None:
    node: Any = data
    for part in loc[:-1]:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            return  # a type error the validator will report
    node.setdefault(loc[-1], value)


# --- ${VAR} substitution -------------------------------------------------------------------


def _substitute(
    node: Any,
    loc: Loc,
    env: Mapping[str, str],
    from_env: dict[Loc, str],
    unset: list[tuple[Loc, str]],
    source: Path | None,
) -> Any:
    """Expand ${VAR} and ${VAR:-default} in every string of the parsed tree."""
    if isinstance(node, dict):
        return {k: _substitute(v, (*loc, k), env, from_env, unset, source) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, (*loc, i), env, from_env, unset, source) for i, v in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node
    missing: list[str] = []

    def expand(match: re.Match[str]) -> str:
        text, name, default = match.group(0), match.group(1), match.group(2)
        if text == "$${":
            return "${"
        if name is None:
            raise ConfigError(
                "malformed variable reference; write ${NAME} or ${NAME:-default}",
                source=source,
                key=dotted(loc),
            )
        from_env[loc] = name
        value = env.get(name)
        if default is not None and not value:
            return default
        if value is None:
            missing.append(name)
            return ""
        return value

    result = _REF.sub(expand, node)
    if missing:
        unset.append((loc, missing[0]))
        return _UNSET
    return result


def _field(model: type[BaseModel] | None, key: str | int) -> FieldInfo | None:
    return model.model_fields.get(key) if model is not None and isinstance(key, str) else None


def _submodel(field: FieldInfo | None) -> type[BaseModel] | None:
    annotation = field.annotation if field is not None else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The section model that the mapping at `loc` is validated against."""
    model: type[BaseModel] | None = Config
    for part in loc:
        model = _submodel(_field(model, part))
    return model


def _in_disabled_section(data: Any, loc: Loc) -> bool:
    """True if some section around `loc` has `enabled: false` (explicitly or by default)."""
    model: type[BaseModel] | None = Config
    node = data
    for part in loc[:-1]:
        if not isinstance(node, dict) or model is None:
            return False
        node, model = node.get(part), _submodel(_field(model, part))
        enabled = _field(model, "enabled")
        if enabled is not None and isinstance(node, dict):
            value = node.get("enabled", enabled.default)
            try:
                if not TypeAdapter(bool).validate_python(value):
                    return True
            except ValidationError:
                return False  # not a boolean: validation reports it
    return False


def _prune(node: Any) -> Any:
    """Drop values whose variable is unset (only left in disabled sections): defaults apply."""
    if isinstance(node, dict):
        return {k: _prune(v) for k, v in node.items() if v is not _UNSET}
    if isinstance(node, list):
        return [_prune(v) for v in node if v is not _UNSET]
    return node


# --- pydantic errors -> one line -----------------------------------------------------------

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
        model = _model_at(loc[:-1])
        known = list(model.model_fields) if model is not None else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else "known keys: " + ", ".join(known)
        return loc[:-1], f"unknown key '{loc[-1]}' ({hint})"
    if etype in ("value_error", "assertion_error"):
        return loc, str(err["msg"]).removeprefix("Value error, ")
    field = _field(_model_at(loc[:-1]), loc[-1]) if loc else None
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
    if loc and loc[-1] in _SECRET_KEYS or isinstance(value, dict | list):
        return loc, phrase
    return loc, f"{phrase}, got {_show(value)}"


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML (true, null, 'text'), shortened."""
    if value is None or isinstance(value, bool):
        return yaml.safe_dump(value).split("\n")[0]
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _from_validation(
    exc: ValidationError, source: Path | None, from_env: dict[Loc, str]
) -> ConfigError:
    errors = exc.errors()
    loc, message = _describe(errors[0], tuple(errors[0]["loc"]), from_env)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return ConfigError(message, source=source, key=dotted(loc) or None)
