"""Choosing the context engine by name (docs/architecture.md, "The context engine contract")."""

from __future__ import annotations

import importlib.util
import logging
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from agent.context_engine import ContextEngine, EngineSettings
from agent.engines import (
    BUILTIN_ENGINE,
    EnginePluginError,
    EngineRegistry,
    default_registry,
    register_context_engine,
    resolve_engine_factory,
)
from agent.errors import EngineNotFoundError
from agent.usage import CanonicalUsage

SETTINGS = EngineSettings(context_length=8_192)

# The body of a minimal engine, shared by the plugin files the tests write.
ENGINE_SOURCE = '''
from agent.context_engine import ContextEngine


class {cls}(ContextEngine):
    def __init__(self, settings):
        self.context_length = settings.context_length

    @property
    def name(self):
        return {name!r}

    def update_from_response(self, usage):
        self.last_prompt_tokens = usage.prompt_tokens

    def should_compress(self, prompt_tokens=None):
        return False

    async def compress(self, messages, current_tokens=None, focus_topic=None):
        return list(messages)
'''


class KeepEverything(ContextEngine):
    """An engine registered in code: never compresses."""

    def __init__(self, settings: EngineSettings) -> None:
        self.context_length = settings.context_length

    @property
    def name(self) -> str:
        return "keep"

    def update_from_response(self, usage: CanonicalUsage) -> None:
        self.last_prompt_tokens = usage.prompt_tokens

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        return False

    async def compress(self, messages: list[dict[str, Any]], current_tokens: int | None = None,
                       focus_topic: str | None = None) -> list[dict[str, Any]]:
        return list(messages)


def write_plugin(data_dir: Path, name: str, filename: str, source: str) -> Path:
    directory = data_dir / "plugins" / "context_engine" / name
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    path.write_text(textwrap.dedent(source))
    return path


def registry(tmp_path: Path) -> EngineRegistry:
    # No entry points unless a test asks: the tests must not depend on what is installed.
    return EngineRegistry(tmp_path, entry_point_group=None)


def test_engine_class_in_a_plugin_directory_is_selected_by_name(tmp_path: Path) -> None:
    write_plugin(tmp_path, "tidy", "__init__.py", ENGINE_SOURCE.format(cls="Tidy", name="tidy"))
    engine = registry(tmp_path).create("tidy", SETTINGS)
    assert engine.name == "tidy"
    assert engine.context_length == 8_192


def test_plugin_package_can_use_relative_imports_and_create_engine(tmp_path: Path) -> None:
    write_plugin(tmp_path, "split", "impl.py", ENGINE_SOURCE.format(cls="Split", name="split"))
    write_plugin(tmp_path, "split", "__init__.py", """
        from .impl import Split

        def create_engine(settings):
            return Split(settings)
    """)
    assert registry(tmp_path).create("split", SETTINGS).name == "split"


def test_plugin_engine_py_with_register_hook(tmp_path: Path) -> None:
    write_plugin(tmp_path, "hooked", "engine.py",
                 ENGINE_SOURCE.format(cls="Hooked", name="hooked") + """
def register(registrar):
    registrar.register("hooked", Hooked)
""")
    assert registry(tmp_path).create("hooked", SETTINGS).name == "hooked"


def test_plugin_is_not_imported_unless_config_names_it(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    write_plugin(tmp_path, "eager", "__init__.py", f"open({str(marker)!r}, 'w').close()\n")
    reg = registry(tmp_path)
    reg.register("keep", KeepEverything)
    assert reg.create("keep", SETTINGS).name == "keep"
    assert "eager" in reg.available()  # listed, so an error message can name it ...
    assert not marker.exists()  # ... but never executed


def test_plugin_directory_wins_over_a_code_registration(tmp_path: Path) -> None:
    write_plugin(tmp_path, "keep", "__init__.py", ENGINE_SOURCE.format(cls="Other", name="other"))
    reg = registry(tmp_path)
    reg.register("keep", KeepEverything)
    assert reg.create("keep", SETTINGS).name == "other"


def test_broken_plugin_fails_with_one_clear_line(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = write_plugin(tmp_path, "broken", "engine.py",
                        "import json\nraise RuntimeError('bad config\\nsecond line')\n")
    reg = registry(tmp_path)
    with caplog.at_level(logging.DEBUG, logger="agent.engines"):
        with pytest.raises(EngineNotFoundError) as info:
            reg.resolve("broken")
    message = str(info.value)
    assert isinstance(info.value, EnginePluginError)
    assert str(path) in message and "RuntimeError: bad config" in message
    assert "\n" not in message and "Traceback" not in message
    assert "Traceback" in caplog.text  # the detail goes to the debug log


def test_plugin_without_an_engine_says_what_it_expected(tmp_path: Path) -> None:
    write_plugin(tmp_path, "empty", "__init__.py", "VALUE = 1\n")
    with pytest.raises(EnginePluginError, match="no register\\(\\), create_engine\\(\\)"):
        registry(tmp_path).resolve("empty")


def test_engine_registered_in_code_is_selected_by_name(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    register_context_engine(reg, "keep", KeepEverything)
    reg.register("keep-factory", lambda settings: KeepEverything(settings))
    assert isinstance(reg.create("keep", SETTINGS), KeepEverything)
    assert isinstance(reg.create("keep-factory", SETTINGS), KeepEverything)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("keep", KeepEverything)


def test_registrations_do_not_leak_between_registries(tmp_path: Path) -> None:
    first, second = registry(tmp_path), registry(tmp_path)
    first.register("keep", KeepEverything)
    with pytest.raises(EngineNotFoundError):
        second.resolve("keep")


def test_registering_a_non_engine_class_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="not a ContextEngine"):
        registry(tmp_path).register("bad", dict)  # type: ignore[arg-type]


def test_entry_point_engine_is_selected_by_name(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # A real installed-distribution layout on sys.path: importlib.metadata reads it as is.
    module = f"ep_engine_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(ENGINE_SOURCE.format(cls="FromEntryPoint",
                                                                name="from-ep"))
    dist_info = tmp_path / "threadline_ep_test-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: threadline-ep-test\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        f"[threadline.context_engines]\nfrom-ep = {module}:FromEntryPoint\n"
        f"broken-ep = {module}:Missing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        reg = EngineRegistry(tmp_path / "data")  # default group: threadline.context_engines
        assert "from-ep" in reg.available()
        assert reg.create("from-ep", SETTINGS).name == "from-ep"
        with pytest.raises(EnginePluginError) as info:
            reg.resolve("broken-ep")
        assert str(info.value) == (
            f"Context engine 'broken-ep' from threadline-ep-test ({module}:Missing) failed to "
            f"load: AttributeError: module '{module}' has no attribute 'Missing'")
    finally:
        sys.modules.pop(module, None)


def test_unknown_name_is_a_clear_error_listing_what_exists(tmp_path: Path) -> None:
    write_plugin(tmp_path, "tidy", "__init__.py", ENGINE_SOURCE.format(cls="Tidy", name="tidy"))
    reg = registry(tmp_path)
    reg.register("keep", KeepEverything)
    with pytest.raises(EngineNotFoundError) as info:
        reg.resolve("compresser")
    message = str(info.value)
    assert message == ("Unknown context engine 'compresser' (context.engine). "
                       "Available: compressor, keep, tidy.")


@pytest.mark.parametrize("name", ["../escape", "a/b", "", ".hidden"])
def test_names_cannot_reach_outside_the_plugin_directory(tmp_path: Path, name: str) -> None:
    with pytest.raises(EngineNotFoundError, match="Invalid context engine name"):
        registry(tmp_path).resolve(name)


def test_builtin_compressor_resolves_without_any_plugins(tmp_path: Path) -> None:
    reg = default_registry(tmp_path)
    factory = reg.resolve(BUILTIN_ENGINE)  # resolving never needs the compressor module
    assert callable(factory)
    if importlib.util.find_spec("agent.compression.compressor") is None:
        pytest.skip("agent.compression.compressor is not written yet")
    engine = reg.create(BUILTIN_ENGINE, SETTINGS)
    assert engine.name == "compressor"


def test_host_startup_helper_finds_plugins_under_the_plugins_root(tmp_path: Path) -> None:
    write_plugin(tmp_path, "tidy", "__init__.py", ENGINE_SOURCE.format(cls="Tidy", name="tidy"))
    factory = resolve_engine_factory("tidy", plugin_root=tmp_path / "plugins")
    assert factory(SETTINGS).name == "tidy"
    with pytest.raises(EngineNotFoundError, match="Unknown context engine 'nope'"):
        resolve_engine_factory("nope", data_dir=tmp_path)
