"""Running the tool calls of one assistant message: all at once, every call answered.

Whatever goes wrong (an unknown name, arguments that are not a JSON object, a tool that
raises) becomes that call's result, in words the model can act on, so every tool call is
paired with a result and the next request is valid.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from agent.errors import plain_error
from agent.tools.registry import Tool, ToolRegistry

log = logging.getLogger(__name__)

TOOL_TIMEOUT_S = 60.0


async def run_calls(registry: ToolRegistry, calls: list[dict[str, Any]]
                    ) -> list[tuple[Tool | None, dict[str, Any]]]:
    """(tool, tool message) per call, in the order of the calls."""
    return list(await asyncio.gather(*(_one(registry, call) for call in calls)))


async def _one(registry: ToolRegistry, call: dict[str, Any]
               ) -> tuple[Tool | None, dict[str, Any]]:
    function = call.get("function") or {}
    name = str(function.get("name") or "")
    tool = registry.get(name)
    text = await _result(tool, name, function.get("arguments"))
    return tool, {"role": "tool", "tool_call_id": call.get("id") or "", "content": text}


async def _result(tool: Tool | None, name: str, raw: Any) -> str:
    if tool is None:
        return f"Error: there is no tool named {name!r}."
    arguments = _arguments(raw)
    if arguments is None:
        return (f"Error: the arguments for {name} were not a JSON object, so it did not "
                "run. Call it again with valid JSON arguments.")
    try:
        return await asyncio.wait_for(tool(arguments), TOOL_TIMEOUT_S)
    except TimeoutError:
        return f"Error: {name} did not finish within {TOOL_TIMEOUT_S:.0f} seconds."
    except Exception as exc:
        log.warning("tool %s failed: %s", name, plain_error(exc), exc_info=True)
        return f"Error: {name} failed: {plain_error(exc, limit=300)}"


def _arguments(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    try:
        parsed = json.loads(raw)
    except (TypeError, ValueError, RecursionError):  # RecursionError: nested too deep
        return None
    return parsed if isinstance(parsed, dict) else None
