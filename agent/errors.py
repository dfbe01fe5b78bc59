"""Typed errors of the agent layer; the gateway turns each into one plain sentence."""

from __future__ import annotations

from agent.redact import REDACTED, redact


class AgentError(Exception):
    """Base of every error the agent layer raises on purpose."""

    user_message = "Something went wrong while answering. Please try again."


class ProviderError(AgentError):
    """A provider call failed. `status` is the HTTP status when there was one."""

    user_message = "The model provider returned an error. Please try again in a moment."

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 provider: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.provider = provider


class ContextOverflowError(ProviderError):
    """The prompt is longer than the model accepts; `limit` is the stated window, if any."""

    user_message = ("This conversation no longer fits the model's context window. "
                    "Send /compress to condense it or /new to start fresh.")

    def __init__(self, message: str, *, limit: int | None = None, **kw) -> None:
        super().__init__(message, **kw)
        self.limit = limit


class OutputCapError(ProviderError):
    """The input fits, but input + max_tokens does not; `limit` is the stated output room."""

    def __init__(self, message: str, *, limit: int | None = None, **kw) -> None:
        super().__init__(message, **kw)
        self.limit = limit


class RateLimitedError(ProviderError):
    """The provider asked us to slow down; `retry_after` in seconds when it said."""

    user_message = "The model provider is rate limiting us right now. Please try again shortly."

    def __init__(self, message: str, *, retry_after: float | None = None, **kw) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ProviderUnavailableError(ProviderError):
    """Connection refused, reset, 5xx or overloaded."""

    user_message = "The model provider is unreachable right now. Please try again in a moment."


class ProviderTimeoutError(ProviderUnavailableError):
    """The provider did not answer in time."""

    user_message = "The model took too long to answer. Please try again."


class AuthError(ProviderError):
    """Bad credentials, no permission, or quota exhausted."""

    user_message = ("The model provider rejected our credentials or quota. "
                    "The operator needs to check the API key.")


class ModelNotFoundError(ProviderError):
    """The configured model does not exist at this provider."""

    user_message = "The configured model was not found at the provider. The operator needs to check it."


class BadRequestError(ProviderError):
    """The provider refused the request for another reason."""


class EmptyReplyError(ProviderError):
    """The provider answered with no text and no tool calls."""

    user_message = "The model returned an empty answer. Please try again."


class EngineNotFoundError(AgentError):
    """`context.engine` names an engine that no plugin, registration or built-in provides."""


def plain_error(error: BaseException | str, *, limit: int = 200, with_type: bool = False,
                known: str | None = None) -> str:
    """An error as one short, redacted line for the user and the log.

    `with_type` puts the exception's class name in front; `known` is a configured secret
    (an API key) to mask even when no pattern recognises it. Redaction runs before the
    lines are folded into one, so a private key's body is still read line by line, and
    again after, for a header the fold joins to its value; both before the cut, so a secret
    is never left half-shown at the end of the line.
    """
    message = str(error)
    if known:
        message = message.replace(known, REDACTED)
    message = redact(" ".join(redact(message).split()))
    if isinstance(error, BaseException) and (with_type or not message):
        message = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return message if len(message) <= limit else message[:limit - 1] + "…"
