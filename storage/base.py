"""The store interface, on SQLite or PostgreSQL, without touching agent or platforms."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from storage.coordination import Coordination
from storage.models import (
    ChatActivity,
    ChatSummary,
    Delivery,
    InboundRecord,
    NewMessage,
    ObservedMessage,
    OutChunk,
    SearchHit,
    SessionRecord,
    SpendLimit,
    Spent,
    StoredMessage,
    TurnRecord,
    UsageRecord,
    UsageTotals,
)


class SessionStore(ABC):
    """Append-only conversation history organised as continuation chains.

    Lifecycle words follow the rest of the project: `initialize()` opens and migrates,
    `shutdown()` flushes and closes. Every method raises `StoreError` kinds only.
    """

    # Leases and notices for several gateway processes; None: this store serves one.
    coordination: Coordination | None = None

    @abstractmethod
    async def initialize(self) -> None: ...

    @abstractmethod
    async def shutdown(self) -> None: ...

    # --- sessions and chains -------------------------------------------------------
    @abstractmethod
    async def live_session(self, chat_key: str) -> SessionRecord | None:
        """chat_key -> its current session -> get_compression_tip; None if none or ended."""

    @abstractmethod
    async def create_root_session(self, chat_key: str, *, model: str | None,
                                  system_prompt: str | None,
                                  system_message: NewMessage | None = None) -> SessionRecord:
        """Start a fresh chain for chat_key (ending nothing); `system_message` becomes seq 0."""

    @abstractmethod
    async def open_session(self, chat_key: str, *, model: str | None,
                           system_prompt: str | None,
                           system_message: NewMessage | None = None) -> SessionRecord:
        """The chat's live session, or a new root made in the same transaction: two callers
        racing on a new chat (a command and a message) always get the same session."""

    @abstractmethod
    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    @abstractmethod
    async def end_session(self, session_id: str, reason: str) -> None:
        """End a live session (reset, expired ...); no-op when it already ended."""

    @abstractmethod
    async def get_compression_tip(self, session_id: str) -> str:
        """Follow compression continuations to the last one (one bounded recursive query)."""

    @abstractmethod
    async def chain(self, session_id: str) -> list[SessionRecord]:
        """Root-to-tip list of the compression chain that contains session_id."""

    @abstractmethod
    async def list_sessions(self, chat_key: str | None = None,
                            limit: int = 200) -> list[SessionRecord]: ...

    @abstractmethod
    async def save_engine_state(self, session_id: str, state: dict[str, Any],
                                last_prompt_tokens: int | None = None) -> None: ...

    # --- messages --------------------------------------------------------------------
    @abstractmethod
    async def load_history(self, session_id: str) -> list[StoredMessage]:
        """The session's own messages in seq order (for a continuation: the compacted view)."""

    @abstractmethod
    async def message(self, row_id: int) -> StoredMessage | None:
        """One stored message by its row id (a pending reply, for redelivery)."""

    @abstractmethod
    async def append_messages(self, session_id: str,
                              messages: list[NewMessage]) -> list[StoredMessage]: ...

    @abstractmethod
    async def record_turn(self, session_id: str, turn: TurnRecord) -> SessionRecord:
        """Commit one turn atomically (see TurnRecord); returns the session live afterwards.

        Raises ContinuationConflict when turn.compaction is set but the session was already
        continued or ended; nothing of the turn is written then.
        """

    @abstractmethod
    async def search(self, query: str, chat_key: str | None = None,
                     limit: int = 50) -> list[SearchHit]:
        """Full-text search of every stored message, user text matched as quoted terms."""

    # --- the inbound ledger ----------------------------------------------------------
    @abstractmethod
    async def ingest(self, *, platform: str, chat_id: str, message_id: str, chat_key: str,
                     text: str, sender_id: str | None, sender_name: str | None,
                     extra: dict[str, Any] | None = None) -> InboundRecord | None:
        """Record an inbound message once; None when (platform, chat_id, message_id) exists."""

    @abstractmethod
    async def take_inbound(self, inbound_ids: list[int], session_id: str,
                           messages: list[NewMessage],
                           texts: Sequence[str] | None = None) -> list[StoredMessage]:
        """Append the inbound messages to the session and mark them taken, atomically.
        `texts`: the rows' texts as the caller read them; when one was edited or a row is
        no longer pending, InboundChanged and nothing is written (saves reading them
        again before every take)."""

    @abstractmethod
    async def find_inbound(self, platform: str, chat_id: str,
                           message_id: str) -> InboundRecord | None:
        """The ledger row of one platform message, if it was ever ingested."""

    @abstractmethod
    async def update_inbound_text(self, platform: str, chat_id: str, message_id: str,
                                  text: str) -> str | None:
        """An edit: replace the text if still pending; return the status found (or None)."""

    @abstractmethod
    async def finish_inbound(self, inbound_ids: list[int], status: str) -> None:
        """Finish open ledger rows: `answered` once the platform accepted the reply (their
        message rows in live sessions too), or `failed`. A finished row never changes again."""

    @abstractmethod
    async def retry_inbound(self, inbound_ids: list[int], *, undo: bool = False) -> None:
        """Count one more attempt at open rows (a restart found their turn cut short);
        `undo`: one fewer, down to none, on rows still taken (a turn this process dropped
        on purpose, which says nothing about the message)."""

    @abstractmethod
    async def inbound(self, inbound_ids: list[int]) -> list[InboundRecord]:
        """The ledger rows as they are now (an edit may have changed a pending text)."""

    @abstractmethod
    async def open_inbound(self, chat_key: str | None = None) -> list[InboundRecord]:
        """Inbound rows still pending or taken (not answered, not failed), oldest first, of
        one chat or all; a taken row with `reply_row_id` has its reply stored but not yet
        delivered."""

    @abstractmethod
    async def latest_inbound(self, platform: str) -> list[InboundRecord]:
        """The newest ledger row of each chat of a platform, whatever its status: where a
        catch-up after a restart starts reading."""

    # --- deliveries ------------------------------------------------------------------
    @abstractmethod
    async def deliveries(self, inbound_id: int) -> list[Delivery]:
        """The chunks of the reply to this inbound row, in order, with their status."""

    @abstractmethod
    async def mark_delivered(self, inbound_id: int, chunk: int,
                             platform_message_id: str | None, *, failed: bool = False) -> None:
        """The platform took this chunk (or refused it for good): it is never sent again.

        With the reply's last chunk the inbound messages it answers become answered."""

    @abstractmethod
    async def mark_sending(self, inbound_id: int, chunk: int) -> bool:
        """A send of the chunk begins. If an earlier one began and never got an answer (a
        crash, a timeout), the platform may have that one: this send is marked
        `maybe_sent` (docs/architecture.md, "Sending"). False, and nothing marked, when the
        chunk is not pending any more (sent already): it must not be sent. Under a fence
        (storage/coordination.py) the chat's lease must still be at its generation, else
        LeaseLost."""

    @abstractmethod
    async def mark_not_sent(self, inbound_id: int, chunk: int) -> None:
        """The send that began certainly did not reach the platform (it refused, or could
        not be reached)."""

    @abstractmethod
    async def move_chat(self, platform: str, old_chat_id: str, new_chat_id: str) -> None:
        """The platform moved a chat to a new id (a group became a supergroup): its
        conversation, and replies still on their way, continue there."""

    @abstractmethod
    async def chat_moves(self) -> dict[tuple[str, str], str]:
        """Every move so far: (platform, old chat id) -> new chat id."""

    @abstractmethod
    def forget_chat(self, chat_key: str) -> None:
        """Drop what this process remembers of the chat's live session (another process
        may have answered it meanwhile): the next lookup reads the store."""

    def member(self, holder: str) -> None:
        """Several processes share this store and this one is `holder` (in lease rows):
        `ingest` then says which other process holds a message's chat. Writes made under a
        fence (storage/coordination.py, `fenced`) are refused (LeaseLost) once the chat's
        lease has left the fence's generation. Nothing to do where one process owns the
        store."""
        return None

    def shelf(self, namespace: str, retention_s: float) -> Any:
        """Where files every process must read are kept besides this process's directory
        (an agent.shelf.Shelf), or None when the directory beside the database is the only
        place (one process)."""
        return None

    @abstractmethod
    async def record_notice(self, inbound_id: int, chunks: Sequence[OutChunk]) -> None:
        """Record a short answer (not part of any session) for delivery to one message,
        like a reply's chunks; chunks already recorded for it are kept as they are."""

    @abstractmethod
    async def record_preview(self, inbound_id: int, position: int, message_id: str) -> None:
        """A streamed preview was sent for the turn answering `inbound_id`."""

    @abstractmethod
    async def previews(self, inbound_ids: list[int]) -> dict[int, list[str]]:
        """The previews recorded for these turns, in order."""

    @abstractmethod
    async def forget_previews(self, inbound_ids: list[int]) -> None:
        """Those previews are dealt with (part of a stored reply, or removed)."""

    @abstractmethod
    async def undelivered(self, reply_row_ids: list[int]) -> set[int]:
        """Which of these stored replies still have chunks waiting to be sent."""

    @abstractmethod
    async def chat_activity(self, chat_key: str | None = None) -> list[ChatActivity]:
        """Chats with a live session (one, or all) and when each last spoke."""

    # --- reading for operators (the web view) ----------------------------------------
    @abstractmethod
    async def chat_summaries(self) -> list[ChatSummary]:
        """Every chat that has a session: sessions, compactions, messages and usage by
        model, newest activity first."""

    @abstractmethod
    async def session_messages(self, session_id: str, start: int,
                               limit: int) -> list[StoredMessage]:
        """At most `limit` of the session's messages from position `start`, in order."""

    @abstractmethod
    async def usage_by_day(self) -> dict[str, dict[str, UsageTotals]]:
        """Every chat's usage summed by UTC day ("2026-11-25") and model, oldest day first."""

    @abstractmethod
    async def session_tokens(self, chat_key: str) -> dict[str, tuple[int, int]]:
        """Each of the chat's sessions: (the token estimate of all its messages, of those
        written when it started: a continuation's compacted transcript and its reply)."""

    # --- running as a service -----------------------------------------------------------
    @abstractmethod
    async def begin_run(self) -> bool:
        """The service starts; True when the last run ended uncleanly (then the store was
        checked, and a damaged one raises StoreError)."""

    @abstractmethod
    async def end_run(self) -> None:
        """The service stops cleanly."""

    @abstractmethod
    async def backup(self, dest: str) -> None:
        """A consistent copy of everything at `dest`, while the service keeps writing."""

    # --- settings ----------------------------------------------------------------------
    @abstractmethod
    async def get_setting(self, key: str) -> str | None:
        """A value the gateway kept between runs, or None."""

    @abstractmethod
    async def put_setting(self, key: str, value: str) -> None:
        """Keep (or replace) a value between runs."""

    # --- room context (docs/groups.md) ---------------------------------------------------
    @abstractmethod
    async def observe(self, message: ObservedMessage) -> None:
        """Keep an unaddressed group message; a redelivered one is a no-op."""

    @abstractmethod
    async def observed(self, chat_key: str, first_inbound: int, until: float, since: float,
                       limit: int) -> list[ObservedMessage]:
        """The chat's kept messages, newest first (at most `limit`), received after
        `since` and after the chat's ledger row before `first_inbound`, and before `until`:
        what was said in the room since the bot was last addressed."""

    # --- spending budgets --------------------------------------------------------------
    # Spend is kept as counters under opaque keys made by the gateway (a user's day, a
    # chat's month, ...), added to in the transaction that stores each usage row. A turn
    # holds its estimated cost first, so turns racing past a limit overshoot by at most one.
    @abstractmethod
    async def spent(self, keys: Sequence[str], *, now: float) -> dict[str, Spent]:
        """Each key's counter plus the holds under it that have not expired by `now`; a key
        never used is Spent()."""

    @abstractmethod
    async def hold_spend(self, limits: Sequence[SpendLimit], hold_id: str, usd: float,
                         tokens: int, *, now: float, ttl_s: float) -> str | None:
        """Atomically (across processes): the key of the first limit already reached by
        its spent-and-held amount, placing nothing; else hold (usd, tokens) under every
        limit's key until `now + ttl_s` (or until released) and return None."""

    @abstractmethod
    async def release_hold(self, hold_id: str) -> None:
        """Remove the hold (a turn that ended without booking usage); no-op when gone."""

    # --- usage -----------------------------------------------------------------------
    @abstractmethod
    async def record_usage(self, session_id: str, usage: UsageRecord) -> None: ...

    @abstractmethod
    async def usage_totals(self, session_id: str) -> UsageTotals:
        """Sums over every session of the chain that contains session_id."""

    @abstractmethod
    async def usage_by_model(self, session_id: str) -> dict[str, UsageTotals]:
        """The same chain-wide sums, split by the model that spent them (for prices)."""

    @abstractmethod
    async def usage_by_session(self, session_ids: list[str]) -> dict[str, UsageTotals]:
        """Each listed session's own sums (not its chain's); sessions without usage are
        left out."""
