"""What keeps an operator's gateway single and whole: `chat` never starts the bots, a
second `run` on the same SQLite file is refused, a missing local extra stops the start."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cli import THREADLINE, cli_env, threadline
from tests.harness.gateway import telegram_run_config, write_config
from tests.harness.running import USER, Running, answered

EX_CONFIG = 78


def bot_calls(fake_telegram: Any) -> int:
    return len(fake_telegram.calls_to("/getMe")) + len(fake_telegram.calls_to("/getUpdates"))


async def test_chat_answers_piped_input_and_leaves_the_configured_bot_alone(
        tmp_path, fake_openai, fake_telegram):
    config = telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url)
    chat = await asyncio.create_subprocess_exec(
        THREADLINE, "chat", "--config", config, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(tmp_path),
        env=cli_env(tmp_path))
    try:
        out, err = await asyncio.wait_for(chat.communicate(b"hello\n"), 60)
    finally:
        if chat.returncode is None:  # it would otherwise poll Telegram until the end of time
            chat.kill()
            await chat.wait()
    assert chat.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["echo: hello"]
    assert bot_calls(fake_telegram) == 0, [c.path for c in fake_telegram.calls]


async def test_a_second_run_on_the_same_database_is_refused_and_a_killed_one_leaves_no_lock(
        tmp_path, fake_openai, fake_telegram):
    config = telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url)
    lock = tmp_path / "threadline.db.lock"
    first = await Running.start(tmp_path, "run", "--config", config)
    try:
        await fake_telegram.wait_for_call("/getUpdates", timeout=30)
        said_getme = len(fake_telegram.calls_to("/getMe"))
        second = await Running.start(tmp_path, "run", "--config", config)
        assert await second.exited(30) == EX_CONFIG
        assert len(second.lines) == 1, second.log
        assert f"pid {first.pid}" in second.lines[0] and "threadline.db" in second.lines[0]
        assert "Traceback" not in second.log
        assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
        # Beside the service a chat and a read still work, and neither starts the bot.
        chat = await threadline("chat", "--config", config, stdin="beside\n", home=tmp_path)
        assert (chat.code, chat.out) == (0, "echo: beside\n"), chat.err
        listed = await threadline("sessions", "list", "--config", config, home=tmp_path)
        assert listed.code == 0 and "console:local" in listed.out, listed.err
        assert len(fake_telegram.calls_to("/getMe")) == said_getme, "none of them is a bot"
        assert await answered(fake_telegram, "still there?") == "echo: still there?"
    finally:
        await first.kill()
    assert lock.read_text().strip() == str(first.pid)  # a dead holder's pid, not a lock
    again = await Running.start(tmp_path, "run", "--config", config)
    try:
        # Another chat: a reply cut by the kill may be sent again in the first (at least once).
        assert await answered(fake_telegram, "after the crash", user=USER + 1) == (
            "echo: after the crash")
    finally:
        code = await again.stop()
    assert code == 0, again.log


@pytest.fixture
def without_llama_cpp(tmp_path: Path) -> dict[str, str]:
    """An environment where `import llama_cpp` fails as it does without the local extra:
    a directory on PYTHONPATH, ahead of site-packages, whose llama_cpp raises on import."""
    shadow = tmp_path / "shadow" / "llama_cpp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'llama_cpp'\", name='llama_cpp')\n")
    return cli_env(tmp_path, PYTHONPATH=str(shadow.parent))


@pytest.mark.parametrize("command", [["run"], ["chat"], ["compress", "console:local"]],
                         ids=["run", "chat", "compress"])
async def test_a_local_model_without_the_local_extra_stops_the_start_in_one_line(
        tmp_path, without_llama_cpp, command):
    config = str(write_config(tmp_path, model={"provider": "local",
                                               "name": "SmolLM2-135M-Instruct"}))
    ran = await threadline(*command, "--config", config, stdin="hello\n", home=tmp_path,
                           env=without_llama_cpp, timeout=60)
    assert ran.code == EX_CONFIG, ran.out + ran.err
    [line] = ran.err.strip().splitlines()
    assert "model.provider" in line and "pip install 'threadline[local]'" in line
    assert "Traceback" not in ran.err and ran.out == ""
    assert not (tmp_path / "threadline.db").exists(), "nothing was started"
    doctor = await threadline("doctor", "--config", config, home=tmp_path,
                              env=without_llama_cpp, timeout=60)
    assert doctor.code == 1
    said = line.split("model.provider: local: ", 1)[1]
    assert [r for r in doctor.out.splitlines() if said in r and "FAIL" in r], doctor.out


async def test_a_local_budget_fallback_without_the_local_extra_stops_the_start_too(
        tmp_path, without_llama_cpp):
    budgets = {"user": {"day": {"usd": 1}}, "on_limit": "fallback",
               "fallback_model": {"provider": "local", "name": "SmolLM2-135M-Instruct"}}
    config = str(write_config(tmp_path, budgets=budgets))
    ran = await threadline("run", "--config", config, home=tmp_path, env=without_llama_cpp,
                           timeout=60)
    assert ran.code == EX_CONFIG, ran.out + ran.err
    [line] = ran.err.strip().splitlines()
    assert "budgets.fallback_model.provider" in line, line
    assert "pip install 'threadline[local]'" in line
