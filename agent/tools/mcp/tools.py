"""A tool an MCP server lists, as a `Tool` the loop runs: `NAME__tool`, its arguments
checked against its input schema before the call, the server's failure in words, and
its pictures kept like pictures people send (the host's `keep`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from jsonschema.exceptions import best_match
from mcp.shared.exceptions import MCPError

from agent.tools.mcp.connection import SEPARATOR, Listed, McpConnection, ServerDown
from agent.tools.mcp.results import McpOutput, Picture, read_result
from agent.tools.registry import InvalidArguments, Observe, Output, Tool, ToolError

# A picture and the tool's name -> an attachment part to store, or words saying why not.
Keep = Callable[[Picture, str], Awaitable[dict[str, Any] | str]]
NO_TEXT = "(the tool returned nothing)"


def tool_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def mcp_tool(connection: McpConnection, listed: Listed, *, keep: Keep | None = None,
             observe: Observe | None = None) -> Tool:
    name = tool_name(connection.name, listed.name)

    async def run(arguments: dict[str, Any]) -> Output:
        problem = best_match(listed.validator.iter_errors(arguments))
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "the arguments"
            raise InvalidArguments(
                f"the arguments do not fit its schema ({where}: {problem.message[:300]}), so "
                "it did not run. Call it again with arguments that fit.")
        try:
            result = await connection.call(listed.name, arguments)
        except ServerDown as exc:
            raise ToolError(f"{exc}; try again later.") from exc
        except MCPError as exc:  # not the tool's result: the protocol's own error
            if exc.error.code == types.CONNECTION_CLOSED:
                raise ToolError("the MCP server went away during the call; try again in a "
                                "moment.") from exc
            raise ToolError(f"the server refused the call: {exc.error.message[:300]}") from exc
        output = read_result(result)
        if output.error:
            raise ToolError(output.text.strip()[:2_000] or "it failed without saying why")
        return await _content(output, name, keep)

    return Tool(name, listed.description, run, listed.schema,
                timeout_s=connection.spec.timeout_s, observe=observe)


async def _content(output: McpOutput, name: str, keep: Keep | None) -> Output:
    """Plain text, or content parts when a picture was kept (text first)."""
    if not output.pictures:
        return output.text or NO_TEXT
    parts: list[dict[str, Any]] = [{"type": "text", "text": output.text}] if output.text else []
    for picture in output.pictures:
        kept = await keep(picture, name) if keep is not None else \
            "[a picture was returned; pictures cannot be kept here]"
        parts.append(kept if isinstance(kept, dict) else {"type": "text", "text": kept})
    if all(part.get("type") == "text" for part in parts):  # nothing kept: words only
        return "\n".join(part["text"] for part in parts)
    return parts
