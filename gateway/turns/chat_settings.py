"""`chats:` looked up: a chat's own setting, else its group's, else none (docs/groups.md,
"Per-chat settings"). A topic's or thread's key is `platform:chat:thread`; the group's key
`platform:chat` covers all of them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gateway.config.chats import ChatSettings

NAMES = ("require_mention", "group_context", "wake_words", "system_prompt", "model")


def _keys(chat_key: str) -> Iterator[str]:
    yield chat_key
    platform, _, rest = chat_key.partition(":")
    chat, sep, _ = rest.partition(":")
    if sep:
        yield f"{platform}:{chat}"


class PerChat:
    def __init__(self, chats: Mapping[str, ChatSettings] | None = None) -> None:
        self._chats = dict(chats or {})

    def find(self, chat_key: str, name: str) -> tuple[Any, str] | None:
        """(value, the key that set it) for one setting of a chat; None when unset."""
        for key in _keys(chat_key):
            settings = self._chats.get(key)
            value = getattr(settings, name) if settings else None
            if value is not None:
                return value, key
        return None

    def get(self, chat_key: str, name: str) -> Any:
        found = self.find(chat_key, name)
        return None if found is None else found[0]

    def models(self) -> set[str]:
        return {s.model for s in self._chats.values() if s.model}

    def describe(self, chat_key: str) -> str | None:
        """For /status: which settings apply to this chat and where they come from."""
        found = {name: self.find(chat_key, name) for name in NAMES}
        parts = [f"{name} (from {hit[1]})" for name, hit in found.items() if hit]
        return "Chat settings: " + ", ".join(parts) if parts else None
