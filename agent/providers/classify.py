"""Turn a provider's HTTP error into one of our typed errors (docs/architecture.md,
"Provider errors and usage").

Structured signals (status, error code, error type) decide first; text patterns only refine
or fill in what the structure left open. Both SDK providers and any OpenAI-compatible server
(vLLM, llama.cpp, OpenRouter, Ollama) go through `classify_status`.
"""

from __future__ import annotations

import contextlib
import email.utils
import importlib
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agent.errors import (
    AuthError,
    BadRequestError,
    ContextOverflowError,
    ModelNotFoundError,
    OutputCapError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    plain_error,
)

_MAX_MESSAGE = 400

_CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error",
                            "request_too_large", "string_above_max_length"})
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached",
                          "billing_not_active"})
# Quota and billing trouble that some APIs only say in words (Anthropic answers 400).
_QUOTA_TEXT = re.compile(r"credit balance is too low|exceeded your current quota"
                         r"|insufficient credits", re.IGNORECASE)

# "prompt is too long" family: the prompt alone does not fit.
_OVERFLOW_TEXT = re.compile(
    r"maximum context length|context length exceeded|context_length_exceeded|prompt is too long"
    r"|exceeds? (?:the )?(?:available )?context (?:window|size|length)|context window of"
    r"|too many tokens|input is too long|reduce the length of the messages",
    re.IGNORECASE,
)
# "max_tokens too large" family: the input fits, the requested output room does not.
_OUTPUT_CAP_TEXT = re.compile(
    r"max_(?:completion_)?tokens[`'\"]?\s*(?:is too large|: \d+ > \d+)"
    r"|max_(?:completion_)?tokens[`'\"]? (?:.{0,40})?exceeds?"
    r"|supports at most \d+ completion tokens",
    re.IGNORECASE,
)

_WINDOW_PATTERNS = (
    re.compile(r"maximum context length is (\d[\d,]*)", re.IGNORECASE),
    re.compile(r"prompt is too long: \d[\d,]* tokens > (\d[\d,]*)", re.IGNORECASE),
    re.compile(r"context (?:window|size|length|limit) (?:of|is) (\d[\d,]*)", re.IGNORECASE),
    re.compile(r"n_ctx\W{1,4}(\d+)", re.IGNORECASE),
)
_OUTPUT_LIMIT_PATTERNS = (
    re.compile(r"max_tokens: \d[\d,]* > (\d[\d,]*), which is the maximum", re.IGNORECASE),
    re.compile(r"supports at most (\d[\d,]*) completion tokens", re.IGNORECASE),
)
# Messages that state both the window and the input size: input < window means output cap.
_SPLIT_PATTERNS = (
    # Anthropic: "input length and `max_tokens` exceed context limit: A + B > C"
    re.compile(r"exceed context limit: (?P<inp>\d[\d,]*) \+ \d[\d,]* > (?P<win>\d[\d,]*)"),
    # OpenAI (older models), vLLM: "... is N tokens. However, you requested X tokens
    # (A in the messages, B in the completion)"
    re.compile(r"maximum context length is (?P<win>\d[\d,]*) tokens.{0,120}?"
               r"\((?P<inp>\d[\d,]*) in the messages", re.IGNORECASE | re.DOTALL),
    # Newer vLLM: "maximum context length is N tokens and your request has A input tokens"
    re.compile(r"maximum context length is (?P<win>\d[\d,]*) tokens.{0,80}?"
               r"request has (?P<inp>\d[\d,]*) input tokens", re.IGNORECASE | re.DOTALL),
)


@dataclass(frozen=True)
class ErrorInfo:
    """The parts of an error response that classification looks at."""

    status: int | None
    message: str
    code: str | None = None
    type: str | None = None
    body: Any = None


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def extract_info(status: int | None, body: Any, fallback: str = "") -> ErrorInfo:
    """Find message, code and type in the error body shapes of OpenAI, Anthropic and friends."""
    err: Any = body
    if isinstance(err, Mapping) and isinstance(err.get("error"), Mapping):
        err = err["error"]
    if not isinstance(err, Mapping):
        text = err if isinstance(err, str) and err else fallback
        return ErrorInfo(status, str(text), body=body)
    message = err.get("message") or err.get("detail") or err.get("error") or fallback
    code = err.get("code")
    kind = err.get("type")
    return ErrorInfo(
        status=status,
        message=str(message),
        code=str(code) if code is not None else None,
        type=str(kind) if kind is not None else None,
        body=body,
    )


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from `retry-after-ms`, `retry-after` (seconds or HTTP date)."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(float(lowered["retry-after-ms"]) / 1000.0, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def stated_window(text: str) -> int | None:
    """The context window an overflow message states, if it states one."""
    for pattern in _WINDOW_PATTERNS:
        if match := pattern.search(text):
            return _int(match.group(1))
    return None


def _stated_output_room(text: str) -> int | None:
    for pattern in _OUTPUT_LIMIT_PATTERNS:
        if match := pattern.search(text):
            return _int(match.group(1))
    return None


def _split_output_room(text: str) -> int | None:
    """Output room when the message shows the input alone fits the window."""
    for pattern in _SPLIT_PATTERNS:
        if match := pattern.search(text):
            window, used = _int(match.group("win")), _int(match.group("inp"))
            return window - used if used < window else None
    return None


def _body_window(body: Any) -> int | None:
    # llama.cpp's server states the window as a field, not in prose.
    if isinstance(body, Mapping):
        inner = body.get("error") if isinstance(body.get("error"), Mapping) else body
        value = inner.get("n_ctx")
        if isinstance(value, int):
            return value
    return None


def length_error(info: ErrorInfo, label: str, **kw: Any) -> ProviderError | None:
    """Context overflow or output cap, if the error is about length at all.

    Patterns run on the full provider message; `label` is the (scrubbed) exception text.
    """
    text = info.message
    structured = (info.status == 413 or (info.code or "") in _CONTEXT_CODES
                  or (info.type or "") in _CONTEXT_CODES)
    if _OUTPUT_CAP_TEXT.search(text):
        room = _stated_output_room(text) or _split_output_room(text)
        return OutputCapError(label, limit=room, **kw)
    if not (structured or _OVERFLOW_TEXT.search(text)):
        return None
    # A length error that shows the input alone fits is an output cap (see
    # docs/architecture.md, "When compaction runs"): lowering
    # max_tokens fixes it, and shrinking the window would wrongly trigger compression.
    room = _split_output_room(text)
    if room is not None:
        return OutputCapError(label, limit=room, **kw)
    return ContextOverflowError(label, limit=stated_window(text) or _body_window(info.body), **kw)


def classify_status(info: ErrorInfo, *, provider: str, headers: Mapping[str, str] | None = None,
                    secret: str | None = None) -> ProviderError:
    """Map an HTTP error response to the matching `ProviderError` kind."""
    status = info.status
    text = plain_error(info.message, limit=_MAX_MESSAGE, known=secret)
    label = f"{provider}: HTTP {status}: {text}" if status else f"{provider}: {text}"
    kw: dict[str, Any] = {"status": status, "code": info.code or info.type, "provider": provider}
    code, kind = (info.code or "").lower(), (info.type or "").lower()
    if code in _QUOTA_CODES or kind in _QUOTA_CODES or _QUOTA_TEXT.search(info.message):
        return AuthError(label, **kw)
    if status in (401, 402, 403):
        return AuthError(label, **kw)
    if status == 404:
        return ModelNotFoundError(label, **kw)
    if status == 429:
        return RateLimitedError(label, retry_after=parse_retry_after(headers), **kw)
    if status == 408:
        return ProviderTimeoutError(label, **kw)
    if status is not None and (status >= 500 or status == 409):
        return ProviderUnavailableError(label, **kw)
    length = length_error(info, label, **kw)
    if length is not None:
        return length
    if kind in ("overloaded_error", "api_error", "server_error"):
        return ProviderUnavailableError(label, **kw)
    return BadRequestError(label, **kw)


def from_status_exception(exc: Any, *, provider: str, secret: str | None = None) -> ProviderError:
    """Classify an SDK `APIStatusError` (openai and anthropic share its shape)."""
    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    info = extract_info(status, getattr(exc, "body", None), str(getattr(exc, "message", exc)))
    return classify_status(info, provider=provider, headers=headers, secret=secret)


def _transport_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """(timeouts, other failures) of the HTTP transport the SDKs are built on: newer
    openai and anthropic releases use `httpx2`, older ones `httpx`, whichever is here."""
    timeouts: list[type[Exception]] = []
    failures: list[type[Exception]] = []
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        timeouts.append(module.TimeoutException)
        failures.append(module.HTTPError)
    return tuple(timeouts), tuple(failures)


_TRANSPORT_TIMEOUTS, _TRANSPORT_FAILURES = _transport_errors()


@contextlib.contextmanager
def sdk_errors(sdk: ModuleType, base_error: type[Exception], *, provider: str,
               timeout_s: float, base_url: object, secret: str | None) -> Iterator[None]:
    """Turn an official SDK's exceptions (openai and anthropic name them alike) into ours."""
    try:
        yield
    except sdk.APITimeoutError as exc:
        raise ProviderTimeoutError(f"{provider}: no answer within {timeout_s:g}s",
                                   provider=provider) from exc
    except sdk.APIConnectionError as exc:
        raise ProviderUnavailableError(
            f"{provider}: cannot reach {base_url}: "
            f"{plain_error(str(exc), limit=_MAX_MESSAGE, known=secret)}",
            provider=provider) from exc
    except sdk.APIStatusError as exc:
        raise from_status_exception(exc, provider=provider, secret=secret) from exc
    except sdk.APIError as exc:  # an error event inside a stream that had begun: no status
        info = extract_info(None, getattr(exc, "body", None), str(getattr(exc, "message", exc)))
        raise classify_status(info, provider=provider, secret=secret) from exc
    # A stream that breaks off after it began: the SDKs pass their transport's errors on.
    except _TRANSPORT_TIMEOUTS as exc:
        raise ProviderTimeoutError(f"{provider}: the reply stalled for {timeout_s:g}s",
                                   provider=provider) from exc
    except _TRANSPORT_FAILURES as exc:
        raise ProviderUnavailableError(
            f"{provider}: the connection broke off mid-reply: "
            f"{plain_error(str(exc), limit=_MAX_MESSAGE, known=secret)}",
            provider=provider) from exc
    except base_error as exc:
        text = plain_error(str(exc), limit=_MAX_MESSAGE, known=secret)
        raise ProviderError(f"{provider}: {text}", provider=provider) from exc
