"""Local fake servers for the services Threadline talks to (see shared/HARNESS.md).

Names are imported lazily so `python -m tests.harness.fake_openai` runs the module once.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FakeServer": "tests.harness.base",
    "RecordedCall": "tests.harness.base",
    "echo_responder": "tests.harness.base",
    "tool_call_reply": "tests.harness.base",
    "FakeOpenAI": "tests.harness.fake_openai",
    "FakeAnthropic": "tests.harness.fake_anthropic",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tests.harness' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
