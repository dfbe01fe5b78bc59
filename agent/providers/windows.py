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


# Substrings of model names known to read pictures (`model.vision: null`). Checked after
# _NO_VISION, so "gpt-4o-audio" is not taken for a vision model.
_VISION = ("claude-3", "claude-sonnet", "claude-opus", "claude-haiku", "gpt-4o", "gpt-4.1",
           "gpt-4-turbo", "gpt-4-vision", "gpt-5", "o1", "o3", "o4", "gemini", "pixtral",
           "llava", "-vl", "vision", "gemma-3", "gemma3", "llama-4", "qwen2.5-vl", "minicpm-v")
_NO_VISION = ("gpt-4o-audio", "gpt-4o-realtime", "o1-mini", "o1-preview", "o3-mini",
              "gpt-3.5", "claude-2", "claude-instant")


def sees_images(provider: str, model: str) -> bool:
    """Whether a model takes pictures, as far as its name tells: Claude 3 and later, the
    GPT-4o/4.1/5 and o-series families, and open models whose names say so. Unknown
    names are taken as text-only: a picture becomes a note rather than a failed call."""
    if provider == "local":
        return False
    name = (model or "").lower()
    if any(needle in name for needle in _NO_VISION):
        return False
    return any(needle in name for needle in _VISION)
