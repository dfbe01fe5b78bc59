"""SIGHUP, as logrotate or a habitual `kill -HUP` sends it, to a running `threadline run`:
one log line, and the service goes on until SIGTERM drains it as usual."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from tests.harness.gateway import telegram_run_config
from tests.harness.running import USER, Running, answered


async def test_sighup_is_one_log_line_and_the_service_runs_on_until_sigterm_drains_it(
        tmp_path, fake_openai, fake_telegram):
    config = telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url)
    service = await Running.start(tmp_path, "run", "--config", config)
    try:
        await fake_telegram.wait_for_call("/getUpdates", timeout=30)
        service.proc.send_signal(signal.SIGHUP)
        await service.wait_for_line("SIGHUP")
        assert await answered(fake_telegram, "still there?") == "echo: still there?"
        # A turn still running when SIGTERM arrives is finished and delivered: the drain.
        fake_openai.delay_next(1.0)
        fake_telegram.push(fake_telegram.updates.private_text("a slow one", USER))
        await fake_openai.wait_for_call("/chat/completions", count=2, timeout=30)
        service.proc.send_signal(signal.SIGTERM)
        await service.wait_for_line("stopping: no new messages")
        code = await service.exited(40)
    finally:
        await service.kill()  # only when something above failed: it has ended otherwise
    assert code == 0, service.log
    assert len(service.said("SIGHUP")) == 1, service.log
    assert [m.text for m in fake_telegram.messages(USER)] == ["echo: still there?",
                                                             "echo: a slow one"]
    assert "Traceback" not in service.log


def holds_lock(pid: int) -> bool:
    """Whether the process has the database's lock file open: `run` is past its arguments
    and its config, and builds the gateway (its loop's signal handlers do not exist yet)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd).endswith("threadline.db.lock"):
                return True
        except OSError:
            continue
    return False


async def test_a_sighup_while_starting_does_not_stop_it(tmp_path, fake_openai, fake_telegram):
    config = telegram_run_config(tmp_path, fake_telegram, fake_openai.base_url)
    service = await Running.start(tmp_path, "run", "--config", config)
    try:
        async with asyncio.timeout(60):
            while not holds_lock(service.pid):  # noqa: ASYNC110
                assert service.proc.returncode is None, service.log
                await asyncio.sleep(0.001)
        assert not fake_telegram.calls_to("/getUpdates")  # still starting
        service.proc.send_signal(signal.SIGHUP)
        assert await answered(fake_telegram, "up after all?") == "echo: up after all?"
    finally:
        code = await service.stop()
    assert code == 0, service.log
