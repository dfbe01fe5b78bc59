"""One chat's agent: builds the request, calls the model, compacts when it must."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

from agent import caching
from agent.attachments.files import AttachmentFiles
from agent.attachments.present import for_model
from agent.context_engine import (
    ContextEngine,
    EngineFactory,
    EngineSettings,
    EngineStatus,
)
from agent.errors import AgentError, ContextOverflowError, OutputCapError
from agent.fallback import Windows
from agent.providers.base import Completion, Provider
from agent.providers.chain import ModelChain, Route
from agent.tokens import Transcript, image_tokens
from agent.tools.budget import OutputBudget
from agent.tools.calls import run_calls
from agent.tools.registry import ToolRegistry
from agent.turns import (
    AgentSettings,
    Compacted,
    CompactResult,
    ModelLimits,
    ReplyStream,
    TurnFailed,
    TurnResult,
)
from agent.usage import UsageLedger

log = logging.getLogger(__name__)

MAX_OVERFLOW_ATTEMPTS = 3
MAX_OUTPUT_CAP_ATTEMPTS = 3
NO_TOOLS_REPLY = "I tried to look something up, but I have no tools here. Please ask again."
MAX_TOOL_STEPS = 8  # model calls in one turn that may run tools; the next must answer
TOOL_LIMIT_REPLY = ("I stopped looking things up: this question took more tool steps than I "
                    "allow myself in one turn. Ask again, perhaps more narrowly.")
OVERFLOW_ADVICE = ("This conversation is too long for the model even after compacting it. "
                   "Send /compress to condense it further, or /new to start fresh.")


class Agent:
    """Owns the live transcript of one session and its context engine instance.

    The host reads and steers the engine only through the methods below (status, state,
    session boundaries, sizes), never through the engine itself. `provider` may be a
    `ModelChain`: each call of a turn then goes to the first model of it that answers.
    """

    def __init__(self, provider: Provider, engine: ContextEngine, *,
                 ledger: UsageLedger | None = None, max_output_tokens: int = 1024,
                 limits: ModelLimits | None = None, compression_enabled: bool = True,
                 tools: ToolRegistry | None = None, budget: OutputBudget | None = None,
                 files: AttachmentFiles | None = None) -> None:
        self.provider = provider
        self.models = ModelChain.of(provider)
        self.files = files  # where pictures sent in this chat are kept
        self.engine = engine
        self.tools = tools if tools else None  # an empty registry offers nothing
        self.budget = budget
        self.ledger = ledger or UsageLedger()
        self.max_output_tokens = max_output_tokens
        self.limits = limits or ModelLimits()
        self.compression_enabled = compression_enabled
        self.messages: Transcript = engine.new_transcript()
        self._schemas: list[dict[str, Any]] | None = None  # the tools last offered
        self._offer()
        self._stream: ReplyStream | None = None  # where this turn's answer is shown live
        self._new: list[dict[str, Any]] = []  # what this turn added to the transcript
        self._split: int | None = None  # len(_new) at the last compaction of this turn
        self._accepts_force = accepts_keyword(engine.compress, "force")
        self.windows = Windows(engine, self.limits, self.models.head)
        self._route: Route | None = None  # this turn's way through its models

    @classmethod
    def create(cls, provider: Provider, engine_factory: EngineFactory,
               settings: AgentSettings, *, summary_provider: Provider | None = None,
               limits: ModelLimits | None = None,
               tools: Callable[[ContextEngine], ToolRegistry | None] | None = None,
               budget: OutputBudget | None = None,
               files: AttachmentFiles | None = None) -> Agent:
        """An agent with a fresh engine whose summarizer calls are booked on this agent."""
        ledger = UsageLedger()
        engine = engine_factory(EngineSettings(
            context_length=provider.context_length, max_output_tokens=settings.max_output_tokens,
            threshold=settings.threshold, target_ratio=settings.target_ratio,
            protect_last_n=settings.protect_last_n,
            summary_provider=summary_provider or provider, main_provider=provider,
            summary_context_length=settings.summary_context_length, usage_sink=ledger.record,
            image_cost=image_tokens(provider.kind, provider.vision)))
        return cls(provider, engine, ledger=ledger, max_output_tokens=settings.max_output_tokens,
                   limits=limits, compression_enabled=settings.compression_enabled,
                   tools=tools(engine) if tools else None, budget=budget, files=files)

    # --- what the host may read and tell ------------------------------------------------
    @property
    def window(self) -> int:
        """The model's context window as far as we know it (a provider may have lowered it)."""
        return self.engine.context_length

    def status(self) -> EngineStatus:
        return self.engine.get_status()

    def context_tokens(self) -> int:
        """The session's size: the last provider-reported prompt tokens, else our estimate."""
        return self.engine.last_prompt_tokens or self.engine.raw_request_estimate(self.messages)

    def export_state(self) -> dict[str, Any]:
        """The engine's guard state, persisted per session and carried into continuations."""
        return self.engine.export_state()

    def has_content_to_compress(self) -> bool:
        return self.engine.has_content_to_compress(self.messages)

    def session_started(self, session_id: str, parent_session_id: str | None = None) -> None:
        kwargs = {"parent_session_id": parent_session_id} if parent_session_id else {}
        self.engine.on_session_start(session_id, **kwargs)

    def session_ended(self, session_id: str) -> None:
        """A real boundary (/new, expiry); never a turn, never a restart."""
        self.engine.on_session_end(session_id, self.messages.as_list())

    # --- transcript -------------------------------------------------------------------
    def load(self, messages: list[dict[str, Any]], state: dict[str, Any] | None = None) -> None:
        self.messages.replace(messages)
        if state:
            self.engine.restore_state(state)

    def append(self, messages: list[dict[str, Any]]) -> None:
        """Add messages to the live transcript (each is estimated and redacted once, here)."""
        self.messages.extend(messages)

    def _notices(self) -> tuple[str, ...]:
        report = self.engine.last_report
        return tuple(report.notices) if report else ()

    def _add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self._new.append(message)

    def _compacted(self, stored: list[dict[str, Any]]) -> Compacted | None:
        """The continuation to store if this turn compacted, from the turn's bookkeeping."""
        if self._split is None:
            return None
        before = self._new[:self._split]
        after_count = len(self._new) - self._split
        kept = list(self.messages)[:len(self.messages) - after_count]
        # Positions by identity: a message the engine kept verbatim is the same object.
        origin = {id(m): i for i, m in enumerate([*stored, *before])}
        return Compacted(tuple(kept), covers=len(stored),
                         sources=tuple(origin.get(id(m)) for m in kept))

    # --- a model turn -------------------------------------------------------------------
    async def run_turn(self, stream: ReplyStream | None = None, *,
                       models: Provider | None = None) -> TurnResult:
        """Answer the transcript as it stands (the user messages are already appended).

        With `stream` (and a model that streams) the answer's text is shown as it is
        written; what the turn returns and stores is the same as without. `models` (a
        provider or a `ModelChain`) runs this one turn instead of the agent's own, fitted
        to its window the same way (docs/fallbacks.md).
        """
        stored, state = self.messages.as_list(), self.engine.export_state()
        self._new, self._split = [], None
        self._stream = stream
        self._route = (ModelChain.of(models) if models is not None else self.models).route()
        try:
            reply, notices = await self._run_turn()
        except AgentError as exc:
            # A failed turn changes nothing: the next turn starts from the same transcript.
            self.messages.replace(stored)
            self.engine.restore_state(state)
            raise TurnFailed(exc.user_message, cause=exc, usage=self.ledger.drain()) from exc
        finally:
            self._stream, self._route = None, None
            self.windows.use(self.models.head)
        compaction = self._compacted(stored)
        split = self._split or 0
        return TurnResult(
            reply=reply,
            before=tuple(self._new[:split]) if compaction else (),
            compaction=compaction,
            after=tuple(self._new[split:]) if compaction else tuple(self._new),
            usage=self.ledger.drain(),
            notices=tuple(notices),
        )

    async def _run_turn(self) -> tuple[str, list[str]]:
        notices: list[str] = []
        compacted = False
        assert self._route is not None
        if self.compression_enabled and self.engine.should_compress_preflight(self.messages):
            compacted = await self._compress(notices)
        for step in range(MAX_TOOL_STEPS + 1):
            completion, recovered = await self._route.call(
                functools.partial(self._on_model, notices=notices))
            compacted = compacted or recovered
            prompt_tokens = completion.usage.prompt_tokens
            # Calibrate on the request as sent, before the reply joins the transcript.
            self.engine.calibrate(self.engine.raw_request_estimate(self.messages), prompt_tokens)
            self.engine.update_from_response(completion.usage)
            self._add(completion.message)
            reply = completion.text
            calls = completion.message.get("tool_calls") or []
            if not calls:
                break
            if self.tools is None or step == MAX_TOOL_STEPS:
                reply = self._give_up_on_tools(
                    calls, TOOL_LIMIT_REPLY if self.tools else (reply or NO_TOOLS_REPLY))
                break
            results = await run_calls(self.tools, calls)
            for message in (self.budget.apply(results) if self.budget
                            else [m for _, m in results]):
                self._add(message)
            if self.budget is not None:
                await self.budget.share()
        self.windows.use(self.models.head)  # what the next turn starts from
        if (self.compression_enabled and not compacted
                and self.engine.should_compress(prompt_tokens)):
            await self._compress(notices, current_tokens=prompt_tokens)
        notices.extend(filter(None, [self._route.notice()]))
        return reply, notices

    async def _on_model(self, model: Provider, notices: list[str]) -> tuple[Completion, bool]:
        """One call on `model`, the transcript fitted to its window first: a forced
        compaction (like overflow recovery, whatever `compression_enabled` says) when that
        window is smaller and the transcript no longer fits it."""
        compacted = False
        if self.windows.use(model) and self.engine.should_compress_preflight(self.messages):
            compacted = await self._compress(notices, force=True)
        completion, recovered = await self._complete_with_recovery(model, notices)
        return completion, compacted or recovered

    def _give_up_on_tools(self, calls: list[dict[str, Any]], reply: str) -> str:
        """The model still calls tools at the step limit (or calls one it was never
        offered): every call gets a result, so the pairs stay whole, and the user a plain
        answer."""
        why = ("the tool step limit for this turn was reached" if self.tools
               else "no tools are available here")
        for call in calls:
            self._add({"role": "tool", "tool_call_id": call.get("id") or "",
                       "content": f"Not run: {why}."})
        self._add({"role": "assistant", "content": reply})
        return reply

    async def _compress(self, notices: list[str], *, current_tokens: int | None = None,
                        focus_topic: str | None = None, force: bool = False) -> bool:
        kwargs: dict[str, Any] = {"current_tokens": current_tokens, "focus_topic": focus_topic}
        if self._accepts_force:
            kwargs["force"] = force
        after = await self.engine.compress(self.messages, **kwargs)
        notices.extend(self._notices())
        report = self.engine.last_report
        changed = report.changed if report else list(after) != self.messages.as_list()
        if changed:
            self._split = len(self._new)
            self.messages.replace(after)
        return changed
    async def _complete_with_recovery(self, model: Provider, notices: list[str]
                                      ) -> tuple[Completion, bool]:
        """Call the model; on overflow compact and retry (≤ 3), on an output cap shrink it."""
        compacted = False
        max_tokens = self.max_output_tokens
        if model is not self.models.head:  # another model's own cap applies to it
            max_tokens = min(max_tokens, model.settings.max_output_tokens)
        overflow_attempts = cap_attempts = 0
        while True:
            try:
                completion = await self._call_model(model, max_tokens)
            except ContextOverflowError as exc:
                overflow_attempts += 1
                if overflow_attempts > MAX_OVERFLOW_ATTEMPTS:
                    raise TurnFailed(OVERFLOW_ADVICE, cause=exc) from exc
                if exc.limit:
                    self.windows.learn(model, exc.limit)
                if not await self._compress(notices, force=True):
                    raise TurnFailed(OVERFLOW_ADVICE, cause=exc) from exc
                compacted = True
                continue
            except OutputCapError as exc:
                cap_attempts += 1
                if cap_attempts > MAX_OUTPUT_CAP_ATTEMPTS or max_tokens <= 16:
                    raise
                # Only this call shrinks: the window and the transcript stay as they are.
                lowered = exc.limit if exc.limit and exc.limit < max_tokens else max_tokens // 2
                max_tokens = max(16, lowered)
                log.info("output cap: retrying with max_tokens=%d", max_tokens)
                continue
            self.ledger.record(completion.model or model.model, "chat", completion.usage)
            return completion, compacted

    async def _call_model(self, model: Provider, max_tokens: int) -> Completion:
        """One model call, streamed when the turn has a live reply. Text shown for a call
        that fails or turns into tool calls is retracted: only the answer stays."""
        stream = self._stream if model.streams else None
        kwargs: dict[str, Any] = {"on_text": stream.text} if stream else {}
        if self.files is not None:  # pictures another process kept (docs/scale-out.md)
            await self.files.fetch_missing(self.messages.as_list())
        try:
            completion = await model.complete(
                self._request(model), max_tokens=max_tokens,
                tools=self._offer(), **kwargs)
        except AgentError:
            if stream:
                stream.retract()
            raise
        if stream and completion.message.get("tool_calls"):
            stream.retract()
        return completion

    def _offer(self) -> list[dict[str, Any]] | None:
        """The tool schemas for the next request. They go with every request, so they count
        in its size; they change only when tools come or go (an MCP server's)."""
        schemas = self.tools.schemas() if self.tools else None
        if schemas is not self._schemas:
            self._schemas = schemas
            self.messages.set_request_overhead(tools=schemas)
        return schemas

    def _request(self, model: Provider) -> list[dict[str, Any]]:
        """The transcript as sent: attachments as this model takes them, with
        prompt-caching breakpoints where they apply."""
        messages = for_model(self.messages.as_list(), self.files, vision=model.vision)
        ttl = model.settings.cache_ttl
        if not ttl:
            return messages
        style = "anthropic" if model.kind == "anthropic" else "openai"
        return caching.mark(messages, ttl, style)

    # --- compaction outside a turn ---------------------------------------------------------
    async def compact(self, focus_topic: str | None = None, *, force: bool = True) -> CompactResult:
        """Manual /compress (force) or gateway hygiene (not forced)."""
        stored = self.messages.as_list()
        self._new, self._split = [], None
        notices: list[str] = []
        await self._compress(notices, focus_topic=focus_topic, force=force)
        return CompactResult(before=tuple(stored), compaction=self._compacted(stored),
                             usage=self.ledger.drain(), notices=tuple(notices),
                             report=self.engine.last_report)


def accepts_keyword(function: Any, name: str) -> bool:
    """Whether `function` can take keyword `name` (declared, or through **kwargs).

    Asked once per agent of a bound method: answered once per underlying function,
    since reading a signature costs more than building the rest of an agent.
    """
    underlying = getattr(function, "__func__", None)
    if underlying is not None:
        return _takes_keyword(underlying, name)
    return _takes_keyword.__wrapped__(function, name)


@functools.lru_cache(maxsize=64)
def _takes_keyword(function: Any, name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
               or p.kind is p.VAR_KEYWORD for p in parameters)
