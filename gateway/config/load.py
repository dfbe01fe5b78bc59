"""Finding, reading and validating config.yaml; every user error becomes one ConfigError line."""

from __future__ import annotations

import os
import re
import tempfile
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from gateway.config.errors import (
    ConfigError,
    Loc,
    dotted,
    field_of,
    from_validation,
    submodel,
)
from gateway.config.models import (
    Config,
    default_data_dir,
)
from storage.owner_only import make_dirs

EXIT_CONFIG = 78  # EX_CONFIG from sysexits.h; the systemd unit does not restart on it

_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")
# Platform tokens default to these environment references (see README, Configuration).
_ENV_DEFAULTS: dict[tuple[str, ...], str] = {
    ("platforms", "telegram", "token"): "${TELEGRAM_BOT_TOKEN}",
    ("platforms", "discord", "token"): "${DISCORD_BOT_TOKEN}",
}


class _Unset:
    """Placeholder for a value whose ${VAR} is unset and has no default."""


_UNSET = _Unset()


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
            if not path.exists():
                raise ConfigError(
                    f"config file not found (from {origin}); check the path", source=path
                )
            return _regular_file(path)
    home = Path(env.get("HOME") or Path.home())
    for path in (Path("config.yaml"), home / ".config" / "threadline" / "config.yaml"):
        if path.exists():
            return _regular_file(path)
    return None


def _regular_file(path: Path) -> Path:
    """Return `path`, or refuse it: a directory where the config belongs is a mistake."""
    # Skipping it would quietly run on another file or on defaults, and the user would
    # never learn why their settings are ignored.
    if not path.is_file():
        raise ConfigError("exists but is not a regular file; point it at a YAML file",
                          source=path)
    return path


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
        raise from_validation(exc, source, from_env) from None
    return cfg.locate(source, default_data_dir(env))


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
        make_dirs(db.parent)  # 0700, as every directory Threadline creates
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


def _in_disabled_section(data: Any, loc: Loc) -> bool:
    """True if some section around `loc` has `enabled: false` (explicitly or by default)."""
    model: type[BaseModel] | None = Config
    node = data
    for part in loc[:-1]:
        if not isinstance(node, dict) or model is None:
            return False
        node, model = node.get(part), submodel(field_of(model, part))
        enabled = field_of(model, "enabled")
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
