"""Full-text search over every stored message: user text is plain text, never FTS syntax.

The contract runs on both backends; SQLite's FTS5 index (kept by triggers, migrated from
older files) is checked on SQLite alone."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from storage.base import SessionStore
from storage.errors import StoreError
from storage.models import Compaction, NewMessage, TurnRecord
from storage.sqlite import SqliteSessionStore, schema


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteSessionStore]:
    """For checks of SQLite's own FTS5 index; the contract tests use `store` (both backends)."""
    async with SqliteSessionStore(tmp_path / "threadline.db") as opened:
        yield opened


def msg(role: str, content: Any) -> NewMessage:
    return NewMessage({"role": role, "content": content})


async def chat_with(store: SessionStore, chat_key: str, *texts: str) -> str:
    session = await store.create_root_session(chat_key, model=None, system_prompt=None)
    await store.append_messages(session.id, [msg("user", t) for t in texts])
    return session.id


@pytest.mark.parametrize(("query", "expected"), [
    ("PELICAN-7731", "the ticket is PELICAN-7731, urgent"),
    ("pelican-7731", "the ticket is PELICAN-7731, urgent"),
    ("a.b", "call a.b() first"),
    ("foo:", "foo: bar"),
    ('"hi there"', 'he said "hi there" twice'),
    ("it's", "it's raining"),
    ("NEAR(x", "NEAR(x is not an operator here"),
    ("café", "un café noir"),
])
async def test_user_text_is_searched_as_plain_text(
        store: SessionStore, query: str, expected: str) -> None:
    await chat_with(store, "console:1", "the ticket is PELICAN-7731, urgent",
                    "call a.b() first", "foo: bar", 'he said "hi there" twice', "it's raining",
                    "NEAR(x is not an operator here", "un café noir", "nothing to see")
    hits = await store.search(query)
    assert expected.replace("[", "").replace("]", "") in [
        h.snippet.replace("[", "").replace("]", "") for h in hits]
    assert all("nothing to see" not in h.snippet for h in hits)


@pytest.mark.parametrize(("query", "hits"), [
    ('"', 0), ('""', 0), ("*", 0), ("-", 0), ("(", 0), ("'", 0), (":", 0), ("^", 0),
    ("AND", 1), ("OR NOT", 1), ("NOT*", 1), ("words)", 1),
])
async def test_syntax_characters_never_crash_and_operators_are_words(
        store: SessionStore, query: str, hits: int) -> None:
    await chat_with(store, "console:1", "AND OR NOT are words too")
    assert len(await store.search(query)) == hits


async def test_terms_must_all_match_and_keep_their_order_inside_a_term(
        store: SessionStore) -> None:
    await chat_with(store, "console:1", "red apple pie", "green apple", "7731-PELICAN")
    assert [h.snippet for h in await store.search("apple red")] == ["[red] [apple] pie"]
    assert [h.snippet for h in await store.search("PELICAN-7731")] == []


async def test_hits_name_session_position_role_and_chat(store: SessionStore) -> None:
    first = await chat_with(store, "console:1", "zebra crossing")
    second = await chat_with(store, "discord:9", "a", "zebra stripes")
    hits = await store.search("zebra")
    assert {(h.session_id, h.chat_key, h.seq, h.role) for h in hits} == {
        (first, "console:1", 0, "user"), (second, "discord:9", 1, "user")}
    assert [h.session_id for h in await store.search("zebra", chat_key="discord:9")] == [second]
    assert all(h.created_at > 0 for h in hits)


async def test_search_finds_original_turns_of_ended_chain_sessions(
        store: SessionStore) -> None:
    parent = await chat_with(store, "console:1", "the vault code is HERON-42")
    child = await store.record_turn(parent, TurnRecord(
        compaction=Compaction(messages=(msg("user", "summary: a code was shared"),))))
    await store.append_messages(child.id, [msg("user", "what was the HERON code?")])
    hits = await store.search("HERON-42")
    assert [(h.session_id, h.seq) for h in hits] == [(parent, 0)]
    assert {h.session_id for h in await store.search("HERON")} == {parent, child.id}


async def test_text_blocks_of_list_content_are_searchable_other_blocks_are_not(
        store: SessionStore) -> None:
    await chat_with(store, "console:1", "plain")
    session = await store.live_session("console:1")
    assert session is not None
    await store.append_messages(session.id, [msg("user", [
        {"type": "text", "text": "look at the lighthouse"},
        {"type": "image_url", "image_url": {"url": "https://example.com/penguin.png"}}])])
    [hit] = await store.search("lighthouse")
    assert hit.snippet == "look at the [lighthouse]"
    assert await store.search("penguin") == []


async def test_index_follows_text_changes_only(sqlite_store: SqliteSessionStore) -> None:
    session = await chat_with(sqlite_store, "console:1", "old words")
    with sqlite3.connect(sqlite_store.path) as db:
        db.execute("UPDATE messages SET answered = 1, tokens = 5")  # no text change
        db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
        db.execute("UPDATE messages SET content = 'new words' WHERE session_id = ?", (session,))
        db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
    assert await sqlite_store.search("old") == []
    assert [h.snippet for h in await sqlite_store.search("new")] == ["[new] words"]


async def test_empty_query_finds_nothing(store: SessionStore) -> None:
    await chat_with(store, "console:1", "anything")
    assert await store.search("   ") == []


async def test_a_broken_index_is_a_clear_store_error(sqlite_store: SqliteSessionStore) -> None:
    await chat_with(sqlite_store, "console:1", "anything")
    with sqlite3.connect(sqlite_store.path) as db:
        db.execute("DROP TABLE messages_fts")
    with pytest.raises(StoreError) as caught:
        await sqlite_store.search("anything")
    assert "search for 'anything' failed" in str(caught.value)
    assert "\n" not in str(caught.value)


ATTACHMENT = {"type": "attachment", "kind": "file", "file": "ab/cd.txt", "name": "notes.txt",
              "text": "the spare key is under the KINGFISHER pot"}


async def test_attachments_are_found_by_their_text_and_never_by_their_file(
        store: SessionStore) -> None:
    """A picture's caption, a document's text and a transcript are searchable."""
    session = await store.create_root_session("console:1", model=None, system_prompt=None)
    await store.append_messages(session.id, [
        msg("user", [ATTACHMENT, {"type": "text", "text": "where is it?"}])])
    assert [(h.session_id, h.seq) for h in await store.search("kingfisher")] == [
        (session.id, 0)]
    assert await store.search("cd.txt") == [] and await store.search("notes") == []


async def test_a_schema_6_file_keeps_its_rows_found_and_its_index_consistent(
        tmp_path: Path) -> None:
    """Schema 7 made attachment text searchable; an older file's rows stay found, and
    FTS5's own consistency check holds after new attachments and after deleting."""
    path = tmp_path / "t.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        schema.migrate(db, str(path), target=6)
        db.execute("INSERT INTO sessions (id, chat_key, kind, started_at)"
                   " VALUES ('old', 'console:1', 'root', 1)")
        db.execute("INSERT INTO messages (session_id, seq, role, content, created_at)"
                   " VALUES ('old', 0, 'user', 'the heron nests early', 1)")
    async with SqliteSessionStore(path) as store:
        session = await store.create_root_session("console:1", model=None, system_prompt=None)
        await store.append_messages(session.id, [
            msg("user", [ATTACHMENT, {"type": "text", "text": "where is it?"}])])
        assert [h.seq for h in await store.search("kingfisher")] == [0]
        assert [h.session_id for h in await store.search("heron")] == ["old"]
        assert await store.search("cd.txt") == [] and await store.search("notes") == []
    with sqlite3.connect(path) as raw:  # FTS5's own consistency check raises if not
        raw.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
        raw.execute("DELETE FROM messages")
        assert raw.execute("SELECT count(*) FROM messages_fts").fetchone() == (0,)
