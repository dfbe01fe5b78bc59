"""`threadline doctor` for MCP servers: each enabled one is started (or reached), asked
for its tools and closed; one line each, without its secrets."""

from __future__ import annotations

from collections.abc import Awaitable

from agent.tools.mcp.connection import McpConnection, ServerSpec, describe_failure
from gateway.cli.doctor.result import Result
from gateway.config import Config

SHOWN = 8  # tool names on the line; the rest are counted


def mcp_checks(config: Config) -> list[tuple[str, Awaitable[Result], str | None]]:
    from gateway.wiring.settings import mcp_servers

    return [(f"mcp {spec.name}", check_server(spec), None) for spec in mcp_servers(config)]


async def check_server(spec: ServerSpec) -> Result:
    check = f"mcp {spec.name}"
    connection = McpConnection(spec)
    try:
        listed = await connection.list_once()
    except Exception as exc:
        why = describe_failure(exc, spec, connection.program)
        return Result(check, False, f"{spec.transport}: {why}")
    names = [tool.name for tool in listed]
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    shown = ", ".join(names[:SHOWN]) + more
    return Result(check, True, f"{spec.transport}, {len(names)} tool(s)"
                  + (f": {shown}" if names else ""))
