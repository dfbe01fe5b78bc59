"""Tools for gateway tests, installed the way an operator installs a tool plugin.

`install_tool_plugin` writes a real distribution layout (a `.dist-info` with an
`entry_points.txt` in the `threadline.tools` group) into a directory and puts it on
`sys.path`, so `importlib.metadata` finds the plugin exactly as it finds an installed
package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.tools.registry import ENTRY_POINT_GROUP, Tool


def add_numbers() -> Tool:
    """A plugin tool whose name sorts before every built-in one."""

    def run(arguments: dict[str, Any]) -> str:
        return str(sum(float(n) for n in arguments.get("numbers") or []))

    return Tool("add_numbers", "Add a list of numbers.", run, {
        "type": "object", "required": ["numbers"],
        "properties": {"numbers": {"type": "array", "items": {"type": "number"}}}})


def install_tool_plugin(directory: Path, monkeypatch: pytest.MonkeyPatch,
                        target: str = "tests.harness.tools:add_numbers") -> None:
    """An installed distribution offering `target` as a tool plugin (until the test ends)."""
    dist_info = directory / "threadline_tool_test-1.0.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: threadline-tool-test\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{target.rpartition(':')[2]} = {target}\n")
    monkeypatch.syspath_prepend(str(directory))
