"""The tools one agent may offer: built-ins, its context engine's, and plugins.

A tool is a name, a description, a JSON schema for its arguments and an async function
from arguments to text. Plugins come from the `threadline.tools` entry point group: each
entry point names a callable that returns a Tool or a list of them. Schemas are offered
sorted by name, so the request prefix stays byte-stable from turn to turn (prompt caching
depends on it).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "threadline.tools"
Run = Callable[[dict[str, Any]], Awaitable[str] | str]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    run: Run
    parameters: dict[str, Any] = field(default_factory=lambda: {
        "type": "object", "properties": {}})
    saves_output: bool = True  # False for the tool that reads saved output back

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}

    async def __call__(self, arguments: dict[str, Any]) -> str:
        result = self.run(arguments)
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, str) else str(result)


class ToolRegistry:
    """Tools by name; a later tool of the same name is refused, not silently swapped."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [self._tools[name].schema() for name in sorted(self._tools)]


def engine_tools(engine: Any) -> list[Tool]:
    """The context engine's own tools (`get_tool_schemas` / `handle_tool_call`)."""
    tools = []
    for schema in engine.get_tool_schemas() or []:
        function = schema.get("function", schema)
        name = function["name"]

        def run(arguments: dict[str, Any], name: str = name) -> str:
            return engine.handle_tool_call(name, arguments)

        tools.append(Tool(name, function.get("description", ""), run,
                          function.get("parameters") or {"type": "object", "properties": {}}))
    return tools


def plugin_tools(group: str = ENTRY_POINT_GROUP) -> list[Tool]:
    """Tools from installed packages; a broken plugin is logged and left out."""
    found: list[Tool] = []
    for point in entry_points(group=group):
        try:
            made = point.load()()
            found.extend(made if isinstance(made, list | tuple) else [made])
        except Exception as exc:
            log.error("tool plugin %s could not be loaded: %s", point.name, exc)
    return found
