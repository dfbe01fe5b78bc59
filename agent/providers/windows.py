"""Known context windows, used when config does not override `context_length`."""

from __future__ import annotations

LOCAL_WINDOW = 8192
DEFAULT_WINDOW = 128_000

# Substring of the model name -> window in tokens; the first match wins, most specific first.
_KNOWN: tuple[tuple[str, int], ...] = (
    ("smollm2", LOCAL_WINDOW),
    ("claude", 200_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-3.5", 16_385),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("gpt-5", 400_000),
    ("llama-3", 128_000),
    ("qwen", 32_768),
)


def context_window_for(provider: str, model: str) -> int:
    if provider == "local":
        return LOCAL_WINDOW
    name = (model or "").lower()
    for needle, window in _KNOWN:
        if needle in name:
            return window
    return DEFAULT_WINDOW
