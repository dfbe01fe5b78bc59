"""The tools one agent may offer: built-ins, its context engine's, and plugins.

A tool is a name, a description, a JSON schema for its arguments and an async function
from arguments to text (or to content parts, when it returns pictures). Plugins come from
the `threadline.tools` entry point group: each entry point names a callable that returns a
Tool or a list of them. Tools that come and go (an MCP server's, while it is connected)
join through a source, asked at every request. Schemas are offered sorted by name, so the
request prefix stays byte-stable from turn to turn (prompt caching depends on it).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "threadline.tools"
# What a tool gives back: text, or content parts (text and attachment parts: a picture).
Output = str | list[dict[str, Any]]
Run = Callable[[dict[str, Any]], Awaitable[Output] | Output]
# Told how each call ended ("ok", "error", "timeout", "invalid", "cancelled") and how long
# it took, by the loop that ran it (agent/tools/calls.py).
Observe = Callable[[str, float], None]
# Tools that may change between requests; a source returns the same sequence object
# while nothing changed, so the schemas offered are not rebuilt for every request.
ToolSource = Callable[[], Sequence["Tool"]]


class ToolError(Exception):
    """The tool ran, or refused to, and says why in words for the model (no traceback)."""

    outcome = "error"


class InvalidArguments(ToolError):
    """The arguments do not fit the tool's schema: it did not run."""

    outcome = "invalid"


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    run: Run
    parameters: dict[str, Any] = field(default_factory=lambda: {
        "type": "object", "properties": {}})
    saves_output: bool = True  # False for the tool that reads saved output back
    timeout_s: float | None = None  # one call; None: the loop's default
    observe: Observe | None = None

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}

    async def __call__(self, arguments: dict[str, Any]) -> Output:
        result = self.run(arguments)
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, str | list) else str(result)


class ToolRegistry:
    """Tools by name; a later tool of the same name is refused, not silently swapped.
    A source's tool never shadows a fixed one of the same name."""

    def __init__(self, tools: Iterable[Tool] = (), sources: Iterable[ToolSource] = ()
                 ) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)
        self._sources = tuple(sources)
        # What the sources gave last time, and the tools and schemas made from it.
        self._seen: tuple[Sequence[Tool], ...] = ()
        self._offered: tuple[dict[str, Tool], list[dict[str, Any]]] | None = None

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._offered = None

    def _current(self) -> tuple[dict[str, Tool], list[dict[str, Any]]]:
        """Every tool offered now, and their schemas (the same list while nothing changed)."""
        given = tuple(source() for source in self._sources)
        offered = self._offered
        if offered is None or len(given) != len(self._seen) \
                or any(a is not b for a, b in zip(given, self._seen, strict=True)):
            tools = {tool.name: tool for found in given for tool in found}
            tools.update(self._tools)
            offered = (tools, [tools[name].schema() for name in sorted(tools)])
            self._seen, self._offered = given, offered
        return offered

    def get(self, name: str) -> Tool | None:
        return self._current()[0].get(name) if self._sources else self._tools.get(name)

    def __len__(self) -> int:
        return len(self._current()[0]) if self._sources else len(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """Sorted by name; the same list object until the tools offered change."""
        return self._current()[1]


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
