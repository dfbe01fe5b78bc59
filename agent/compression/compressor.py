"""ContextCompressor: the built-in context engine (docs/architecture.md,
"Thresholds and budgets" to "When the summary fails").

Keeps the head and a token-budgeted tail verbatim and replaces the middle with a handoff
summary written by the summary model from the original (redacted) turns. A failed summary
never loses anything: the input is returned unchanged, or, when the request no longer
fits, a deterministic extract stands in for the model's summary.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agent.compression.assemble import assemble, sanitize_pairs, validation_error
from agent.compression.budget import Budgets
from agent.compression.extractive import extractive_summary
from agent.compression.guard import Guard
from agent.compression.markers import upgrade_prefix
from agent.compression.plan import CutLimits, Plan, make_plan
from agent.compression.prompts import (
    notice_aborted,
    notice_fallback,
    notice_many_compactions,
    notice_paused,
    notice_skipped,
    notice_summary_model_failed,
)
from agent.compression.render import TurnRenderer, recent_user_requests
from agent.compression.summarizer import Summarizer, finish_summary, task_text
from agent.context_engine import CompressionReport, ContextEngine, EngineSettings, EngineStatus
from agent.errors import (
    AuthError,
    ModelNotFoundError,
    ProviderError,
    ProviderUnavailableError,
    plain_error,
)
from agent.providers.base import Provider
from agent.tokens import Calibration, Message, TokenCache, Transcript, over_share
from agent.usage import CanonicalUsage

log = logging.getLogger(__name__)

WARN_AFTER_COMPACTIONS = 2
STATE_VERSION = 1
COLD_OFFLOAD = 200  # at least this many unrendered turns are rendered in a worker thread
WARM_FROM_SHARE = 0.5  # a transcript is redacted and rendered ahead from half its threshold


class ContextCompressor(ContextEngine):
    """The default engine: summarize the middle, keep head and tail."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.token_cache = TokenCache(image_cost=settings.image_cost)
        self.renderer = TurnRenderer(self.token_cache)
        self.token_cache.warmers.append(self.renderer.warm)
        self.calibration = Calibration()
        self.guard = Guard()
        self.previous_summary: str | None = None
        self.model = settings.main_provider.model if settings.main_provider else ""
        self.protect_first_n = int(settings.extra.get("protect_first_n", 3))
        self.protect_last_n = settings.protect_last_n
        self.threshold_percent = min(1.0, max(0.0, settings.threshold))
        self.target_ratio = min(0.80, max(0.10, settings.target_ratio))
        self.max_output_tokens = settings.max_output_tokens
        self.summary_context_length = settings.summary_context_length
        self._clock = settings.clock or time.time  # wall clock: deadlines survive restarts
        self.last_report = None
        self._set_window(settings.context_length)

    @property
    def name(self) -> str:
        return "compressor"

    # --- thresholds and budgets ----------------------------------------------------------------
    @property
    def budgets(self) -> Budgets:
        return Budgets(self.context_length, self.max_output_tokens, self.threshold_percent,
                       self.target_ratio)

    @property
    def effective_window(self) -> int:
        """The context window minus the room reserved for the reply."""
        return self.budgets.effective_window

    def _set_window(self, context_length: int) -> None:
        self.context_length = max(int(context_length), 1)
        budgets = self.budgets
        self.threshold_tokens = budgets.threshold_tokens
        self.tail_token_budget = budgets.tail_token_budget
        self.token_cache.warm_from = int(self.threshold_tokens * WARM_FROM_SHARE)

    def update_model(self, model: str, context_length: int, **kwargs: Any) -> None:
        self.model = model
        if kwargs.get("max_output_tokens"):
            self.max_output_tokens = int(kwargs["max_output_tokens"])
        if kwargs.get("summary_context_length"):
            self.summary_context_length = int(kwargs["summary_context_length"])
        self._set_window(context_length)

    def summary_budget(self, tokens_summarized: int, summary_window: int) -> int:
        return self.budgets.summary_budget(tokens_summarized, summary_window)

    def _summary_window(self, provider: Provider) -> int:
        """The summary model's window: configured, else its own; the main model's may have
        been lowered by a provider error, which the engine's context_length remembers."""
        configured = self.settings.summary_provider or self.settings.main_provider
        window = (self.summary_context_length if provider is configured else None) \
            or provider.context_length
        if provider is self.settings.main_provider:
            window = min(window, self.context_length)
        return window

    # --- token accounting ------------------------------------------------------------------
    def update_from_response(self, usage: CanonicalUsage) -> None:
        self.last_prompt_tokens = usage.prompt_tokens

    def calibrate(self, estimated_tokens: int, prompt_tokens: int) -> None:
        self.calibration.observe(estimated_tokens, prompt_tokens)

    def new_transcript(self, messages: Sequence[Message] = (), *, system_prompt: str | None = None,
                       tools: list[dict[str, Any]] | None = None) -> Transcript:
        """A running-total transcript that shares this engine's cache (warm compaction)."""
        return Transcript(self.token_cache, messages, system_prompt=system_prompt, tools=tools)

    def raw_request_estimate(self, messages: Sequence[Message],
                             tools: list[dict[str, Any]] | None = None) -> int:
        """Uncalibrated request estimate: what `calibrate` compares against prompt_tokens.

        O(1) on a Transcript (its own system prompt and tools count; `tools` is ignored);
        a plain list sums the cached per-message counts.
        """
        if isinstance(messages, Transcript):
            return messages.raw_estimate()
        return self.token_cache.total(messages) + self.token_cache.tools_tokens(tools)

    def estimate_request(self, messages: Sequence[Message],
                         tools: list[dict[str, Any]] | None = None) -> int:
        return self.calibration.apply(self.raw_request_estimate(messages, tools))

    def fits(self, messages: Sequence[Message], tools: list[dict[str, Any]] | None = None) -> bool:
        """Would the request (plus the reply's reserved room) fit the window? O(1) on a Transcript."""
        return not over_share(self.estimate_request(messages, tools), self.effective_window)

    # --- when compaction runs --------------------------------------------------------------------
    def _guards_allow(self) -> bool:
        return not self.guard.paused and not self.guard.in_cooldown(self._clock())

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return over_share(tokens, self.threshold_tokens) and self._guards_allow()

    def should_compress_preflight(self, messages: Sequence[Message],
                                  tools: list[dict[str, Any]] | None = None) -> bool:
        estimate = self.estimate_request(messages, tools)
        if not over_share(estimate, self.threshold_tokens):
            return False
        # A request that no longer fits must shrink whatever the guards say.
        return over_share(estimate, self.effective_window) or self._guards_allow()

    def has_content_to_compress(self, messages: Sequence[Message]) -> bool:
        return self._plan(list(messages), light=True) is not None

    # --- the cut -----------------------------------------------------------------
    def _plan(self, messages: list[Message], *, total: int | None = None,
              light: bool = False) -> Plan | None:
        limits = CutLimits(self.protect_first_n, self.protect_last_n, self.tail_token_budget,
                           count_cap=self.threshold_tokens // 2)
        earlier = self.compression_count > 0
        return make_plan(messages, self.token_cache, limits, compacted=earlier,
                         remembered=self.previous_summary if earlier else None, total=total,
                         light=light)

    # --- the compaction itself, and its failures ------------------------------------------------------------------
    async def compress(self, messages: list[dict[str, Any]], current_tokens: int | None = None,
                       focus_topic: str | None = None, *, force: bool = False
                       ) -> list[dict[str, Any]]:
        msgs = list(messages)
        # A Transcript knows its size; a plain list's middle is counted as it is rendered.
        known = messages.total if isinstance(messages, Transcript) else None
        if force:
            self.guard.resume()  # a manual compaction lifts the anti-thrashing pause
        plan = self._plan(msgs, total=known)
        if plan is None:
            return self._unchanged(msgs, "noop", self._size(msgs, known), focus_topic)
        now = self._clock()
        cooling = not force and self.guard.in_cooldown(now)
        if not force and (cooling or self.guard.paused):
            before = self._size(msgs, known)
            if self._fits(before, current_tokens):
                return self._unchanged(msgs, "skipped", before, focus_topic)
            if cooling:  # does not fit and the summary model is resting: extract only
                error = "it is resting after a recent failure"
                return self._apply(msgs, plan, self._extract(plan), "fallback_used", before,
                                   focus_topic, 0, [notice_fallback(error)], error)
        try:
            provider = self._summary_provider()  # none configured: fail before rendering
            pieces, middle_tokens = await self._render(plan)
            summary, chunks, notices = await self._summarize(provider, plan, pieces,
                                                             middle_tokens, focus_topic)
        except AuthError as exc:
            error = plain_error(exc)
            log.warning("compaction aborted: the summary model refused credentials or quota: %s",
                        error)
            return self._unchanged(msgs, "aborted", self._size(msgs, known), focus_topic,
                                   error=error, notices=(notice_aborted(error),))
        except Exception as exc:  # transient kinds, and anything else a provider threw
            return self._after_failure(msgs, plan, exc, now, current_tokens,
                                       self._size(msgs, known), focus_topic)
        self.guard.record_success()
        before = plan.edge_tokens + middle_tokens
        return self._apply(msgs, plan, summary, "compressed", before, focus_topic, chunks, notices)

    def _size(self, msgs: list[Message], known: int | None) -> int:
        return self.token_cache.total(msgs) if known is None else known

    def _fits(self, before: int, current_tokens: int | None) -> bool:
        tokens = current_tokens if current_tokens is not None else self.calibration.apply(before)
        return not over_share(tokens, self.effective_window)

    def _after_failure(self, msgs: list[Message], plan: Plan, exc: Exception, now: float,
                       current_tokens: int | None, before: int,
                       focus: str | None) -> list[Message]:
        error = plain_error(exc)
        log.warning("summary failed (%s): %s", type(exc).__name__, error,
                    exc_info=not isinstance(exc, ProviderError))
        delay = self.guard.record_failure(now)
        if self._fits(before, current_tokens):
            return self._unchanged(msgs, "skipped", before, focus, error=error,
                                   notices=(notice_skipped(error, delay),))
        return self._apply(msgs, plan, self._extract(plan), "fallback_used", before, focus, 0,
                           [notice_fallback(error)], error)

    async def _render(self, plan: Plan) -> tuple[list[str], int]:
        """The summarizer's pieces of the turns, and the middle's tokens."""
        turns = plan.turns
        if len(turns) >= COLD_OFFLOAD and not (self.token_cache.is_warm(turns[0], "piece")
                                                and self.token_cache.is_warm(turns[-1], "piece")):
            # Messages not seen at ingest (a plain list loaded from storage): redacting and
            # rendering them all is real CPU work, so keep it off the event loop.
            pieces, counted = await asyncio.to_thread(self.renderer.render, turns)
        else:
            pieces, counted = self.renderer.render(turns)
        if plan.middle_tokens is not None:  # a Transcript's: known before the render
            return pieces, plan.middle_tokens
        if counted is not None and turns is plan.middle:  # no earlier summary taken out
            return pieces, counted
        return pieces, self.token_cache.total(plan.middle)

    def _summary_provider(self) -> Provider:
        provider = self.settings.summary_provider or self.settings.main_provider
        if provider is None:
            raise ProviderUnavailableError("no summary model is configured")
        return provider

    async def _summarize(self, provider: Provider, plan: Plan, pieces: list[str],
                         middle_tokens: int, focus: str | None) -> tuple[str, int, list[str]]:
        """(stored summary, chunks, notices); retries once on the main model if a separate
        summary model is missing, timing out or failing with 5xx."""
        try:
            summary, chunks = await self._run_summary(provider, plan, pieces, middle_tokens,
                                                      focus)
            return summary, chunks, []
        except (ModelNotFoundError, ProviderUnavailableError) as exc:
            main = self.settings.main_provider
            if main is None or main is provider:
                raise
            error = plain_error(exc)
            log.warning("summary model %s failed (%s); retrying on %s", provider.model, error,
                        main.model)
            summary, chunks = await self._run_summary(main, plan, pieces, middle_tokens, focus)
            return summary, chunks, [notice_summary_model_failed(provider.model, error)]

    async def _run_summary(self, provider: Provider, plan: Plan, pieces: list[str],
                           middle_tokens: int, focus: str | None) -> tuple[str, int]:
        window = self._summary_window(provider)
        budget = self.summary_budget(middle_tokens, window)
        summarizer = Summarizer(provider, window=window, budget=budget,
                                usage_sink=self.settings.usage_sink)
        body, chunks = await summarizer.summarize(pieces, plan.previous, focus)
        return finish_summary(body, self._task(plan)), chunks

    def _task(self, plan: Plan) -> str:
        newest = recent_user_requests(plan.turns, self.token_cache, 1)
        return task_text(newest[0] if newest else None, plan.previous)

    def _extract(self, plan: Plan) -> str:
        return extractive_summary(plan.turns, self.token_cache, task=self._task(plan),
                                  previous=plan.previous)

    def _apply(self, msgs: list[Message], plan: Plan, summary: str, outcome: str, before: int,
               focus: str | None, chunks: int, notices: list[str],
               error: str | None = None) -> list[Message]:
        out = sanitize_pairs(assemble(plan.head, summary, plan.tail))
        problem = validation_error(out, len(plan.head), plan.last_user)
        if problem:  # a bug guard: never hand the provider a broken transcript
            log.error("compaction produced an invalid transcript (%s); keeping the input", problem)
            return self._unchanged(msgs, "aborted", before, focus, error=problem)
        after = self.token_cache.total(out)
        self.compression_count += 1
        self.previous_summary = summary
        # The last reported prompt size described the transcript before this compaction;
        # from now on the best figure is our calibrated estimate of what remains.
        self.last_prompt_tokens = self.calibration.apply(after)
        if self.guard.record_saving(before, after):
            notices.append(notice_paused())
        if self.compression_count >= WARN_AFTER_COMPACTIONS:
            notices.append(notice_many_compactions(self.compression_count))
        # The output is the live transcript now: forget the rest (it is recounted if reused).
        self.token_cache.retain(out)
        self.last_report = CompressionReport(
            outcome=outcome, messages_before=len(msgs), messages_after=len(out),
            tokens_before=before, tokens_after=after, summary_chunks=chunks,
            focus_topic=focus, error=error, notices=tuple(notices))
        return out

    def _unchanged(self, msgs: list[Message], outcome: str, before: int, focus: str | None, *,
                   error: str | None = None, notices: tuple[str, ...] = ()) -> list[Message]:
        self.last_report = CompressionReport(
            outcome=outcome, messages_before=len(msgs), messages_after=len(msgs),
            tokens_before=before, tokens_after=before, focus_topic=focus, error=error,
            notices=notices)
        return msgs

    # --- status and persisted state -------------------------------------------------------
    def get_status(self) -> EngineStatus:
        return replace(super().get_status(), auto_compression_paused=self.guard.paused,
                       cooldown_until=self.guard.cooldown_until or None)

    def on_session_reset(self) -> None:
        super().on_session_reset()
        self.previous_summary = None
        self.guard.resume()
        self.last_report = None

    def export_state(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "compression_count": self.compression_count,
            "last_prompt_tokens": self.last_prompt_tokens,
            "previous_summary": self.previous_summary,
            "guard": self.guard.export(),
            "calibration": {"ratio": self.calibration.ratio,
                            "samples": self.calibration.samples},
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        super().restore_state(state)
        summary = state.get("previous_summary")
        self.previous_summary = upgrade_prefix(summary) if isinstance(summary, str) else None
        self.guard = Guard.restore(state.get("guard"))
        calibration = state.get("calibration") or {}
        self.calibration = Calibration(float(calibration.get("ratio", 1.0)),
                                       int(calibration.get("samples", 0)))
