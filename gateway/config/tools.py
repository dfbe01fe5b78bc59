"""`tools:`: tools from MCP servers (docs/mcp.md)."""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, model_validator

from gateway.config.base import OptStr, Section, _none_to_mapping, rule_error

SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


class McpServerConfig(Section):
    """One MCP server: a program over stdio (`command`) or a remote one (`url`)."""

    command: list[str] | None = None  # stdio: the program and its arguments
    env: dict[str, str] = Field(default_factory=dict)  # stdio: added to its environment
    cwd: OptStr = None  # stdio: its working directory
    url: OptStr = None  # streamable HTTP
    headers: dict[str, str] = Field(default_factory=dict)  # HTTP: sent with every request
    enabled: bool = True
    timeout_s: float = Field(30.0, gt=0)  # one tool call
    # The server's own tool names (or glob patterns: `get_*`), without the NAME__ prefix.
    allow: list[str] | None = None  # None: every tool the server lists
    deny: list[str] = Field(default_factory=list)  # wins over allow
    # Chat keys or glob patterns (telegram:*) where its tools are offered; empty: only
    # direct messages of admins, so a new server is never shown to strangers by accident.
    chats: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise rule_error("command", "give either command: [program, args...] (stdio) or "
                             "url: (streamable HTTP), not both and not neither")
        if self.command and not all(part.strip() for part in self.command):
            raise rule_error("command", "the program and its arguments must not be empty")
        if self.url and urlsplit(self.url).scheme not in ("http", "https"):
            raise rule_error("url", "an MCP server's URL starts with http:// or https://")
        if ((self.env or self.cwd) and self.url) or (self.headers and self.command):
            raise rule_error("command", "env and cwd go with command (stdio), headers with "
                             "url (HTTP)")
        return self


class ToolsConfig(Section):
    mcp: Annotated[dict[str, McpServerConfig], BeforeValidator(_none_to_mapping)] = Field(
        default_factory=dict)

    @model_validator(mode="after")
    def _names(self) -> ToolsConfig:
        for name in self.mcp:
            if not SERVER_NAME.fullmatch(name):
                raise rule_error("mcp", f"server name {name!r}: use letters, digits, _ and - "
                                 "(at most 32); tools are offered as NAME__tool")
        return self

    def secret_values(self) -> list[str]:
        """Header and environment values, and a password in a URL: where servers' tokens
        live."""
        return [value for server in self.mcp.values()
                for value in (*server.env.values(), *server.headers.values(),
                              urlsplit(server.url or "").password) if value]
