"""Telegram updates beyond a person's text: service messages, anonymous admins, posts as a
channel and a group's upgrade to a supergroup, shaped like the Bot API sends them.

`ServiceUpdates(fake.updates)` builds them with the factory's ids, so they mix with
ordinary updates in one chat's order.
"""

from __future__ import annotations

from typing import Any

from tests.harness.telegram_updates import (
    DEFAULT_GROUP_ID,
    DEFAULT_USER_ID,
    UpdateFactory,
    chat_dict,
    mention_entity,
    user_dict,
)

ANONYMOUS_ADMIN_BOT = {"id": 1087968824, "is_bot": True, "first_name": "Group",
                       "username": "GroupAnonymousBot"}  # who an anonymous admin sends as
CHANNEL_BOT = {"id": 136817688, "is_bot": True, "first_name": "Channel",
               "username": "Channel_Bot"}  # who a post as a channel comes from
LINKED_CHANNEL = {"id": -1001999000111, "type": "channel", "title": "The Project Channel"}


def service_fields(kind: str, user_id: int = DEFAULT_USER_ID) -> dict[str, Any]:
    """The one field that makes a message a service message of `kind`."""
    other = user_dict(user_id + 7)
    return {
        "pinned_message": lambda: {"pinned_message": {
            "message_id": 1, "date": 0, "chat": chat_dict(DEFAULT_GROUP_ID), "text": "old"}},
        "new_chat_members": lambda: {"new_chat_members": [other]},
        "left_chat_member": lambda: {"left_chat_member": other},
        "new_chat_title": lambda: {"new_chat_title": "A new name"},
        "delete_chat_photo": lambda: {"delete_chat_photo": True},
        "message_auto_delete_timer_changed": lambda: {
            "message_auto_delete_timer_changed": {"message_auto_delete_time": 86400}},
        "write_access_allowed": lambda: {"write_access_allowed": {"from_request": True}},
        "users_shared": lambda: {"users_shared": {"request_id": 1, "users": [
            {"user_id": user_id + 9}]}},
        "forum_topic_created": lambda: {"forum_topic_created": {
            "name": "Planning", "icon_color": 7322096}},
        "video_chat_started": lambda: {"video_chat_started": {}},
    }[kind]()


GROUP_SERVICE_KINDS = ("pinned_message", "new_chat_members", "left_chat_member",
                       "new_chat_title", "delete_chat_photo",
                       "message_auto_delete_timer_changed", "forum_topic_created",
                       "video_chat_started")
PRIVATE_SERVICE_KINDS = ("pinned_message", "message_auto_delete_timer_changed",
                         "write_access_allowed", "users_shared")


class ServiceUpdates:
    def __init__(self, factory: UpdateFactory) -> None:
        self.factory = factory

    def service(self, kind: str, *, chat_id: int = DEFAULT_GROUP_ID,
                user_id: int = DEFAULT_USER_ID) -> dict[str, Any]:
        message = self.factory.message(chat_id=chat_id, user_id=user_id,
                                       **service_fields(kind, user_id))
        return self.factory.update(message)

    def anonymous_admin(self, text: str, chat_id: int = DEFAULT_GROUP_ID,
                        mention: bool = True) -> dict[str, Any]:
        """A text an anonymous admin sends: from GroupAnonymousBot, as the group itself."""
        return self._as_chat(text, chat_id, ANONYMOUS_ADMIN_BOT, chat_dict(chat_id), mention)

    def channel_post(self, text: str, chat_id: int = DEFAULT_GROUP_ID,
                     mention: bool = True) -> dict[str, Any]:
        """A member posting in the group as the group's linked channel."""
        return self._as_chat(text, chat_id, CHANNEL_BOT, dict(LINKED_CHANNEL), mention)

    def _as_chat(self, text: str, chat_id: int, sender: dict[str, Any],
                 sender_chat: dict[str, Any], mention: bool) -> dict[str, Any]:
        fields: dict[str, Any] = {"text": text}
        name = f"@{self.factory.bot_username}"
        entities = []
        if text.startswith("/"):
            command = text.split()[0]
            entities.append({"type": "bot_command", "offset": 0, "length": len(command)})
        elif mention and name in text:
            entities.append(mention_entity(text, self.factory.bot_username))
        if entities:
            fields["entities"] = entities
        message = self.factory.message(chat_id=chat_id, **fields)
        message["from"] = dict(sender)
        message["sender_chat"] = sender_chat
        return self.factory.update(message)

    def migrated(self, old_chat_id: int, new_chat_id: int,
                 user_id: int = DEFAULT_USER_ID) -> tuple[dict[str, Any], dict[str, Any]]:
        """The two service messages of an upgrade: in the old group, where it went
        (`migrate_to_chat_id`); in the supergroup, where it came from."""
        old = self.factory.message(chat_id=old_chat_id, user_id=user_id,
                                   migrate_to_chat_id=new_chat_id)
        new = self.factory.message(chat_id=new_chat_id, user_id=user_id,
                                   migrate_from_chat_id=old_chat_id)
        new["chat"] = {**chat_dict(new_chat_id), "type": "supergroup"}
        return self.factory.update(old), self.factory.update(new)
