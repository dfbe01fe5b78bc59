"""Running the tool calls of one assistant message: all at once, every call answered.

Whatever goes wrong (an unknown name, arguments that are not a JSON object, a tool that
raises or runs past its time) becomes that call's result, in words the model can act on,
so every tool call is paired with a result and the next request is valid. A tool that
wants to know how its calls end (to log and count them) is told by `observe`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from agent.errors import plain_error
from agent.tools.registry import Output, Tool, ToolError, ToolRegistry

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
    content = await _result(tool, name, function.get("arguments"))
    return tool, {"role": "tool", "tool_call_id": call.get("id") or "", "content": content}


async def _result(tool: Tool | None, name: str, raw: Any) -> Output:
    if tool is None:
        return f"Error: there is no tool named {name!r}."
    started = time.monotonic()
    outcome = "cancelled"  # unless it ends below: a /stop, or the gateway stopping
    try:
        outcome, result = await _run(tool, name, raw)
        return result
    finally:
        if tool.observe is not None:
            tool.observe(outcome, time.monotonic() - started)


async def _run(tool: Tool, name: str, raw: Any) -> tuple[str, Output]:
    """(how the call ended, its result)."""
    arguments = _arguments(raw)
    if arguments is None:
        return "invalid", (f"Error: the arguments for {name} were not a JSON object, so it "
                           "did not run. Call it again with valid JSON arguments.")
    limit = tool.timeout_s or TOOL_TIMEOUT_S
    try:
        return "ok", await asyncio.wait_for(tool(arguments), limit)
    except TimeoutError:
        return "timeout", f"Error: {name} did not finish within {limit:g} seconds."
    except ToolError as exc:  # the tool's own words: no traceback to log
        return exc.outcome, f"Error: {name}: {exc}"
    except Exception as exc:
        log.warning("tool %s failed: %s", name, plain_error(exc), exc_info=True)
        return "error", f"Error: {name} failed: {plain_error(exc, limit=300)}"


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
