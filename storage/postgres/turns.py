"""A turn's two writes, each one statement: server functions instead of round trips.

Taking a message (guard the session, number and insert the messages, link the ledger rows)
and recording a turn without a compaction (guard, insert, link the reply, its deliveries,
usage, engine state, the session as it now is) each ran 8 to 11 statements, a round trip
apiece. The same steps run inside PostgreSQL as `threadline_take` and `threadline_turn`; a
single statement is atomic by itself, so neither needs BEGIN or COMMIT either
(docs/scale-out.md, "Round trips"). A refusal is raised with a code of ours and becomes the
same StoreError the Python steps raised (`refusal`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from storage.errors import ContinuationConflict, InboundChanged, LeaseLost, StoreError
from storage.models import (
    NewMessage,
    OutChunk,
    SessionRecord,
    StoredMessage,
    TurnRecord,
    UsageRecord,
)
from storage.postgres import spending
from storage.postgres.queries import LIVE_SESSION, search_text, stored_rows
from storage.rows import (
    MAX_CHAIN_DEPTH,
    SESSION_COLUMNS_OF,
    dumps,
    message_values,
    new_session_id,
    session_record,
)

CHECK_LEASE = ("SELECT 1 FROM leases AS l JOIN sessions AS s ON l.name = 'chat:' || s.chat_key"
               " WHERE s.id = $1 AND l.epoch = $2")


def lease_lost(what: str, epoch: int) -> LeaseLost:
    return LeaseLost(f"{what}: its lease is no longer at generation {epoch} (another process "
                     "took the chat, or this one took it again, since the work began)")


async def require_lease(con: asyncpg.Connection, session_id: str, epoch: int | None) -> None:
    """The fence of the writes that are several statements (a compaction, a reset): as
    threadline_append's."""
    if epoch is not None and not await con.fetch(CHECK_LEASE, session_id, epoch):
        raise lease_lost(f"the chat of session {session_id}", epoch)


# require_open's cases, as numbers: 0 records on any session (only ledger, usage or state),
# 1 appends to one not continued, 2 to the live one, 3 continues it.
LEDGER, OPEN, LIVE, CONTINUING = range(4)
_MESSAGE_ARGS = """p_role text[], p_content text[], p_format int[], p_tool_calls text[],
    p_tool_call_id text[], p_tool_name text[], p_extra text[], p_tokens int[],
    p_created float8[], p_platform_id text[], p_answered int[], p_sender_id text[],
    p_sender_name text[], p_search text[]"""
_MESSAGE_VALUES = """p_role, p_content, p_format, p_tool_calls, p_tool_call_id, p_tool_name,
    p_extra, p_tokens, p_created, p_platform_id, p_answered, p_sender_id, p_sender_name,
    p_search"""
_SESSION_TYPES = """id text, chat_key text, parent_session_id text, kind text, end_reason text,
    started_at float8, ended_at float8, model text, system_prompt text, title text,
    compression_count int, engine_state text, last_prompt_tokens int, message_count int,
    input_tokens bigint, output_tokens bigint"""

FUNCTIONS = (
    f"""CREATE FUNCTION threadline_append(p_session text, p_mode int, p_epoch bigint,
        {_MESSAGE_ARGS})
    RETURNS TABLE (row_id bigint, row_seq int) LANGUAGE plpgsql AS $$
    #variable_conflict use_column
    DECLARE v_end text; v_chat text; v_start int;
    BEGIN
        SELECT end_reason, chat_key INTO v_end, v_chat FROM sessions WHERE id = p_session
            FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no session ''%''', p_session USING ERRCODE = 'TL404';
        END IF;
        IF p_epoch IS NOT NULL AND NOT EXISTS (SELECT 1 FROM leases
                WHERE name = 'chat:' || v_chat AND epoch = p_epoch) THEN
            RAISE EXCEPTION 'chat %: its lease is no longer at generation % (another process '
                'took the chat, or this one took it again, since the work began)', v_chat,
                p_epoch USING ERRCODE = 'TL410';
        END IF;
        IF p_mode > 0 AND (v_end = 'compression' OR (p_mode > 1 AND v_end IS NOT NULL)
                OR (p_mode = 3 AND EXISTS (SELECT 1 FROM sessions WHERE
                    parent_session_id = p_session AND kind = 'compression'))) THEN
            RAISE EXCEPTION 'session % was already continued or has ended (%)', p_session,
                COALESCE(v_end, 'None') USING ERRCODE = 'TL409';
        END IF;
        IF COALESCE(array_length(p_role, 1), 0) = 0 THEN
            RETURN;
        END IF;
        SELECT COALESCE(MAX(seq) + 1, 0) INTO v_start FROM messages WHERE session_id = p_session;
        RETURN QUERY WITH added AS (
            INSERT INTO messages (session_id, seq, role, content, content_format, tool_calls,
                tool_call_id, tool_name, extra, tokens, created_at, platform_message_id,
                answered, sender_id, sender_name, search_text)
            SELECT p_session, v_start + u.n - 1, u.role, u.content, u.format, u.tool_calls,
                u.tool_call_id, u.tool_name, u.extra, u.tokens, u.created, u.platform_id,
                u.answered, u.sender_id, u.sender_name, u.search
            FROM unnest({_MESSAGE_VALUES}) WITH ORDINALITY AS u(role, content, format,
                tool_calls, tool_call_id, tool_name, extra, tokens, created, platform_id,
                answered, sender_id, sender_name, search, n)
            RETURNING id, seq)
        SELECT id, seq FROM added ORDER BY seq;
    END $$""",
    # Pending ledger rows become taken, each linked to the message carrying its platform
    # message id, else to the message at its position (as many messages as rows), else to
    # the last (storage/rows.py, inbound_links).
    f"""CREATE FUNCTION threadline_take(p_session text, p_epoch bigint, p_inbound bigint[],
        p_texts text[], {_MESSAGE_ARGS})
    RETURNS TABLE (row_id bigint, row_seq int) LANGUAGE plpgsql AS $$
    DECLARE v_ids bigint[]; v_seqs int[]; v_n int; v_rows int; v_row record;
            v_target bigint;
    BEGIN
        SELECT array_agg(a.row_id ORDER BY a.row_seq), array_agg(a.row_seq ORDER BY a.row_seq)
            INTO v_ids, v_seqs FROM threadline_append(p_session, 2, p_epoch,
                {_MESSAGE_VALUES}) AS a;
        v_n := COALESCE(array_length(v_ids, 1), 0);
        v_rows := COALESCE(array_length(p_inbound, 1), 0);
        FOR i IN 1 .. v_rows LOOP
            SELECT id, message_id, status, text INTO v_row FROM inbound
                WHERE id = p_inbound[i] FOR UPDATE;
            IF p_texts IS NOT NULL AND (NOT FOUND OR v_row.status <> 'pending'
                    OR v_row.text IS DISTINCT FROM p_texts[i]) THEN
                RAISE EXCEPTION 'inbound % changed since it was read', p_inbound[i]
                    USING ERRCODE = 'TL412';
            ELSIF NOT FOUND THEN
                RAISE EXCEPTION 'inbound % cannot be taken: it is missing', p_inbound[i]
                    USING ERRCODE = 'TL400';
            ELSIF v_row.status <> 'pending' THEN
                RAISE EXCEPTION 'inbound % cannot be taken: it is %', p_inbound[i],
                    v_row.status USING ERRCODE = 'TL400';
            END IF;
            v_target := NULL;
            FOR k IN 1 .. v_n LOOP
                IF p_platform_id[k] = v_row.message_id THEN
                    v_target := v_ids[k];
                END IF;
            END LOOP;
            IF v_target IS NULL AND v_n > 0 THEN
                v_target := v_ids[CASE WHEN v_n = v_rows THEN i ELSE v_n END];
            END IF;
            UPDATE inbound SET status = 'taken', message_row_id = v_target,
                attempts = attempts + 1 WHERE id = v_row.id;
        END LOOP;
        RETURN QUERY SELECT * FROM unnest(v_ids, v_seqs);
    END $$""",
    # A turn with no compaction: its messages, the reply's ledger link and deliveries (the
    # first chunk marked `sending`, as insert_delivery does), failed rows, usage, state.
    f"""CREATE FUNCTION threadline_turn(p_session text, p_mode int, p_epoch bigint,
        p_now float8,
        {_MESSAGE_ARGS}, p_replied bigint[], p_failed bigint[], p_chunk_text text[],
        p_chunk_entities text[], p_chunk_edit text[], p_usage_model text[],
        p_usage_purpose text[], p_usage int[], p_state text, p_last_prompt int)
    RETURNS TABLE ({_SESSION_TYPES}) LANGUAGE plpgsql AS $$
    #variable_conflict use_column
    DECLARE v_reply bigint; v_first bigint;
    BEGIN
        SELECT a.row_id INTO v_reply FROM threadline_append(p_session, p_mode, p_epoch,
            {_MESSAGE_VALUES}) AS a ORDER BY a.row_seq DESC LIMIT 1;
        IF COALESCE(array_length(p_replied, 1), 0) > 0 AND v_reply IS NOT NULL THEN
            UPDATE inbound SET reply_row_id = v_reply WHERE inbound.id = ANY(p_replied)
                AND inbound.status = 'taken';
            v_first := p_replied[array_length(p_replied, 1)];
            INSERT INTO deliveries (inbound_id, chunk, reply_row_id, text, entities,
                    platform_message_id, sending)
                SELECT v_first, c.n - 1, v_reply, c.body, c.entities, c.edit_of,
                       (c.n = 1 AND c.edit_of IS NULL)::int
                FROM unnest(p_chunk_text, p_chunk_entities, p_chunk_edit) WITH ORDINALITY
                    AS c(body, entities, edit_of, n)
                ON CONFLICT DO NOTHING;
        END IF;
        IF COALESCE(array_length(p_failed, 1), 0) > 0 THEN
            UPDATE inbound SET status = 'failed' WHERE inbound.id = ANY(p_failed)
                AND inbound.status IN ('pending', 'taken');
        END IF;
        INSERT INTO usage (session_id, model, purpose, input, output, cache_read, cache_write,
                reasoning, at)
            SELECT p_session, u.model, u.purpose, p_usage[u.n * 5 - 4], p_usage[u.n * 5 - 3],
                   p_usage[u.n * 5 - 2], p_usage[u.n * 5 - 1], p_usage[u.n * 5], p_now
            FROM unnest(p_usage_model, p_usage_purpose) WITH ORDINALITY AS u(model, purpose, n);
        UPDATE sessions SET engine_state = COALESCE(p_state, sessions.engine_state),
            last_prompt_tokens = COALESCE(p_last_prompt, sessions.last_prompt_tokens)
            WHERE sessions.id = p_session;
        RETURN QUERY SELECT {SESSION_COLUMNS_OF.format(s="s")} FROM sessions AS s
            WHERE s.id = p_session;
    END $$""",
    # The chat's live session, or (`p_create`: in any case) a new root with its system
    # message: a chat whose chain ends in a finished session (a /new, a reset) gets a new
    # root, as on SQLite. The chat's lock makes two processes opening one new chat share a
    # root. $1 and $2 are the chat and the chain depth LIVE_SESSION reads.
    f"""CREATE FUNCTION threadline_open(p_chat text, p_depth int, p_create boolean,
        p_session text, p_now float8, p_model text, p_prompt text, {_MESSAGE_ARGS})
    RETURNS TABLE ({_SESSION_TYPES}) LANGUAGE plpgsql AS $$
    #variable_conflict use_column
    BEGIN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_chat, 0));
        IF NOT p_create THEN
            RETURN QUERY {LIVE_SESSION} WHERE s.end_reason IS NULL;
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
        INSERT INTO sessions (id, chat_key, kind, started_at, model, system_prompt)
            VALUES (p_session, p_chat, 'root', p_now, p_model, p_prompt);
        PERFORM threadline_append(p_session, 0, NULL, {_MESSAGE_VALUES});
        INSERT INTO chats (chat_key, session_id, updated_at) VALUES (p_chat, p_session, p_now)
            ON CONFLICT (chat_key) DO UPDATE SET session_id = excluded.session_id,
            updated_at = excluded.updated_at;
        RETURN QUERY SELECT {SESSION_COLUMNS_OF.format(s="s")} FROM sessions AS s
            WHERE s.id = p_session;
    END $$""",
)


# Every function above, as DROP FUNCTION names them: an upgrade that changes any of them
# drops and creates them all again (schema.py).
NAMES = ("threadline_take", "threadline_turn", "threadline_open", "threadline_append")


def _params(count: int, first: int = 1) -> str:
    return ", ".join(f"${n}" for n in range(first, first + count))


TAKE = f"SELECT row_id, row_seq FROM threadline_take({_params(18)})"
# The turn's spend counters and hold go in the same statement (storage/postgres/spending.py).
TURN = spending.with_spend(f"SELECT * FROM threadline_turn({_params(28)})", 29)
OPEN_CHAT = f"SELECT * FROM threadline_open({_params(21)})"


async def open_chat(con: asyncpg.Connection, chat_key: str, *, create: bool, model: str | None,
                    system_prompt: str | None, system_message: NewMessage | None,
                    now: float) -> SessionRecord:
    """As the store's open_session (`create`: create_root_session), in one statement."""
    [row] = await con.fetch(OPEN_CHAT, chat_key, MAX_CHAIN_DEPTH, create, new_session_id(now), now,
                            model, system_prompt,
                            *message_arrays([system_message] if system_message else [], now))
    return session_record(row)


async def take(con: asyncpg.Connection, session_id: str, epoch: int | None,
               inbound_ids: Sequence[int], messages: Sequence[NewMessage], now: float,
               texts: Sequence[str] | None) -> list[StoredMessage]:
    """As the store's take_inbound, in one statement."""
    found = await con.fetch(TAKE, session_id, epoch, list(inbound_ids),
                            None if texts is None else list(texts),
                            *message_arrays(messages, now))
    return stored_rows(session_id, messages, found, now)


async def record(con: asyncpg.Connection, session_id: str, epoch: int | None,
                 turn: TurnRecord, now: float) -> SessionRecord:
    """As the store's record_turn for a turn without a compaction, in one statement."""
    mode = OPEN if turn.before or turn.after else LEDGER
    replied = list(turn.replied)
    [row] = await con.fetch(
        TURN, session_id, mode, epoch, now, *message_arrays([*turn.before, *turn.after], now),
        replied, list(turn.failed), *chunk_arrays(turn.delivery if replied else ()),
        *usage_arrays(turn.usage), None if turn.engine_state is None
        else dumps(turn.engine_state), turn.last_prompt_tokens, *spending.turn_args(turn))
    return session_record(row)


def message_arrays(messages: Sequence[NewMessage], now: float) -> list[list[Any]]:
    """The messages as the functions' fourteen column arrays."""
    columns: list[list[Any]] = [[] for _ in range(14)]
    for new in messages:
        for column, value in zip(columns, (*message_values(new, now),
                                           search_text(new.message)), strict=True):
            column.append(value)
    return columns


def chunk_arrays(chunks: Sequence[OutChunk]) -> list[list[Any]]:
    return [[c.text for c in chunks], [dumps(list(c.entities)) for c in chunks],
            [c.edit_of for c in chunks]]


def usage_arrays(usage: Sequence[UsageRecord]) -> list[list[Any]]:
    counts = [n for u in usage for n in (u.input_tokens, u.output_tokens, u.cache_read_tokens,
                                         u.cache_write_tokens, u.reasoning_tokens)]
    return [[u.model for u in usage], [u.purpose for u in usage], counts]


def refusal(exc: asyncpg.PostgresError) -> StoreError | None:
    """The StoreError a function's refusal stands for; None for any other error."""
    code, message = getattr(exc, "sqlstate", None), getattr(exc, "message", str(exc))
    if code == "TL409":
        return ContinuationConflict(message)
    if code == "TL412":
        return InboundChanged(message)
    if code == "TL410":
        return LeaseLost(message)
    if code in ("TL404", "TL400"):
        return StoreError(message)
    return None
