"""What one check of `threadline doctor` says, and what the checks share."""

from __future__ import annotations

import os
from dataclasses import dataclass

NETWORK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Result:
    """One check's verdict; `detail` is a single line with no secret in it."""

    check: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok' if self.ok else 'FAIL':<6}{self.check:<12}{self.detail}"


def network_reason(exc: BaseException) -> str:
    """The root cause of a failed connection in a few words, e.g. 'connection refused'."""
    seen: BaseException | None = exc
    for _ in range(10):  # exception chains can loop; ten links reach any real root cause
        if seen is None:
            break
        if isinstance(seen, TimeoutError) or "Timeout" in type(seen).__name__:
            return f"no answer within {NETWORK_TIMEOUT_S:g} s"
        if isinstance(seen, OSError) and seen.errno:
            reason = os.strerror(seen.errno) if seen.errno > 0 else seen.strerror
            return str(reason or seen).lower()
        seen = seen.__cause__ or seen.__context__
    return "connection failed"
