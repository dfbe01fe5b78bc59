"""What `open_session` hands a chat, on both backends (issue 47): the live end of its chain,
or a new root when that end has finished (a /new, an idle or daily reset); the same for a
chat copied from SQLite by `threadline migrate`. Each case opens the chat on a store that
never saw it, as a restarted process does, so nothing remembered hides what the database
says, and then takes a message on the session it was given."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.base import SessionStore
from storage.migrate import copy_store
from storage.sqlite import SqliteSessionStore
from tests.harness.store import CHAT, Backend, compacted_turn, msg, root


async def _opened_and_taken(store: SessionStore, text: str = "hello again") -> str:
    """Open the chat as a turn does, take one message on it; the session's id."""
    session = await store.open_session(CHAT, model="gpt-x", system_prompt="be brief",
                                       system_message=msg("system", "be brief"))
    assert session.live, session
    row = await store.ingest(platform="telegram", chat_id="42", message_id=text,
                             chat_key=CHAT, text=text, sender_id="7", sender_name="Ada")
    assert row is not None
    await store.take_inbound([row.id], session.id, [msg("user", text)])
    return session.id


async def _ended_by_reset(store: SessionStore) -> str:
    session = await root(store)
    await store.end_session(session.id, "reset")
    return session.id


async def _continued(store: SessionStore) -> str:
    first = await root(store)
    return (await store.record_turn(first.id, compacted_turn("a"))).id


async def _continued_then_reset(store: SessionStore) -> str:
    tip = await _continued(store)
    await store.end_session(tip, "reset")
    return tip


@pytest.mark.parametrize("build, fresh_root", [
    (_ended_by_reset, True),
    (_continued, False),
    (_continued_then_reset, True),
])
async def test_a_chat_opens_on_its_live_tip_or_a_new_root_once_that_has_ended(
        backend: Backend, build, fresh_root: bool) -> None:
    await backend.prepare()
    async with backend.store() as first:
        before = await build(first)
    async with backend.store() as later:  # a restarted process: it remembers nothing
        opened = await _opened_and_taken(later)
        again = await later.open_session(CHAT, model="gpt-x", system_prompt="be brief")
    assert again.id == opened  # the new root is the chat's from now on, not made twice
    if fresh_root:
        assert opened != before
        [(kind, parent)] = await backend.query(
            "SELECT kind, parent_session_id FROM sessions WHERE id = ?", opened)
        assert (kind, parent) == ("root", None)
    else:
        assert opened == before


async def test_a_chat_copied_from_sqlite_after_its_new_opens_a_fresh_root(
        backend: Backend, tmp_path: Path) -> None:
    """The migrated chat's last session ended by /new: its next message gets a new root on
    PostgreSQL exactly as it would have on the SQLite file it came from."""
    await backend.prepare()
    source = tmp_path / "source" / "threadline.db"
    async with SqliteSessionStore(source) as sqlite:
        ended = await _ended_by_reset(sqlite)
    if backend.name == "postgres":
        assert backend.url is not None
        await copy_store(source, backend.url)
    else:
        backend.path = source
    async with backend.store() as store:
        opened = await _opened_and_taken(store)
    assert opened != ended
    assert await backend.query("SELECT session_id FROM chats WHERE chat_key = ?",
                               CHAT) == [(opened,)]
