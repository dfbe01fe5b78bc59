"""A chat's own settings (`chats:`, issue 36 acceptance 4): its system prompt and model reach
its requests and no other chat's; its require_mention and wake words apply to it (a group's
key covers its topics); /status says which apply; a bad key or setting is a config error.
The real python-telegram-bot against the fake Bot API."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConfigError, load_config
from tests.harness.gateway import write_config
from tests.harness.telegram_gateway import telegram_config, telegram_gateway

PIRATE, PLAIN, TOPICS = -1001110000001, -1001110000002, -1001110000003
ALICE = 5550011
BOT = "@threadline_bot"
CHATS = {f"telegram:{PIRATE}": {"system_prompt": "You are a pirate.", "model": "pirate-7b",
                                "require_mention": False},
         f"telegram:{TOPICS}:7": {"wake_words": ["ahoy"]}}


def requests(fake_openai) -> list[dict[str, Any]]:
    return [c.json for c in fake_openai.calls_to("/chat/completions")]


def said(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"]).split("]: ", 1)[1]


async def test_a_chats_own_prompt_model_and_addressing_apply_to_it_alone(
        tmp_path, fake_openai, fake_telegram) -> None:
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             streaming={"enabled": False}, chats=CHATS)
    ups = fake_telegram.updates

    def text(words: str, chat: int, topic: int | None = None) -> None:
        fake_telegram.push(ups.group_text(words, chat, ALICE, entities=None if BOT in words
                                          else [], thread_id=topic, is_forum=bool(topic)))

    async with telegram_gateway(config):
        text("no mention needed here", PIRATE)
        text("chatter, never answered", PLAIN)
        text(f"{BOT} a plain question", PLAIN)
        text("ahoy in topic eight", TOPICS, 8)
        text("ahoy in topic seven", TOPICS, 7)
        await fake_telegram.wait_for_messages(PIRATE, 1, timeout=30)
        await fake_telegram.wait_for_messages(PLAIN, 1, timeout=30)
        await fake_telegram.wait_for_messages(TOPICS, 1, timeout=30)
        text(f"/status{BOT}", PIRATE)
        [_, status] = await fake_telegram.wait_for_messages(PIRATE, 2, timeout=30)
    by_text = {said(body): body for body in requests(fake_openai)}
    assert set(by_text) == {"no mention needed here", f"{BOT} a plain question",
                            "ahoy in topic seven"}
    pirate, plain = by_text["no mention needed here"], by_text[f"{BOT} a plain question"]
    assert pirate["model"] == "pirate-7b" and pirate["messages"][0] == {
        "role": "system", "content": "You are a pirate."}
    assert plain["model"] != "pirate-7b" and "pirate" not in str(plain["messages"])
    assert "pirate" not in str(by_text["ahoy in topic seven"]["messages"])
    assert f"model (from telegram:{PIRATE})" in status.text
    assert "system_prompt" in status.text and "require_mention" in status.text


@pytest.mark.parametrize("chats, says", [
    ({"telegram": {}}, "is not a chat key"),
    ({"slack:C1": {}}, "is not a chat key"),
    ({f"telegram:{PIRATE}": {"colour": "red"}}, "colour"),
    ({f"telegram:{PIRATE}": {"wake_words": [""]}}, "is not a wake word"),
])
def test_a_bad_chat_key_or_setting_is_a_config_error(tmp_path, chats, says) -> None:
    with pytest.raises(ConfigError, match=says):
        load_config(write_config(tmp_path, chats=chats))
