"""The store contract on both backends (message round trips, sessions, the inbound ledger,
settings), and the SQLite file's own rules: creating and migrating it, damage, backups."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from storage.base import SessionStore
from storage.errors import ContinuationConflict, InboundChanged, StoreError
from storage.models import Compaction, NewMessage, OutChunk, TurnRecord, UsageRecord
from storage.postgres import schema as postgres_schema
from storage.sqlite import SqliteSessionStore, schema
from tests.harness.store import Backend


def msg(role: str, content: Any = "", **meta: Any) -> NewMessage:
    return NewMessage({"role": role, "content": content}, **meta)


# --- opening and migrating ---------------------------------------------------------------
async def test_fresh_database_is_created_with_its_directory_and_current_schema(
        tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "t.db"
    async with SqliteSessionStore(path):
        pass
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
    assert {"sessions", "messages", "usage", "inbound", "chats", "messages_fts"} <= tables


async def recorded_and_current_schema(backend: Backend) -> tuple[list[Any], list[Any]]:
    """Each backend records its schema its own way: SQLite one version number, PostgreSQL
    one row per version applied (so a version applied twice would show)."""
    if backend.name == "sqlite":
        return await backend.query("PRAGMA user_version"), [(schema.SCHEMA_VERSION,)]
    return (await backend.query("SELECT version FROM schema_version ORDER BY version"),
            [(v,) for v in range(1, postgres_schema.SCHEMA_VERSION + 1)])


async def test_reopening_keeps_data_and_schema(backend: Backend) -> None:
    await backend.prepare()
    async with backend.store() as first:
        session = await first.create_root_session("console:1", model="m", system_prompt="be kind")
        await first.append_messages(session.id, [msg("user", "remember me")])
    async with backend.store() as second:
        live = await second.live_session("console:1")
        assert live is not None and live.id == session.id
        assert [m.message["content"] for m in await second.load_history(session.id)] == [
            "remember me"]
    recorded, current = await recorded_and_current_schema(backend)
    assert recorded == current


async def test_newer_schema_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with SqliteSessionStore(path):
        pass
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError) as caught:
        await SqliteSessionStore(path).initialize()
    text = str(caught.value)
    assert "newer" in text and str(path) in text and "\n" not in text


async def test_older_database_is_migrated_and_its_messages_become_searchable(
        tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        assert schema.migrate(db, str(path), target=1) == 1
        db.execute("INSERT INTO sessions (id, chat_key, kind, started_at)"
                   " VALUES ('old', 'console:1', 'root', 1)")
        db.execute("INSERT INTO messages (session_id, seq, role, content, created_at)"
                   " VALUES ('old', 0, 'user', 'the heron nests early', 1)")
    async with SqliteSessionStore(path) as store:
        hits = await store.search("heron")
    assert [(h.session_id, h.seq) for h in hits] == [("old", 0)]


@pytest.mark.parametrize("make_bad_path", [
    pytest.param(lambda tmp: _file(tmp / "plain-file") / "t.db", id="parent-is-a-file"),
    pytest.param(lambda tmp: tmp, id="path-is-a-directory"),
    pytest.param(lambda tmp: _file(tmp / "junk.db", b"this is not sqlite" * 100),
                 id="not-a-database"),
])
async def test_unusable_path_gives_one_line_store_error_naming_it(
        tmp_path: Path, make_bad_path: Any) -> None:
    path = make_bad_path(tmp_path)
    store = SqliteSessionStore(path)
    with pytest.raises(StoreError) as caught:
        await store.initialize()
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value) and "Traceback" not in str(caught.value)
    await store.shutdown()  # nothing open: still fine


def _file(path: Path, data: bytes = b"x") -> Path:
    path.write_bytes(data)
    return path


async def test_shutdown_is_idempotent_and_later_calls_say_the_store_is_closed(
        store: SessionStore) -> None:
    await store.shutdown()
    await store.shutdown()
    with pytest.raises(StoreError, match="not open"):
        await store.live_session("console:1")


# --- messages ----------------------------------------------------------------------------
ROUND_TRIP = [
    {"role": "system", "content": "You are Threadline."},
    {"role": "user", "content": "héllo 👋 — \"quoted\"\nsecond line"},
    {"role": "user", "content": [
        {"type": "text", "text": "what is in this picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "read_file", "arguments": "{\"path\": \"a.txt\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "read_file", "content": "file body"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "x"}]},
    {"role": "assistant", "content": "", "reasoning_content": "thought", "name": None},
    {"role": "assistant", "tool_calls": []},  # no content key at all
]


async def test_history_round_trips_exactly_with_its_metadata(store: SessionStore) -> None:
    session = await store.create_root_session("console:1", model="m", system_prompt="s")
    new = [NewMessage(m, tokens=i * 10, platform_message_id=f"p{i}" if i == 1 else None,
                      answered=False if i == 1 else None, sender_id="u1" if i == 1 else None,
                      sender_name="Ada" if i == 1 else None)
           for i, m in enumerate(ROUND_TRIP)]
    appended = await store.append_messages(session.id, new)
    history = await store.load_history(session.id)
    assert [h.message for h in history] == ROUND_TRIP
    assert [h.seq for h in history] == list(range(len(ROUND_TRIP)))
    assert [h.id for h in history] == [a.id for a in appended]
    assert [h.tokens for h in history] == [i * 10 for i in range(len(ROUND_TRIP))]
    user = history[1]
    assert (user.platform_message_id, user.answered, user.sender_id, user.sender_name) == (
        "p1", False, "u1", "Ada")
    assert history[0].answered is None and history[0].sender_id is None
    assert [a.message for a in appended] == ROUND_TRIP


async def test_appends_continue_the_sequence(store: SessionStore) -> None:
    session = await store.create_root_session(
        "console:1", model=None, system_prompt=None, system_message=msg("system", "sys"))
    await store.append_messages(session.id, [msg("user", "a")])
    await store.append_messages(session.id, [msg("assistant", "b"), msg("user", "c")])
    history = await store.load_history(session.id)
    assert [(h.seq, h.message["content"]) for h in history] == [
        (0, "sys"), (1, "a"), (2, "b"), (3, "c")]
    record = await store.get_session(session.id)
    assert record is not None and record.message_count == 4


async def test_a_message_without_a_role_or_not_json_is_refused(
        store: SessionStore) -> None:
    session = await store.create_root_session("console:1", model=None, system_prompt=None)
    with pytest.raises(StoreError, match="role"):
        await store.append_messages(session.id, [NewMessage({"content": "x"})])
    with pytest.raises(StoreError, match="JSON"):
        await store.append_messages(session.id, [msg("user", [object()])])
    assert await store.load_history(session.id) == []


# --- sessions ----------------------------------------------------------------------------
async def test_reset_then_new_root_gives_the_chat_a_fresh_live_session(
        store: SessionStore) -> None:
    assert await store.live_session("telegram:42") is None
    first = await store.create_root_session("telegram:42", model="m", system_prompt="s")
    assert (await store.live_session("telegram:42")) == first
    await store.end_session(first.id, "reset")
    await store.end_session(first.id, "expired")  # already ended: no-op
    assert await store.live_session("telegram:42") is None
    ended = await store.get_session(first.id)
    assert ended is not None and ended.end_reason == "reset" and ended.ended_at is not None
    second = await store.create_root_session("telegram:42", model="m", system_prompt="s")
    live = await store.live_session("telegram:42")
    assert live is not None and live.id == second.id and live.kind == "root"
    assert [s.id for s in await store.list_sessions("telegram:42")] == [second.id, first.id]
    assert await store.list_sessions("discord:1") == []


async def test_end_session_refuses_compression_and_unknown_ids(
        store: SessionStore) -> None:
    session = await store.create_root_session("console:1", model=None, system_prompt=None)
    with pytest.raises(StoreError, match="record_turn"):
        await store.end_session(session.id, "compression")
    with pytest.raises(StoreError, match="no session"):
        await store.end_session("missing", "reset")


async def test_the_last_turn_of_a_reset_session_may_still_complete(
        store: SessionStore) -> None:
    session = await store.create_root_session("console:1", model=None, system_prompt=None)
    await store.end_session(session.id, "reset")
    await store.record_turn(session.id, TurnRecord(after=(msg("assistant", "late reply"),)))
    assert [m.message["content"] for m in await store.load_history(session.id)] == [
        "late reply"]
    with pytest.raises(ContinuationConflict):
        await store.record_turn(session.id, TurnRecord(
            compaction=Compaction(messages=(msg("system", "summary"),))))


async def test_engine_state_and_prompt_tokens_are_saved(store: SessionStore) -> None:
    session = await store.create_root_session("console:1", model=None, system_prompt=None)
    await store.save_engine_state(session.id, {"previous_summary": "s", "strikes": 1}, 1234)
    await store.save_engine_state(session.id, {"strikes": 2})
    record = await store.get_session(session.id)
    assert record is not None
    assert record.engine_state == {"strikes": 2} and record.last_prompt_tokens == 1234


async def test_list_sessions_counts_messages_and_tokens(store: SessionStore) -> None:
    session = await store.create_root_session("console:1", model=None, system_prompt=None)
    await store.record_turn(session.id, TurnRecord(
        before=(msg("user", "q"), msg("assistant", "a")),
        usage=(UsageRecord("m", "chat", input_tokens=100, output_tokens=7),
               UsageRecord("m", "summary", input_tokens=50, output_tokens=3))))
    [listed] = await store.list_sessions()
    assert (listed.message_count, listed.input_tokens, listed.output_tokens) == (2, 150, 10)


# --- the inbound ledger ------------------------------------------------------------------
async def _ingest(store: SessionStore, message_id: str, text: str = "hi",
                  chat_id: str = "42") -> Any:
    return await store.ingest(platform="telegram", chat_id=chat_id, message_id=message_id,
                              chat_key=f"telegram:{chat_id}", text=text, sender_id="u1",
                              sender_name="Ada", extra={"is_group": False})


async def test_a_redelivered_message_is_recorded_once(store: SessionStore) -> None:
    first = await _ingest(store, "7")
    assert first is not None and first.status == "pending" and first.extra == {"is_group": False}
    assert await _ingest(store, "7", text="again") is None
    assert await _ingest(store, "7", chat_id="43") is not None  # another chat, another row
    assert [r.text for r in await store.open_inbound()] == ["hi", "hi"]


async def test_inbound_goes_pending_taken_answered(store: SessionStore) -> None:
    session = await store.create_root_session("telegram:42", model=None, system_prompt=None)
    one, two = await _ingest(store, "1", "first"), await _ingest(store, "2", "second")
    stored = await store.take_inbound(
        [one.id, two.id], session.id,
        [msg("user", "first", platform_message_id="1"),
         msg("user", "second", platform_message_id="2")])
    assert [s.answered for s in stored] == [False, False]
    opened = await store.open_inbound()
    assert [(r.status, r.message_row_id) for r in opened] == [
        ("taken", stored[0].id), ("taken", stored[1].id)]
    await store.record_turn(session.id, TurnRecord(after=(msg("assistant", "both"),),
                                                   replied=(one.id,), failed=(two.id,)))
    # The reply is stored but not yet accepted by the platform: the row stays open.
    [waiting] = await store.open_inbound()
    reply = await store.message(waiting.reply_row_id)
    assert (waiting.id, waiting.status, reply.message["content"]) == (one.id, "taken", "both")
    await store.finish_inbound([one.id], "answered")
    assert await store.open_inbound() == []
    history = await store.load_history(session.id)
    assert [h.answered for h in history] == [True, False, None]


async def test_a_finished_ledger_row_never_changes_again(store: SessionStore) -> None:
    session = await store.create_root_session("telegram:42", model=None, system_prompt=None)
    row = await _ingest(store, "1", "question")
    await store.take_inbound([row.id], session.id, [msg("user", "question")])
    await store.finish_inbound([row.id], "answered")
    await store.finish_inbound([row.id], "failed")  # a stop that came too late
    await store.record_turn(session.id, TurnRecord(failed=(row.id,)))
    [found] = await store.inbound([row.id])
    assert found.status == "answered"
    assert [h.answered for h in await store.load_history(session.id)] == [True]


async def test_two_stores_opening_a_new_chat_at_once_share_one_root(backend: Backend) -> None:
    await backend.prepare()
    async with backend.store() as first, backend.store() as second:
        opened = await asyncio.gather(*[
            s.open_session("telegram:7", model=None, system_prompt=None)
            for s in (first, second) * 8])
        assert len({s.id for s in opened}) == 1
        assert len(await first.list_sessions("telegram:7")) == 1
    assert await backend.query("SELECT id FROM sessions WHERE chat_key = ?",
                               "telegram:7") == [(opened[0].id,)]
    assert await backend.query("SELECT session_id FROM chats WHERE chat_key = ?",
                               "telegram:7") == [(opened[0].id,)]


async def test_coalesced_inbound_rows_link_to_the_merged_message(
        store: SessionStore) -> None:
    session = await store.create_root_session("telegram:42", model=None, system_prompt=None)
    rows = [await _ingest(store, str(i)) for i in range(3)]
    [merged] = await store.take_inbound([r.id for r in rows], session.id,
                                        [msg("user", "one two three")])
    assert {r.message_row_id for r in await store.open_inbound()} == {merged.id}


async def test_taking_a_row_twice_is_refused_and_appends_nothing(
        store: SessionStore) -> None:
    session = await store.create_root_session("telegram:42", model=None, system_prompt=None)
    row = await _ingest(store, "1")
    await store.take_inbound([row.id], session.id, [msg("user", "hi")])
    with pytest.raises(StoreError, match="taken"):
        await store.take_inbound([row.id], session.id, [msg("user", "hi")])
    assert len(await store.load_history(session.id)) == 1


async def test_an_edit_replaces_text_only_while_pending(store: SessionStore) -> None:
    session = await store.create_root_session("telegram:42", model=None, system_prompt=None)
    row = await _ingest(store, "1", "helo")
    assert await store.update_inbound_text("telegram", "42", "1", "hello") == "pending"
    await store.take_inbound([row.id], session.id, [msg("user", "hello")])
    assert await store.update_inbound_text("telegram", "42", "1", "changed") == "taken"
    assert [r.text for r in await store.open_inbound()] == ["hello"]
    assert await store.update_inbound_text("telegram", "42", "404", "x") is None


async def test_a_take_as_read_is_refused_whole_when_a_row_changed_meanwhile(
        store: SessionStore) -> None:
    """The gateway takes rows as it read them (no second read per turn); an edit or a
    deletion since then refuses the take, and nothing of it is written."""
    session = await store.create_root_session("telegram:42", model=None, system_prompt=None)
    one, two = await _ingest(store, "1", "first"), await _ingest(store, "2", "helo")
    await store.update_inbound_text("telegram", "42", "2", "hello")
    with pytest.raises(InboundChanged):
        await store.take_inbound([one.id, two.id], session.id,
                                 [msg("user", "first"), msg("user", "helo")], ["first", "helo"])
    await store.finish_inbound([one.id], "failed")  # its author deleted it
    with pytest.raises(InboundChanged):
        await store.take_inbound([one.id], session.id, [msg("user", "first")], ["first"])
    assert await store.load_history(session.id) == []
    assert [(r.text, r.status) for r in await store.open_inbound()] == [("hello", "pending")]
    await store.take_inbound([two.id], session.id, [msg("user", "hello")], ["hello"])
    assert [r.status for r in await store.inbound([two.id])] == ["taken"]


async def test_attempts_count_each_turn_and_a_dropped_turn_gives_its_attempt_back(
        store: SessionStore) -> None:
    session = await store.create_root_session("telegram:42", model=None, system_prompt=None)
    taken, waiting = await _ingest(store, "1"), await _ingest(store, "2")
    await store.take_inbound([taken.id], session.id, [msg("user", "hi")])
    await store.retry_inbound([taken.id, waiting.id])  # a restart found the turn cut short

    async def attempts() -> list[int]:
        return [r.attempts for r in await store.inbound([taken.id, waiting.id])]
    assert await attempts() == [2, 1]
    await store.retry_inbound([taken.id, waiting.id], undo=True)  # only taken rows
    assert await attempts() == [1, 1]
    await store.retry_inbound([taken.id], undo=True)
    await store.retry_inbound([taken.id], undo=True)  # never below none
    assert await attempts() == [0, 1]


async def test_finish_inbound_closes_rows_that_never_became_a_turn(
        store: SessionStore) -> None:
    command, ignored = await _ingest(store, "1", "/help"), await _ingest(store, "2", "spam")
    await store.finish_inbound([command.id], "answered")
    await store.finish_inbound([ignored.id], "failed")
    assert await store.open_inbound() == []
    with pytest.raises(StoreError, match="answered or failed"):
        await store.finish_inbound([command.id], "pending")


async def test_a_notice_is_recorded_once_and_finishes_nothing_by_itself(
        store: SessionStore) -> None:
    poison = await _ingest(store, "1", "poison")
    await store.record_notice(poison.id, (OutChunk("skipped"),))
    await store.record_notice(poison.id, (OutChunk("another"), OutChunk("more")))  # kept
    [chunk] = await store.deliveries(poison.id)
    assert (chunk.chunk, chunk.text, chunk.status) == (0, "skipped", "pending")
    await store.mark_delivered(poison.id, 0, "m-1")
    [still] = await store.inbound([poison.id])
    assert still.status == "pending"  # open until the caller finishes it
    assert [c.status for c in await store.deliveries(poison.id)] == ["sent"]


async def test_a_reply_counts_as_answered_when_its_last_chunk_is_out(
        store: SessionStore) -> None:
    session = await store.create_root_session("telegram:42", model=None, system_prompt=None)
    one, two = await _ingest(store, "1", "first"), await _ingest(store, "2", "second")
    await store.take_inbound([one.id, two.id], session.id,
                             [msg("user", "first"), msg("user", "second")])
    await store.record_turn(session.id, TurnRecord(
        after=(msg("assistant", "part one part two"),), replied=(one.id, two.id),
        delivery=(OutChunk("part one"), OutChunk("part two"))))
    chunks = await store.deliveries(two.id)
    assert [(c.chunk, c.text, c.status) for c in chunks] == [
        (0, "part one", "pending"), (1, "part two", "pending")]
    await store.mark_delivered(two.id, 0, "m-1")
    assert {r.status for r in await store.inbound([one.id, two.id])} == {"taken"}
    await store.mark_delivered(two.id, 1, "m-2")
    await store.mark_delivered(two.id, 1, "m-3")  # a second mark changes nothing
    assert {r.status for r in await store.inbound([one.id, two.id])} == {"answered"}
    assert [(c.status, c.platform_message_id) for c in await store.deliveries(two.id)] == [
        ("sent", "m-1"), ("sent", "m-2")]
    assert [h.answered for h in await store.load_history(session.id)] == [True, True, None]


# --- settings kept between runs ----------------------------------------------------------
async def test_a_setting_is_kept_replaced_and_survives_reopening(backend: Backend) -> None:
    await backend.prepare()
    async with backend.store() as store:
        assert await store.get_setting("commands:discord") is None
        await store.put_setting("commands:discord", "abc")
        await store.put_setting("commands:discord", "def")
        await store.put_setting("other", "x")
    async with backend.store() as store:
        assert await store.get_setting("commands:discord") == "def"
        assert await store.get_setting("other") == "x"


# --- a damaged file, unclean exits, backups: SQLite's file only ---------------------------
# PostgreSQL recovers from a crash by itself (begin_run() is always False there) and is
# backed up with pg_dump (backup() raises StoreError), so these run on SQLite alone.
async def filled(path: Path, turns: int = 30) -> None:
    async with SqliteSessionStore(path) as store:
        session = await store.create_root_session("console:local", model="m", system_prompt="s")
        for i in range(turns):
            await store.append_messages(session.id, [msg("user", f"question {i} " + "x" * 400),
                                                     msg("assistant", f"answer {i}")])


@pytest.mark.parametrize("damage", ["garbled", "truncated"])
async def test_a_damaged_file_is_refused_in_one_line_and_left_untouched(tmp_path: Path,
                                                                        damage: str) -> None:
    path = tmp_path / "threadline.db"
    await filled(path)
    data = path.read_bytes()
    # Cut short by two pages: the schema still reads, the data no longer does.
    broken = (bytes(range(256)) * 64 if damage == "garbled" else data[: len(data) - 8192])
    path.write_bytes(broken)
    with pytest.raises(StoreError) as caught:
        await SqliteSessionStore(path).initialize()
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "damaged" in message
    assert "no backup was recorded" in message
    assert path.read_bytes() == broken


async def test_after_an_unclean_exit_the_file_is_checked_and_damage_names_the_backup(
        tmp_path: Path) -> None:
    path, copy = tmp_path / "threadline.db", tmp_path / "saved" / "copy.db"
    copy.parent.mkdir()
    await filled(path)
    async with SqliteSessionStore(path) as store:
        assert await store.begin_run() is False
        await store.backup(copy)
        await store.end_run()
        assert await store.begin_run() is False  # the last run ended cleanly
        # ... and this one never calls end_run(): a crash.
    async with SqliteSessionStore(path) as store:
        assert await store.begin_run() is True  # checked, and whole
    # Damage a page in the middle (not the header): only the check after a crash sees it.
    raw = bytearray(path.read_bytes())
    page = 4096 * 3
    raw[page:page + 4096] = b"\xff" * 4096
    path.write_bytes(bytes(raw))
    async with SqliteSessionStore(path) as store:
        with pytest.raises(StoreError) as caught:
            await store.begin_run()
    assert f"`threadline restore {copy.resolve()}`" in str(caught.value)


async def test_a_backup_taken_while_another_connection_writes_is_whole(tmp_path: Path) -> None:
    path, copy = tmp_path / "threadline.db", tmp_path / "copy.db"
    await filled(path, turns=5)
    async with SqliteSessionStore(path) as writer, SqliteSessionStore(path) as reader:
        session = await writer.create_root_session("telegram:1", model="m", system_prompt="s")
        stop = asyncio.Event()

        async def keep_writing() -> int:
            n = 0
            while not stop.is_set():
                await writer.append_messages(session.id, [msg("user", f"busy {n}")])
                n += 1
            return n

        writing = asyncio.create_task(keep_writing())
        for _ in range(5):
            await reader.backup(copy)
        stop.set()
        written = await writing
    assert written > 0
    check = sqlite3.connect(copy)
    try:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        count = check.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        check.close()
    assert 10 <= count <= 10 + written
    assert not (tmp_path / ".copy.db.partial").exists()
