"""The gateway's folders follow a message's path, and imports run one way down it
(gateway/__init__.py; docs/architecture.md, "The gateway's folders"): a module imports
from its own folder and from the folders below it, never from one above. Every import
counts, one inside a function or under TYPE_CHECKING too: a lazy import is still a
dependency, only a later one."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# Highest first. The last level is what every folder shares; its parts may import each
# other. A module that no level names is an error too: a new one is placed on purpose.
ORDER: tuple[tuple[str, ...], ...] = (
    ("gateway.cli",),
    ("gateway.web",),
    ("gateway.wiring",),
    ("gateway.service",),
    ("gateway.inbound",),
    ("gateway.turns",),
    ("gateway.delivery",),
    ("gateway.auth", "gateway.clock", "gateway.metrics", "gateway.offload", "gateway.store_open",
     "gateway.config", "gateway.mcp"),
)
PACKAGE = "gateway"  # gateway/__init__.py: a docstring, on no level, importing nothing


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(root: Path, name: str) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imported(root: Path, tree: ast.AST, name: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) of every import in a module, relative ones made absolute."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            # `from gateway.cli import run` imports the module gateway.cli.run
            found += [(node.lineno, f"{base}.{alias.name}" if is_module(
                root, f"{base}.{alias.name}") else base) for alias in node.names]
    return found


def level(module: str) -> int | None:
    """The module's level in ORDER (0 is the top), by the longest prefix that names it."""
    best: tuple[int, int] | None = None  # (prefix length, level)
    for index, names in enumerate(ORDER):
        for prefix in names:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), index)
    return None if best is None else best[1]


def against_the_order(root: Path) -> list[str]:
    """One line per import that runs upward, and per module ORDER does not place."""
    problems = []
    for path in sorted((root / "gateway").rglob("*.py")):
        name = module_name(path, root)
        own = level(name)
        if name == PACKAGE:
            own = len(ORDER)
        elif own is None:
            problems.append(f"{path.relative_to(root)}: no level in ORDER holds {name}")
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, target in imported(root, tree, name, path.name == "__init__.py"):
            if not target.startswith(PACKAGE + "."):
                continue
            theirs = level(target)
            if theirs is not None and theirs < own:
                problems.append(f"{path.relative_to(root)}:{line}: {name} imports {target}, "
                                "a folder above it")
    return problems


def test_imports_run_one_way_down_the_path_of_a_message():
    assert against_the_order(ROOT) == []


def test_an_import_from_a_folder_above_is_reported_with_its_place(tmp_path):
    """The check itself: delivery reaching up into turns, lazily, is caught."""
    for folder in ("gateway", "gateway/turns", "gateway/delivery"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "gateway/turns/worker.py").write_text("from gateway.delivery import outbound\n")
    (tmp_path / "gateway/delivery/outbound.py").write_text(
        "def send():\n    from gateway.turns.worker import GENERIC_FAILURE\n")
    (tmp_path / "gateway/stray.py").write_text("")
    assert against_the_order(tmp_path) == [
        "gateway/delivery/outbound.py:2: gateway.delivery.outbound imports "
        "gateway.turns.worker, a folder above it",
        "gateway/stray.py: no level in ORDER holds gateway.stray",
    ]
