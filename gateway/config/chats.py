"""`chats:`: settings for one chat, over its platform's (docs/groups.md, "Per-chat
settings"). Keys are chat keys as the gateway names chats (`/status` shows a chat's)."""

from __future__ import annotations

import re

from pydantic import field_validator

from gateway.config.base import OptStr, Section
from gateway.config.groups import GroupContextConfig, words

# platform:chat[:thread]; a group's key also covers its topics and threads.
CHAT_KEY = re.compile(r"(?:telegram|discord|console):[^\s:]+(?::[^\s:]+)?")


class ChatSettings(Section):
    """Unset (null) keys leave the platform's setting in force."""

    require_mention: bool | None = None
    group_context: GroupContextConfig | None = None
    wake_words: list[str] | None = None
    system_prompt: OptStr = None  # for the chat's sessions started from now on
    model: OptStr = None  # the same provider, another of its models

    @field_validator("wake_words")
    @classmethod
    def _check_words(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else words(value)


def check_chat_keys(chats: dict[str, ChatSettings]) -> dict[str, ChatSettings]:
    for key in chats:
        if not CHAT_KEY.fullmatch(key):
            raise ValueError(f"{key!r} is not a chat key (telegram:<chat id>[:<topic>], "
                             "discord:<channel id>; /status shows a chat's)")
    return chats
