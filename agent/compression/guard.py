"""Guard state that keeps compaction from hurting: anti-thrashing and failure cooldowns."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

COOLDOWNS_S = (60.0, 300.0, 900.0)  # after the 1st, 2nd, 3rd+ consecutive failure
INEFFECTIVE_SAVING = 0.10
MAX_INEFFECTIVE = 2


@dataclass
class Guard:
    """Persisted per session, so a restart neither forgets a pause nor retries too early."""

    ineffective_strikes: int = 0
    paused: bool = False
    cooldown_until: float = 0.0
    failures: int = 0

    def in_cooldown(self, now: float) -> bool:
        return now < self.cooldown_until

    def record_failure(self, now: float) -> float:
        """Start (or lengthen) the cooldown; returns its length in seconds."""
        self.failures += 1
        delay = COOLDOWNS_S[min(self.failures, len(COOLDOWNS_S)) - 1]
        self.cooldown_until = now + delay
        return delay

    def record_success(self) -> None:
        self.failures = 0
        self.cooldown_until = 0.0

    def record_saving(self, before: int, after: int) -> bool:
        """Count an ineffective compaction; True when this one pauses automatic compaction."""
        saved = (before - after) / before if before > 0 else 0.0
        if saved >= INEFFECTIVE_SAVING:
            self.ineffective_strikes = 0
            return False
        self.ineffective_strikes += 1
        if self.ineffective_strikes >= MAX_INEFFECTIVE and not self.paused:
            self.paused = True
            return True
        return False

    def resume(self) -> None:
        """A manual compaction or a reset lifts the pause."""
        self.paused = False
        self.ineffective_strikes = 0

    def export(self) -> dict[str, Any]:
        return dict(vars(self))  # flat numbers and flags: no deep copy needed

    @classmethod
    def restore(cls, state: dict[str, Any] | None) -> Guard:
        names = {f.name for f in fields(cls)}
        guard = cls(**{k: v for k, v in (state or {}).items() if k in names})
        guard.ineffective_strikes = int(guard.ineffective_strikes)
        guard.paused = bool(guard.paused)
        guard.cooldown_until = float(guard.cooldown_until)
        guard.failures = int(guard.failures)
        return guard
