"""Files at rest are their owner's alone: started under umask 022, the real `threadline`
creates every file 0600 and every directory 0700 (database, -wal, -shm, attachments,
saved tool outputs, backups), and warns once about a state directory others can read
(issue 35, acceptance 4)."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.attachments.files import AttachmentFiles
from agent.shelf import write_whole
from agent.tools.budget import OutputBudget
from storage.sqlite import SqliteSessionStore
from tests.harness.base import echo_responder, text_of, tool_call_reply
from tests.harness.cli import THREADLINE, cli_env, threadline
from tests.harness.gateway import write_config
from tests.harness.media import jpeg
from tests.harness.tools import install_tool_plugin
from tests.harness.trajectories import write_entries

LOOSE = 0o022  # the common default: files 0644, directories 0755
USER = 4_400_001
REPORT = "a line of a long report\n" * 10_000  # past every per-result budget: saved
PLUGIN = '''
from agent.tools.registry import Tool


def big():
    return Tool("big_report", "A long report.", lambda arguments: REPORT,
                {"type": "object", "properties": {}})


REPORT = "a line of a long report\\n" * 10_000
'''


def modes(root: Path) -> dict[str, int]:
    """Every file and directory under `root` (itself included): its permission bits."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def loose(found: dict[str, int]) -> dict[str, str]:
    return {name: f"{mode:04o}" for name, mode in found.items() if mode & 0o077}


def _responder(body: dict[str, Any]) -> Any:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return "saved the report"
    if text_of(last["content"]) == "the report, please":
        return tool_call_reply("big_report", {})
    return echo_responder(body)


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An installed tool plugin whose output is too long for the context (it is saved):
    the PYTHONPATH that finds it."""
    site = tmp_path / "site"
    install_tool_plugin(site, monkeypatch, target="bigtool:big")
    (site / "bigtool.py").write_text(PLUGIN)
    return os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))


async def test_every_file_the_service_and_backup_create_is_owner_only(
        tmp_path, fake_openai, fake_telegram, plugin_site) -> None:
    fake_openai.responder = _responder
    state = tmp_path / "state"  # created by the process, two levels deep
    db = state / "data" / "threadline.db"
    platforms = {"console": {"enabled": False},
                 "telegram": {"enabled": True, "token": fake_telegram.token,
                              "base_url": fake_telegram.base_url,
                              "base_file_url": fake_telegram.base_file_url}}
    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url,
                                               "vision": True},
                              platforms=platforms, storage={"path": str(db)}))
    proc = await asyncio.create_subprocess_exec(
        THREADLINE, "run", "--config", config, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        cwd=str(tmp_path), env=cli_env(tmp_path, PYTHONPATH=plugin_site), umask=LOOSE)
    backups = tmp_path / "backups"
    backups.mkdir(mode=0o755)
    copy = backups / "threadline.db"
    copy.write_bytes(b"an older copy")
    copy.chmod(0o644)
    try:
        file_id = fake_telegram.add_file(jpeg(1), kind="photo", suffix=".jpg")
        fake_telegram.push(fake_telegram.updates.photo("what is this?", user_id=USER,
                                                       file_id=file_id))
        await fake_telegram.wait_for_messages(USER, 1, timeout=60)
        fake_telegram.push(fake_telegram.updates.private_text("the report, please", USER))
        await fake_telegram.wait_for_messages(USER, 2, timeout=60)
        running = modes(state)  # while it runs: the -wal and -shm files are there
        backed = await threadline("backup", str(copy), "--config", config, home=tmp_path,
                                  umask=LOOSE)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert backed.code == 0, backed.err
    names = set(running)
    assert {"data/threadline.db-wal", "data/threadline.db-shm"} <= names, names
    for kept in ("attachments", "tool_outputs"):  # data/<kept>/<chat>/<file>
        assert any(n.startswith(f"data/{kept}/") and n.count("/") == 3 for n in names), names
    assert loose(running) == {}
    after = modes(state)  # once it stopped, with the backup's record beside the database
    assert "data/threadline.db.last-backup" in after and loose(after) == {}
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert [p.name for p in backups.iterdir()] == ["threadline.db"]  # no partial left


async def test_a_backup_of_a_private_database_over_an_open_file_is_private(tmp_path) -> None:
    db = tmp_path / "threadline.db"
    async with SqliteSessionStore(db) as store:
        await store.open_session("console:local", model="m", system_prompt=None)
    db.chmod(0o600)
    copy = tmp_path / "elsewhere.db"
    copy.write_bytes(b"")
    copy.chmod(0o666)
    config = str(write_config(tmp_path, storage={"path": str(db)}))
    ran = await threadline("backup", str(copy), "--config", config, home=tmp_path,
                           umask=LOOSE)
    assert ran.code == 0, ran.err
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600


async def test_a_state_directory_others_can_read_is_named_once_with_the_fix(
        tmp_path, fake_openai) -> None:
    state = tmp_path / "shared"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url},
                              storage={"path": str(state / "threadline.db")}))
    ran = await threadline("chat", "--config", config, stdin="hello\nagain\n", home=tmp_path)
    assert ran.code == 0, ran.err
    assert ran.out.splitlines() == ["echo: hello", "echo: again"]
    warned = [line for line in ran.err.splitlines() if "chmod" in line]
    assert len(warned) == 1, ran.err
    assert "WARNING" in warned[0] and f"chmod 700 {state}" in warned[0]
    state.chmod(0o700)
    again = await threadline("chat", "--config", config, stdin="hello\n", home=tmp_path)
    assert "chmod" not in again.err, again.err


async def test_files_written_where_the_user_says_are_owner_only_too(tmp_path, fake_openai
                                                                     ) -> None:
    """The umask the process sets covers the files no store or shelf writes."""
    fake_openai.responder = lambda body: "## Active Task\nNothing.\n## Goal\nNothing."
    config = write_config(tmp_path, model={"base_url": fake_openai.base_url},
                          trajectories={"target_max_tokens": 3000})
    write_entries(tmp_path / "in.jsonl", 2)
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    ran = await threadline("trajectories", "compress", "in.jsonl", str(out / "out.jsonl"),
                           "--config", str(config), home=tmp_path, umask=LOOSE)
    assert ran.code == 0, ran.err
    written = {name: mode for name, mode in modes(out).items() if name != "."}
    assert "out.jsonl" in written and len(written) > 1, written  # the metrics beside it
    assert loose(written) == {}


@pytest.fixture
def loose_umask() -> Iterator[None]:
    old = os.umask(LOOSE)
    try:
        yield
    finally:
        os.umask(old)


async def test_the_library_writes_owner_only_under_any_umask(tmp_path, loose_umask) -> None:
    """What the gateway calls, called under umask 022 by any other program."""
    write_whole(tmp_path / "a" / "b" / "kept.bin", b"data")
    files = AttachmentFiles(tmp_path / "attachments")
    files.save("telegram:7", jpeg(2), "jpg")
    budget = OutputBudget(tmp_path / "tool_outputs" / "chat", window=8_000)
    [saved] = budget.apply([(None, {"role": "tool", "tool_call_id": "c", "content": REPORT})])
    assert "Saved output" in saved["content"]
    async with SqliteSessionStore(tmp_path / "db" / "deep" / "threadline.db") as store:
        await store.open_session("console:local", model="m", system_prompt=None)
        await store.backup(str(tmp_path / "copy.db"))
        assert {"threadline.db-wal", "threadline.db-shm"} <= {
            p.name for p in (tmp_path / "db" / "deep").iterdir()}
        assert loose(modes(tmp_path)) == {}
    assert loose(modes(tmp_path)) == {}
