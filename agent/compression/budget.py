"""Thresholds and budgets of the compressor, from the window alone (docs/architecture.md,
"Thresholds and budgets")."""

from __future__ import annotations

from dataclasses import dataclass

MIN_THRESHOLD_TOKENS = 64_000
SMALL_WINDOW_THRESHOLD = 0.85
SUMMARY_SHARE = 0.20
SUMMARY_FLOOR = 2_000
SUMMARY_WINDOW_SHARE = 0.05
SUMMARY_CAP = 12_000


@dataclass(frozen=True)
class Budgets:
    context_length: int
    max_output_tokens: int
    threshold: float  # 0.0–1.0
    target_ratio: float  # 0.10–0.80

    @property
    def effective_window(self) -> int:
        """The context window minus the room reserved for the reply."""
        return max(self.context_length - self.max_output_tokens, 1)

    @property
    def threshold_tokens(self) -> int:
        # Below ~128K windows the floor wins and compaction fires near the hygiene point:
        # small windows carry a large fixed system/tool overhead, and 50% of them thrashes.
        window = self.effective_window
        threshold = max(self.threshold * window, MIN_THRESHOLD_TOKENS)
        if threshold >= window:
            threshold = SMALL_WINDOW_THRESHOLD * window
        return int(threshold)

    @property
    def tail_token_budget(self) -> int:
        return int(self.threshold_tokens * self.target_ratio)

    def summary_budget(self, tokens_summarized: int, summary_window: int) -> int:
        """clamp(20% of the span, 2,000, min(5% of the window, 12,000)), ≤ ¼ summary window.

        When the bounds cross (small windows) the upper one wins.
        """
        upper = min(SUMMARY_WINDOW_SHARE * self.context_length, SUMMARY_CAP)
        budget = min(max(SUMMARY_SHARE * tokens_summarized, SUMMARY_FLOOR), upper)
        return max(1, int(min(budget, summary_window // 4)))
