"""Where a server's tools are offered (`chats`) and which of them (`allow`, `deny`).

A server without `chats` is offered only in direct messages with a configured admin
(the console counts as one), so a newly added server is never shown to strangers by
accident. Whether a chat is such a direct message is learnt from its messages: a chat
that is not a group, whose senders are all configured admins. A tool not offered is
unknown to the chat's model: a call to it gets the loop's plain refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from fnmatch import fnmatchcase

from gateway.config.tools import McpServerConfig
from platforms.base import ChatRef

Owner = Callable[[str, str], bool]  # (platform, user id) -> a configured admin?


class McpAccess:
    def __init__(self, servers: Mapping[str, McpServerConfig], owner: Owner) -> None:
        self._servers = dict(servers)
        self._owner = owner
        self._admin_dms: set[str] = set()  # chat keys

    def note(self, chat: ChatRef, senders: Iterable[str | None]) -> bool:
        """Learn from a batch of a chat's messages; True when the chat just became known
        as an admin's direct messages."""
        if chat.group or chat.key in self._admin_dms:
            return False
        ids = [s for s in senders if s]
        if ids and all(self._owner(chat.platform, s) for s in ids):
            self._admin_dms.add(chat.key)
            return True
        return False

    def offered(self, server: str, chat_key: str) -> bool:
        """Whether the server's tools are offered in this chat at all."""
        patterns = self._servers[server].chats
        if not patterns:
            return chat_key in self._admin_dms
        return any(fnmatchcase(chat_key, pattern) for pattern in patterns)

    def allowed(self, server: str, tool: str) -> bool:
        """Whether the server's tool (its own name) passes `allow` and `deny`."""
        config = self._servers[server]
        if config.allow is not None and not any(fnmatchcase(tool, p) for p in config.allow):
            return False
        return not any(fnmatchcase(tool, p) for p in config.deny)
