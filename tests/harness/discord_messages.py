"""Discord's non-default messages as MESSAGE_CREATE carries them: system messages and
forwards. Pure builders; `discord_events.py` stores and dispatches them.

Type numbers are Discord's; the names are discord.py's `MessageType` members, so
`discord.MessageType[name].value == SYSTEM_TYPES[name]`.
"""

from __future__ import annotations

from typing import Any

from tests.harness import discord_payloads as p

SYSTEM_TYPES: dict[str, int] = {
    "recipient_add": 1, "recipient_remove": 2, "call": 3, "channel_name_change": 4,
    "channel_icon_change": 5, "pins_add": 6, "new_member": 7,
    "premium_guild_subscription": 8, "premium_guild_tier_1": 9, "premium_guild_tier_2": 10,
    "premium_guild_tier_3": 11, "thread_created": 18, "auto_moderation_action": 24,
    "poll_result": 46}
FORWARD = 1  # message_reference.type of a forward (0: a reply, or any other reference)
HAS_SNAPSHOT = 1 << 14  # message flag of a forward (discord.py: MessageFlags.forwarded)
SNAPSHOT_FIELDS = ("type", "content", "embeds", "attachments", "timestamp", "edited_timestamp",
                   "flags", "mentions", "mention_roles", "components")


def type_number(kind: str | int) -> int:
    return kind if isinstance(kind, int) else SYSTEM_TYPES[kind]


def system(message_id: str, channel_id: str, author: dict[str, Any], kind: str | int, *,
           content: str = "", mentions: list[dict[str, Any]] | None = None,
           reference: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A system message: Discord writes it (the author is who acted), content is the
    type's detail (a new name, a boost count) or empty."""
    data = p.message(message_id, channel_id, author, content, mentions=mentions,
                     reference=reference)
    data["type"] = type_number(kind)
    data.update(fields)
    return data


def reference(message_id: str | None, channel_id: str, guild_id: str | None, *,
              kind: int = 0) -> dict[str, Any]:
    """A message_reference; `message_id` None for a thread-created notice (the thread)."""
    data: dict[str, Any] = {"type": kind, "channel_id": channel_id}
    if message_id is not None:
        data["message_id"] = message_id
    if guild_id is not None:
        data["guild_id"] = guild_id
    return data


def call(participant_ids: list[str], *, ended: bool = False) -> dict[str, Any]:
    """A call notice's `call` object (DMs and group DMs only)."""
    return {"participants": participant_ids, "ended_timestamp": p.now_iso() if ended else None}


def automod_embed(channel_id: str, decision_id: str, *, rule_name: str, keyword: str,
                  content: str) -> dict[str, Any]:
    """The embed of an AutoMod alert (type 24): the blocked text and what matched."""
    fields = {"rule_name": rule_name, "channel_id": channel_id, "decision_id": decision_id,
              "decision_outcome": "blocked", "keyword": keyword,
              "keyword_matched_content": keyword}
    return {"type": "auto_moderation_message", "description": content,
            "fields": [{"name": k, "value": v, "inline": False} for k, v in fields.items()]}


def poll_result_embed(question: str, *, total_votes: int, winner: tuple[int, str, int] | None
                      ) -> dict[str, Any]:
    """The embed of a poll result (type 46); `winner` is (answer id, text, votes)."""
    fields = {"poll_question_text": question, "total_votes": str(total_votes)}
    if winner is not None:
        answer_id, text, votes = winner
        fields.update(victor_answer_id=str(answer_id), victor_answer_text=text,
                      victor_answer_votes=str(votes))
    else:
        fields["victor_answer_votes"] = "0"
    return {"type": "poll_result", "fields": [{"name": k, "value": v, "inline": False}
                                              for k, v in fields.items()]}


def snapshot(message: dict[str, Any]) -> dict[str, Any]:
    """One entry of `message_snapshots`: a copy of the forwarded message's content fields
    (no id, author or channel: a forward does not say who wrote the original)."""
    return {"message": {k: message.get(k, [] if k != "flags" else 0) for k in SNAPSHOT_FIELDS}}


def group_dm(channel_id: str, owner_id: str, recipients: list[dict[str, Any]],
             name: str | None) -> dict[str, Any]:
    return {"id": channel_id, "type": 3, "name": name, "icon": None, "owner_id": owner_id,
            "last_message_id": None, "flags": 0, "recipients": recipients}
