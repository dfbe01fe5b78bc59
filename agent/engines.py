"""Finding the context engine that `context.engine` names (docs/architecture.md,
"The context engine contract").

Resolution order for a name:

1. A plugin directory ``<data_dir>/plugins/context_engine/<name>/`` holding ``__init__.py``
   (loaded as a package, so relative imports work) or ``engine.py``. The module may expose,
   checked in this order:
   - ``register(registrar)``: calls ``registrar.register(name, factory)``; the factory
     registered under the directory's name is used (or the only one, if it used another);
   - ``create_engine(settings) -> ContextEngine``;
   - exactly one concrete ``ContextEngine`` subclass defined in the module, constructed
     as ``cls(settings)``.
2. Engines registered in code with ``EngineRegistry.register``, then the entry-point group
   ``threadline.context_engines`` (the entry point loads to a factory or an engine class).
3. The built-in engines, registered the same way as any code registration but consulted
   last: ``"compressor"`` (``agent.compression.compressor.ContextCompressor``).

A plugin file is only imported when its name is resolved, so a plugin is never active
unless config names it. Unknown names and broken plugins raise ``EngineNotFoundError``
with one plain line; tracebacks go to the debug log only.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import inspect
import logging
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from agent.context_engine import ContextEngine, EngineFactory, EngineSettings
from agent.errors import EngineNotFoundError, plain_error

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "threadline.context_engines"
BUILTIN_ENGINE = "compressor"
PLUGIN_SUBDIR = ("plugins", "context_engine")
_PLUGIN_FILES = ("__init__.py", "engine.py")
# Names become directory names and module names: nothing that could walk out of the dir.
_VALID_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


class EnginePluginError(EngineNotFoundError):
    """A plugin or entry point for the requested name exists but could not be loaded."""


class _Registrar:
    """What a plugin's ``register()`` receives: it can add engines, nothing else."""

    def __init__(self) -> None:
        self.factories: dict[str, EngineFactory] = {}

    def register(self, name: str, factory: EngineFactory | type[ContextEngine]) -> None:
        self.factories[name] = _as_factory(factory, f"engine {name!r}")


def _as_factory(obj: Any, origin: str) -> EngineFactory:
    """Accept a ContextEngine subclass (called with the settings) or any other callable."""
    if inspect.isclass(obj):
        if not issubclass(obj, ContextEngine):
            raise TypeError(f"{origin} is a class but not a ContextEngine subclass")
        if inspect.isabstract(obj):
            raise TypeError(f"{origin} is abstract: {obj.__name__} misses required methods")
        return obj
    if callable(obj):
        return obj
    raise TypeError(f"{origin} is neither an engine class nor a factory")


class EngineRegistry:
    """Context engines known to one gateway; no module-level state, one per app or test."""

    def __init__(self, data_dir: Path | str | None = None, *,
                 plugin_root: Path | str | None = None,
                 entry_point_group: str | None = ENTRY_POINT_GROUP) -> None:
        # plugin_root is the `plugins/` directory itself, for hosts that already hold it.
        if plugin_root is not None:
            self.plugin_root: Path | None = Path(plugin_root) / PLUGIN_SUBDIR[1]
        elif data_dir is not None:
            self.plugin_root = Path(data_dir).joinpath(*PLUGIN_SUBDIR)
        else:
            self.plugin_root = None
        self.entry_point_group = entry_point_group  # None turns entry points off
        self._registered: dict[str, EngineFactory] = {}
        self._loaded: dict[str, EngineFactory] = {}  # plugin/entry-point results, per name
        # Built-in engines go through the same registration as everyone's, one tier down.
        self._builtin: dict[str, EngineFactory] = {}
        self.register(BUILTIN_ENGINE, _builtin_compressor, builtin=True)

    def register(self, name: str, factory: EngineFactory | type[ContextEngine], *,
                 replace: bool = False, builtin: bool = False) -> None:
        """Make `factory` available as `name` (an engine class or a settings -> engine callable).

        `builtin` puts it in the last tier, below entry points: an installed engine of the
        same name wins over ours.
        """
        if not _VALID_NAME.match(name):
            raise ValueError(f"invalid context engine name {name!r}")
        tier = self._builtin if builtin else self._registered
        if name in tier and not replace:
            raise ValueError(f"context engine {name!r} is already registered")
        tier[name] = _as_factory(factory, f"engine {name!r}")
        self._loaded.pop(name, None)  # code registration outranks a cached entry point

    def resolve(self, name: str) -> EngineFactory:
        """The factory for `name`, by the module docstring's order; EngineNotFoundError if none."""
        if not _VALID_NAME.match(name or ""):
            raise EngineNotFoundError(
                f"Invalid context engine name {name!r}: use letters, digits, '_', '-' or '.'.")
        if name in self._loaded:
            return self._loaded[name]
        plugin = self._plugin_dir(name)
        if plugin is not None:
            factory = self._load_plugin(name, plugin)
            self._loaded[name] = factory
            return factory
        if name in self._registered:
            return self._registered[name]
        entry = self._entry_point(name)
        if entry is not None:
            factory = self._load_entry_point(name, entry)
            self._loaded[name] = factory
            return factory
        if name in self._builtin:
            return self._builtin[name]
        raise EngineNotFoundError(
            f"Unknown context engine {name!r} (context.engine). "
            f"Available: {', '.join(self.available())}.")

    def create(self, name: str, settings: EngineSettings) -> ContextEngine:
        """Resolve `name` and build the engine; a factory returning a non-engine is an error."""
        engine = self.resolve(name)(settings)
        if not isinstance(engine, ContextEngine):
            raise EnginePluginError(
                f"Context engine {name!r} factory returned {type(engine).__name__}, "
                "not a ContextEngine.")
        return engine

    def available(self) -> list[str]:
        """Every name resolve() could find right now, sorted; cheap enough for an error message."""
        names = {*self._builtin, *self._registered, *self._loaded}
        if self.plugin_root is not None and self.plugin_root.is_dir():
            names.update(p.name for p in self.plugin_root.iterdir()
                         if _VALID_NAME.match(p.name) and self._plugin_dir(p.name))
        names.update(ep.name for ep in self._entry_points())
        return sorted(names)

    # -- plugin directories -------------------------------------------------------------

    def _plugin_dir(self, name: str) -> Path | None:
        if self.plugin_root is None:
            return None
        directory = self.plugin_root / name
        for filename in _PLUGIN_FILES:
            if (directory / filename).is_file():
                return directory / filename
        return None

    def _load_plugin(self, name: str, path: Path) -> EngineFactory:
        try:
            module = _import_file(path)
            return _factory_from_module(name, module)
        except Exception as exc:
            log.debug("context engine plugin %r failed to load from %s", name, path,
                      exc_info=True)
            raise EnginePluginError(
                f"Context engine plugin {name!r} failed to load from {path}: "
                f"{plain_error(exc, with_type=True)}") from None

    # -- entry points -------------------------------------------------------------------

    def _entry_points(self) -> list[importlib.metadata.EntryPoint]:
        if not self.entry_point_group:
            return []
        return list(importlib.metadata.entry_points(group=self.entry_point_group))

    def _entry_point(self, name: str) -> importlib.metadata.EntryPoint | None:
        return next((ep for ep in self._entry_points() if ep.name == name), None)

    def _load_entry_point(self, name: str, entry: importlib.metadata.EntryPoint
                          ) -> EngineFactory:
        dist = getattr(entry.dist, "name", None) or "an installed package"
        try:
            return _as_factory(entry.load(), f"entry point {entry.value!r}")
        except Exception as exc:
            log.debug("context engine entry point %r (%s) failed to load", name, entry.value,
                      exc_info=True)
            raise EnginePluginError(
                f"Context engine {name!r} from {dist} ({entry.value}) failed to load: "
                f"{plain_error(exc, with_type=True)}") from None


def _import_file(path: Path) -> ModuleType:
    """Import a plugin file under a name unique to its location (same dir, same module)."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"_threadline_context_engine_plugin_{digest}"
    cached = sys.modules.get(module_name)
    if cached is not None and getattr(cached, "__file__", None) == str(path):
        return cached
    package = path.name == "__init__.py"
    spec = importlib.util.spec_from_file_location(
        module_name, path, submodule_search_locations=[str(path.parent)] if package else None)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered before executing: dataclasses and relative imports look the module up.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _factory_from_module(name: str, module: ModuleType) -> EngineFactory:
    register = getattr(module, "register", None)
    if callable(register):
        registrar = _Registrar()
        register(registrar)
        if name in registrar.factories:
            return registrar.factories[name]
        if len(registrar.factories) == 1:
            return next(iter(registrar.factories.values()))
        raise LookupError(f"register() added {sorted(registrar.factories)}, not {name!r}")
    create = getattr(module, "create_engine", None)
    if callable(create):
        return create
    classes = [obj for obj in vars(module).values()
               if inspect.isclass(obj) and issubclass(obj, ContextEngine)
               and obj.__module__ == module.__name__ and not inspect.isabstract(obj)]
    if len(classes) == 1:
        return classes[0]
    if classes:
        raise LookupError(f"{len(classes)} engine classes; expose create_engine(settings)")
    raise LookupError("no register(), create_engine() or ContextEngine subclass found")


def _builtin_compressor(settings: EngineSettings) -> ContextEngine:
    # Imported here so the registry (and the gateway's config check) loads without it.
    from agent.compression.compressor import ContextCompressor

    return ContextCompressor(settings)


def default_registry(data_dir: Path | str | None = None) -> EngineRegistry:
    """A fresh registry with the plugin dir, entry points and the built-in compressor."""
    return EngineRegistry(data_dir)


def resolve_engine_factory(name: str, *, data_dir: Path | str | None = None,
                           plugin_root: Path | str | None = None,
                           registry: EngineRegistry | None = None) -> EngineFactory:
    """One-call startup check for the host: the factory for `name`, or EngineNotFoundError.

    `plugin_root` is `<data_dir>/plugins`; pass `registry` to include code registrations.
    """
    if registry is None:
        registry = EngineRegistry(data_dir, plugin_root=plugin_root)
    return registry.resolve(name)


def register_context_engine(registry: EngineRegistry, name: str,
                            factory: EngineFactory | type[ContextEngine]) -> None:
    """Spec-named helper for third-party code. It takes the registry explicitly: a hidden
    module-level registry would leak engines between gateways and tests."""
    registry.register(name, factory)
