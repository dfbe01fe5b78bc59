"""config.yaml: where it is found (load.py), what it may hold (models.py), and the one-line
errors every mistake in it becomes (errors.py)."""

from gateway.config.errors import ConfigError
from gateway.config.load import (
    EXIT_CONFIG,
    check_storage_writable,
    find_config_path,
    load_config,
    require_platforms,
    resolve_config,
)
from gateway.config.models import DB_FILENAME, DEFAULT_SYSTEM_PROMPT, PLATFORM_NAMES, Config

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
