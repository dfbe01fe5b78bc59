"""The SQLite schema and its forward-only migrations, versioned by PRAGMA user_version."""

from __future__ import annotations

import logging
import sqlite3

from storage.errors import StoreError

log = logging.getLogger(__name__)

# Searchable text of a messages row: the text itself, or the text blocks of list content.
# Written once as a template because the FTS 'delete' command must repeat, for the old row,
# exactly the text that was indexed for it.
_TEXT_OF = """CASE {r}.content_format WHEN 1 THEN
    (SELECT group_concat(json_extract(b.value, '$.text'), char(10))
     FROM json_each({r}.content) AS b WHERE json_extract(b.value, '$.type') = 'text')
    ELSE {r}.content END"""

# From schema 7 on, attachment parts count too: their `text` is a picture's caption, a
# document's text or a voice message's transcript (agent/attachments/parts.py).
_TEXT_OF_V7 = _TEXT_OF.replace("= 'text'", "IN ('text', 'attachment')")

_V1_CORE = (
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        chat_key TEXT NOT NULL,
        parent_session_id TEXT REFERENCES sessions(id),
        kind TEXT NOT NULL CHECK (kind IN ('root', 'compression', 'branch')),
        end_reason TEXT,
        started_at REAL NOT NULL,
        ended_at REAL,
        model TEXT,
        system_prompt TEXT,
        title TEXT,
        compression_count INTEGER NOT NULL DEFAULT 0,
        engine_state TEXT NOT NULL DEFAULT '{}',
        last_prompt_tokens INTEGER,
        CHECK ((end_reason IS NULL) = (ended_at IS NULL)),
        CHECK (kind = 'root' OR parent_session_id IS NOT NULL)
    )""",
    "CREATE INDEX sessions_by_chat ON sessions(chat_key, started_at)",
    "CREATE INDEX sessions_by_parent ON sessions(parent_session_id)",
    # The final guard against a forked chain: at most one compression child per session.
    """CREATE UNIQUE INDEX sessions_one_continuation ON sessions(parent_session_id)
        WHERE kind = 'compression'""",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT,
        content_format INTEGER NOT NULL DEFAULT 0,  -- 0 str, 1 JSON, 2 None, 3 absent
        tool_calls TEXT,
        tool_call_id TEXT,
        tool_name TEXT,
        extra TEXT,  -- any other keys of the message dict, as JSON
        tokens INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        platform_message_id TEXT,
        answered INTEGER,
        sender_id TEXT,
        sender_name TEXT,
        UNIQUE (session_id, seq)
    )""",
    """CREATE TABLE usage (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        model TEXT NOT NULL,
        purpose TEXT NOT NULL,
        input INTEGER NOT NULL DEFAULT 0,
        output INTEGER NOT NULL DEFAULT 0,
        cache_read INTEGER NOT NULL DEFAULT 0,
        cache_write INTEGER NOT NULL DEFAULT 0,
        reasoning INTEGER NOT NULL DEFAULT 0,
        at REAL NOT NULL
    )""",
    "CREATE INDEX usage_by_session ON usage(session_id)",
    """CREATE TABLE inbound (
        id INTEGER PRIMARY KEY,
        platform TEXT NOT NULL,
        chat_id TEXT NOT NULL,
        message_id TEXT NOT NULL,
        chat_key TEXT NOT NULL,
        text TEXT NOT NULL,
        sender_id TEXT,
        sender_name TEXT,
        received_at REAL NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending'
            CHECK (status IN ('pending', 'taken', 'answered', 'failed')),
        message_row_id INTEGER REFERENCES messages(id),
        extra TEXT NOT NULL DEFAULT '{}',
        UNIQUE (platform, chat_id, message_id)
    )""",
    "CREATE INDEX inbound_open ON inbound(received_at) WHERE status IN ('pending', 'taken')",
    """CREATE TABLE chats (
        chat_key TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        updated_at REAL NOT NULL
    )""",
)

def _fts_triggers(text_of: str) -> tuple[str, ...]:
    """The view FTS reads through and the triggers that keep its index in step. The
    'delete' command must repeat, for the old row, exactly the text indexed for it."""
    delete_old = ("INSERT INTO messages_fts(messages_fts, rowid, body) "
                  f"VALUES ('delete', old.id, {text_of.format(r='old')});")
    insert_new = f"INSERT INTO messages_fts(rowid, body) VALUES (new.id, {text_of.format(r='new')});"
    return (
        f"CREATE VIEW message_text(id, body) AS SELECT m.id, {text_of.format(r='m')} "
        "FROM messages AS m",
        f"CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN {insert_new} END",
        f"""CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, content_format
            ON messages WHEN old.content IS NOT new.content
                OR old.content_format IS NOT new.content_format
            BEGIN {delete_old} {insert_new} END""",
        f"CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN {delete_old} END",
    )


_SEARCH_VIEW, *_SEARCH_TRIGGERS = _fts_triggers(_TEXT_OF)
_V2_SEARCH = (
    _SEARCH_VIEW,
    """CREATE VIRTUAL TABLE messages_fts USING fts5(
        body, content='message_text', content_rowid='id',
        tokenize='unicode61 remove_diacritics 2')""",
    *_SEARCH_TRIGGERS,
    # Index what an older database already holds (FTS5 'rebuild' cannot read this view).
    "INSERT INTO messages_fts(rowid, body) SELECT id, body FROM message_text",
)

# A reply is stored before it is sent; until the platform accepts it the inbound row stays
# `taken` and points at it, so a restart delivers the stored reply instead of losing it.
_V3_PENDING_REPLY = (
    "ALTER TABLE inbound ADD COLUMN reply_row_id INTEGER REFERENCES messages(id)",
    # Finishing a row as answered marks its message answered in the same statement, and
    # only in a live session: an ended session never changes.
    """CREATE TRIGGER inbound_answered AFTER UPDATE OF status ON inbound
        WHEN new.status = 'answered' AND old.status <> 'answered'
        BEGIN
            UPDATE messages SET answered = 1 WHERE id = new.message_row_id
                AND session_id IN (SELECT id FROM sessions WHERE end_reason IS NULL);
        END""",
)

# A reply's chunks are recorded with the turn and marked sent one by one, so a delivery cut
# short by a crash is finished on restart: exactly the missing chunks, once.
_V4_DELIVERIES = (
    """CREATE TABLE deliveries (
        inbound_id INTEGER NOT NULL REFERENCES inbound(id),
        chunk INTEGER NOT NULL,
        reply_row_id INTEGER REFERENCES messages(id),
        text TEXT NOT NULL,
        entities TEXT NOT NULL DEFAULT '[]',
        status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
        platform_message_id TEXT,
        sent_at REAL,
        PRIMARY KEY (inbound_id, chunk)
    )""",
    "CREATE INDEX deliveries_by_reply ON deliveries(reply_row_id)",
    # The last chunk out finishes the messages it answers, in the same statement: a reply
    # is "answered" exactly when the platform has all of it.
    """CREATE TRIGGER delivery_complete AFTER UPDATE OF status ON deliveries
        WHEN new.status <> 'pending' AND NOT EXISTS (SELECT 1 FROM deliveries AS d
            WHERE d.inbound_id = new.inbound_id AND d.status = 'pending')
        BEGIN
            UPDATE inbound SET status = 'answered' WHERE reply_row_id = new.reply_row_id
                AND status IN ('pending', 'taken');
        END""",
)

# Small facts the gateway keeps between runs, such as the fingerprint of the command set a
# platform last registered (so a restart with the same commands registers nothing).
_V5_SETTINGS = (
    """CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL,
        updated_at REAL NOT NULL
    )""",
)

# A chat's last message, for session resets after a quiet spell.
_V6_ACTIVITY = ("CREATE INDEX inbound_by_chat ON inbound(chat_key, received_at)",)


# Attachments' text is searchable. No row held an attachment part before this version, so
# what is indexed for every older row stays exactly what the new triggers would index.
_V7_ATTACHMENT_SEARCH = (
    "DROP TRIGGER messages_fts_insert",
    "DROP TRIGGER messages_fts_update",
    "DROP TRIGGER messages_fts_delete",
    "DROP VIEW message_text",
    *_fts_triggers(_TEXT_OF_V7),
)

# Schema 8: what a turn's writes look up, found through an index at any size. A delivered
# reply finds its inbound rows by reply_row_id (was a scan of the whole ledger), and
# marking a message answered checks its own session's end_reason (was a list of every
# live session, built each time). The search index merges its segments 16 at a time
# instead of 4: a stored message cost about 100 µs with the merging, 60 µs now.
_V8_TURN_INDEXES = (
    "INSERT INTO messages_fts(messages_fts, rank) VALUES ('automerge', 16)",
    "CREATE INDEX inbound_by_reply ON inbound(reply_row_id) WHERE reply_row_id IS NOT NULL",
    "DROP TRIGGER inbound_answered",
    """CREATE TRIGGER inbound_answered AFTER UPDATE OF status ON inbound
        WHEN new.status = 'answered' AND old.status <> 'answered'
        BEGIN
            UPDATE messages SET answered = 1 WHERE id = new.message_row_id
                AND (SELECT s.end_reason FROM sessions AS s
                     WHERE s.id = messages.session_id) IS NULL;
        END""",
)

# Schema 9: how many turns started on each inbound message, so one that kills the process
# every time is skipped instead of retried forever.
_V9_ATTEMPTS = ("ALTER TABLE inbound ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",)

# Schema 10: what happens to replies on their way. A chunk being sent (`sending`, set before
# the call and cleared by its answer), and one sent again whose earlier send had no answer
# (the platform may show it twice: `maybe_sent`); chats the platform moved to a new id;
# streamed previews, kept from the moment they are sent, so none stays half-written.
_V10_DELIVERY_FAULTS = (
    "ALTER TABLE deliveries ADD COLUMN sending INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE deliveries ADD COLUMN maybe_sent INTEGER NOT NULL DEFAULT 0",
    """CREATE TABLE chat_moves (
        platform TEXT NOT NULL,
        old_chat_id TEXT NOT NULL,
        new_chat_id TEXT NOT NULL,
        moved_at REAL NOT NULL,
        PRIMARY KEY (platform, old_chat_id)
    )""",
    """CREATE TABLE previews (
        inbound_id INTEGER NOT NULL REFERENCES inbound(id),
        position INTEGER NOT NULL,
        platform_message_id TEXT NOT NULL,
        PRIMARY KEY (inbound_id, position)
    )""",
)

# Schema 11: group messages kept as room context (docs/groups.md).
_V11_OBSERVED = (
    """CREATE TABLE observed (
        id INTEGER PRIMARY KEY,
        platform TEXT NOT NULL,
        chat_key TEXT NOT NULL,
        message_id TEXT NOT NULL,
        sender_id TEXT,
        sender_name TEXT,
        text TEXT NOT NULL,
        received_at REAL NOT NULL,
        UNIQUE (platform, chat_key, message_id)
    )""",
    "CREATE INDEX observed_by_chat ON observed(chat_key, received_at)",
)

# Schema 12: spending budgets (storage/sqlite/spending.py). A counter per opaque key,
# added to with each stored usage row; holds are the estimated cost of turns still
# running, each under every key its turn counts against, until released or expired.
_V12_SPENDING = (
    """CREATE TABLE spend_counters (
        key TEXT PRIMARY KEY,
        usd REAL NOT NULL DEFAULT 0,
        tokens INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE spend_holds (
        hold_id TEXT NOT NULL,
        key TEXT NOT NULL,
        usd REAL NOT NULL,
        tokens INTEGER NOT NULL,
        expires_at REAL NOT NULL,
        PRIMARY KEY (hold_id, key)
    )""",
    "CREATE INDEX spend_holds_by_key ON spend_holds(key, expires_at, usd, tokens)",
    "CREATE INDEX spend_holds_by_expiry ON spend_holds(expires_at)",
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1_CORE, _V2_SEARCH, _V3_PENDING_REPLY,
                                           _V4_DELIVERIES, _V5_SETTINGS, _V6_ACTIVITY,
                                           _V7_ATTACHMENT_SEARCH, _V8_TURN_INDEXES,
                                           _V9_ATTEMPTS, _V10_DELIVERY_FAULTS,
                                           _V11_OBSERVED, _V12_SPENDING)
SCHEMA_VERSION = len(MIGRATIONS)


def configure(db: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """Connection settings: wait for other writers, WAL, durable enough, foreign keys."""
    db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA foreign_keys = ON")


def optimize(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA optimize")


def user_version(db: sqlite3.Connection) -> int:
    row = db.execute("PRAGMA user_version").fetchone()
    return int(row[0]) if row else 0


def migrate(db: sqlite3.Connection, label: str, target: int = SCHEMA_VERSION) -> int:
    """Bring the database up to `target`, one transaction for all steps; return the version.

    Refuses a database written by a newer Threadline. Safe against another process
    migrating the same file: the version is read again under the write lock.
    """
    found = user_version(db)
    refuse_newer(found, label)
    if found >= target:
        return found
    db.execute("BEGIN IMMEDIATE")
    try:
        found = user_version(db)
        refuse_newer(found, label)
        for version in range(found + 1, target + 1):
            for statement in MIGRATIONS[version - 1]:
                db.execute(statement)
            log.info("migrated %s to schema version %d", label, version)
        final = max(found, target)
        db.execute(f"PRAGMA user_version = {final:d}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return final


def refuse_newer(found: int, label: str) -> None:
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"database {label} has schema version {found}, newer than this Threadline "
            f"understands ({SCHEMA_VERSION}); upgrade Threadline to open it"
        )
