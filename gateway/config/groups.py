"""How the bot behaves in group chats, per platform (docs/groups.md): which messages are
for it (wake words, free-response chats) and what it reads of the room meanwhile."""

from __future__ import annotations

from pydantic import Field, field_validator

from gateway.config.base import Section


class GroupContextConfig(Section):
    """Room context: unaddressed group messages are kept and shown with the next mention."""

    enabled: bool = False
    max_messages: int = Field(50, ge=1, le=1000)
    max_tokens: int = Field(2000, ge=50, le=200_000)
    max_age_minutes: float = Field(120, gt=0)


def words(value: list[str]) -> list[str]:
    words = [w.strip() for w in value]
    for word in words:
        if not word or len(word) > 64 or "\n" in word:
            raise ValueError(f"{word!r} is not a wake word (one line of 1 to 64 characters)")
    return words


class GroupSettings(Section):
    """Shared by the Telegram and Discord sections."""

    group_context: GroupContextConfig = Field(default_factory=GroupContextConfig)
    # Whole words, any case, that address the bot like a mention ("threadie").
    wake_words: list[str] = []
    # Chat keys (a channel, a group, a topic: `telegram:-100123:7`) where every message is
    # addressed to the bot; a group's key covers its topics.
    free_response: list[str] = []

    @field_validator("wake_words")
    @classmethod
    def _check_words(cls, value: list[str]) -> list[str]:
        return words(value)
