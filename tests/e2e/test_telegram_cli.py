"""`threadline run` with Telegram, as a real process against the fake Bot API."""

from __future__ import annotations

import asyncio
import signal

from platforms.telegram.format import render
from tests.harness.cli import THREADLINE, cli_env, threadline
from tests.harness.gateway import write_config
from tests.harness.waiting import eventually

USER = 5550001


def telegram_config_file(tmp_path, fake_telegram, model_url: str, **telegram) -> str:
    platforms = {"console": {"enabled": False},
                 "telegram": {"enabled": True, "token": fake_telegram.token,
                              "base_url": fake_telegram.base_url,
                              "base_file_url": fake_telegram.base_file_url, **telegram}}
    return str(write_config(tmp_path, model={"base_url": model_url, "max_output_tokens": 4000},
                            platforms=platforms))


async def start_run(tmp_path, config: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        THREADLINE, "run", "--config", config, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(tmp_path),
        env=cli_env(tmp_path))


async def test_run_answers_on_telegram_and_exits_cleanly_on_sigterm(tmp_path, fake_openai,
                                                                    fake_telegram):
    config = telegram_config_file(tmp_path, fake_telegram, fake_openai.base_url)
    proc = await start_run(tmp_path, config)
    try:
        fake_telegram.push(fake_telegram.updates.private_text("hello from telegram", USER))
        [reply] = await fake_telegram.wait_for_messages(USER, 1, timeout=30)
        assert ("start", "what this bot does") not in [
            (c["command"], c["description"]) for c in fake_telegram.commands]
        assert "compress" in [c["command"] for c in fake_telegram.commands]
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    err = (await proc.stderr.read()).decode()
    assert reply.text == "echo: hello from telegram"
    assert proc.returncode == 0, err
    assert "Traceback" not in err and fake_telegram.token.split(":")[1] not in err


async def test_a_reply_cut_by_sigkill_is_finished_after_restart_without_repeats(
        tmp_path, fake_openai, fake_telegram):
    reply = "\n\n".join(f"Paragraph {n}: " + f"word{n} " * 250 for n in range(6))
    expected = [c.text for c in render(reply)]
    assert len(expected) >= 3
    fake_openai.responder = lambda body: reply
    config = telegram_config_file(tmp_path, fake_telegram, fake_openai.base_url)
    proc = await start_run(tmp_path, config)
    try:
        fake_telegram.push(fake_telegram.updates.private_text("tell me a lot", USER))
        await fake_telegram.wait_for_messages(USER, 1, timeout=30)
        fake_telegram.delay_next(60)  # the second chunk's request hangs ...
        await eventually(lambda: len([c for c in fake_telegram.calls  # drafts not counted
                                      if c.path.endswith("/sendMessage")]) >= 2)
    finally:
        proc.kill()  # ... and the process dies in the middle of the reply
        await proc.wait()
    fake_telegram.reset()
    assert len(fake_telegram.messages(USER)) == 1
    again = await start_run(tmp_path, config)
    try:
        await fake_telegram.wait_for_messages(USER, len(expected), timeout=30)
        await asyncio.sleep(1.5)  # room for a duplicate to show up, if there were one
    finally:
        again.send_signal(signal.SIGTERM)
        await asyncio.wait_for(again.wait(), 30)
    assert [m.text for m in fake_telegram.messages(USER)] == expected
    assert len(fake_openai.calls_to("/chat/completions")) == 1


async def test_webhook_mode_without_a_secret_is_a_configuration_error(tmp_path, fake_telegram):
    config = telegram_config_file(tmp_path, fake_telegram, "http://127.0.0.1:9/v1",
                                  mode="webhook", webhook={"url": "https://bot.example.com/h"})
    ran = await threadline("run", "--config", config, home=tmp_path, timeout=60)
    assert ran.code == 78
    assert len(ran.err.strip().splitlines()) == 1 and "secret_token" in ran.err
