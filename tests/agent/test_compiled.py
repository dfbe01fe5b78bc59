"""The modules setup.py compiles are the ones that run, and they are built from the
sources beside them (docs/architecture.md, "Compiled modules")."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def compiled_sources() -> list[str]:
    """setup.py's COMPILED list, read without running setup.py (Cython is a build-only
    requirement, absent from the virtualenv)."""
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMPILED":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no COMPILED list")


SOURCES = compiled_sources()


def module_name(source: str) -> str:
    return source.removesuffix(".py").replace("/", ".")


def test_setup_compiles_at_least_the_render_loop() -> None:
    assert "agent/compression/render.py" in SOURCES


@pytest.mark.parametrize("source", SOURCES)
def test_the_compiled_module_is_the_one_imported(source: str) -> None:
    module = importlib.import_module(module_name(source))
    origin = Path(module.__file__ or "")
    assert origin.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), (
        f"{source} runs as plain Python: `make` builds it (it needs a C compiler)")
    assert origin.parent == (ROOT / source).parent


@pytest.mark.parametrize("source", SOURCES)
def test_no_compiled_module_is_older_than_its_source(source: str) -> None:
    origin = Path(importlib.import_module(module_name(source)).__file__ or "")
    inputs = [ROOT / source, (ROOT / source).with_suffix(".pxd")]
    newest = max(path.stat().st_mtime for path in inputs if path.exists())
    assert origin.stat().st_mtime >= newest, (
        f"{source} changed after it was compiled: run `make` to rebuild it")
