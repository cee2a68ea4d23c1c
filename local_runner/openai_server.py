"""The local runner behind an OpenAI-compatible API, to measure one's own stack as a black box.

Endpoints: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (non-streaming, and
streaming as server-sent events ending with ``data: [DONE]``; ``usage`` always filled, in the
last chunk when streaming), ``GET /v1/models``, ``GET /health``; with continuous batching also
``POST /v1/engine/profile`` (not an OpenAI endpoint): times the serving engine's own steps while
the server is idle and returns them as JSON, which ``simulate --fit`` reads.

Prompts are text, tokenized one token per UTF-8 byte (``ByteTokenizer``: a client can write a
prompt of exactly n tokens as n ASCII letters) or by a ``tokenizer.json``; or token ids (the
completions API allows ``prompt`` as a list of ints). The runner never stops early, so every
request produces exactly ``max_tokens`` tokens; ``min_tokens``/``ignore_eos`` are accepted and
need nothing more. Unknown request fields are accepted and ignored, as vLLM does.

With ``max_batch_size`` 1 the model serves one request at a time (an asyncio lock; generation
runs in one worker thread so the event loop keeps streaming): concurrent requests queue, which is
the contention a denoised fit has to see through. With a larger ``max_batch_size`` requests are
served by continuous batching (``local_runner.batching``): they join the running batch between
decode steps, prompts are prefilled in chunks within a per-step token budget.

The server can log, one JSON line each, every engine step (``step_log``: its work and seconds)
and every request (``request_log``: when it was received, when its first and last token were
sent, on the server's wall clock): the server-side truth a timing client is compared with.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from idealized_runtime.core.byte_tokenizer import ByteTokenizer
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


def _validation_error(error: ValidationError) -> ApiError:
    """The first problem of a request body, in one line, naming the field (as OpenAI does)."""
    first = error.errors()[0]
    if first["type"] == "model_type":
        return ApiError(400, "the request body must be a JSON object")
    param = str(first["loc"][0]) if first["loc"] else None
    if param == "prompt":  # a union: pydantic reports each member; say what is accepted
        message = (
            "prompt: must be a string or an array of token ids (integers), or one of those "
            "in an array"
        )
    else:
        message = f"{param}: {first['msg']}" if param else first["msg"]
    return ApiError(400, message, param=param)


class _Cancelled(Exception):
    """Raised from the token callback to stop a generation whose client went away."""


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # vLLM-style: unknown fields are ignored

    model: str | None = None
    # Strict ints: JSON true/false or "12" are not token ids or lengths (as OpenAI).
    prompt: str | list[StrictInt] | list[str] | list[list[StrictInt]] | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    stream: bool = False
    n: StrictInt = 1


class ProfileRequest(BaseModel):
    """``POST /v1/engine/profile``: what to time (``local_runner.batching.profile_steps``)."""

    model_config = ConfigDict(extra="forbid")

    batch_sizes: list[StrictInt] | None = Field(default=None, min_length=1, max_length=16)
    prompt_tokens: list[StrictInt] = Field(default=[16, 64], min_length=1, max_length=16)
    output_tokens: StrictInt = Field(default=16, ge=1, le=4096)
    repeats: StrictInt = Field(default=1, ge=1, le=20)
    warmup: bool = True
    seed: StrictInt = 0


class TextTokenizer:
    """Text to ids (and ids back to text pieces) for the served model."""

    def __init__(self, vocab_size: int, tokenizer_json: str | None = None) -> None:
        self.vocab_size = vocab_size
        self._bytes = ByteTokenizer()
        self._hf = None
        if tokenizer_json:
            from tokenizers import Tokenizer

            try:
                self._hf = Tokenizer.from_file(tokenizer_json)
            except Exception as error:  # the Rust library raises a bare Exception
                raise InputError(
                    f"not a readable tokenizer.json: {error}", path=tokenizer_json
                ) from None

    def encode(self, text: str) -> list[int]:
        if self._hf is not None:
            return [i % self.vocab_size for i in self._hf.encode(text).ids]
        return self._bytes.encode(text, self.vocab_size)

    def decode_token(self, token_id: int) -> str:
        if self._hf is not None:
            # Ids past the tokenizer's vocabulary wrap around (as encode wraps ids past the
            # model's), so that every generated token streams as text.
            return self._hf.decode([token_id % self._hf.get_vocab_size()])
        return self._bytes.decode_token(token_id)


class ModelService:
    """A ``Generator`` used by one request at a time."""

    def __init__(
        self,
        arch: Architecture,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        max_batch_size: int = 1,
        seed: int = 0,
        tokenizer: str | None = None,
        generator_factory: Callable[..., Any] | None = None,
        token_budget: int | None = None,
        step_log: str | None = None,
        request_log: str | None = None,
    ) -> None:
        if generator_factory is None:
            from idealized_runtime.local_runner.generate import Generator as generator_factory
        self.arch = arch
        self.generator = generator_factory(
            arch, device=device, dtype=dtype, max_batch_size=max_batch_size, seed=seed
        )
        self.max_seq_len: int = getattr(self.generator, "max_seq_len", arch.max_context)
        self.tokenizer = TextTokenizer(arch.vocab_size, tokenizer)
        self.fingerprint = f"idealized-runtime:{arch.name}:{device}:{dtype}"
        self._lock = asyncio.Lock()
        # One thread: the model is used by one request at a time anyway.
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="generate")
        self.engine = None
        self.max_batch_size = max_batch_size
        self.token_budget = token_budget
        # Requests using the model now, and the profile running (requests wait for its end).
        self._in_flight = 0
        self._profiling: asyncio.Event | None = None
        self.log_request = _json_line_logger(request_log) if request_log else None
        if max_batch_size > 1:
            from idealized_runtime.local_runner.batching import DEFAULT_TOKEN_BUDGET, BatchEngine

            self.token_budget = token_budget or DEFAULT_TOKEN_BUDGET
            self.engine = BatchEngine(self.generator, token_budget=self.token_budget)
            if step_log is not None:
                log_step = _json_line_logger(step_log)
                # On the server's wall clock, as the request log: which step served what.
                self.engine.on_step = lambda step: log_step(
                    {**step.to_dict(), "finished_at_s": round(time.time(), 6)}
                )

    def prompt_ids(self, request: CompletionRequest) -> list[int]:
        prompt = request.prompt
        if request.messages is not None:
            prompt = "".join(
                f"{message.get('role', 'user')}: {_content_text(message.get('content'))}\n"
                for message in request.messages
            )
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if prompt is None or prompt == "" or prompt == []:
            raise ApiError(400, "prompt must not be empty", param="prompt")
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt)
        if all(isinstance(token, int) for token in prompt):
            bad = [t for t in prompt if not 0 <= t < self.arch.vocab_size]  # type: ignore[operator]
            if bad:
                raise ApiError(
                    400,
                    f"token id {bad[0]} outside the vocabulary [0, {self.arch.vocab_size})",
                    param="prompt",
                )
            return list(prompt)  # type: ignore[arg-type]
        raise ApiError(400, "only one prompt per request is supported", param="prompt")

    def output_length(self, request: CompletionRequest, prompt_len: int) -> int:
        if request.n != 1:
            raise ApiError(400, "only n=1 is supported", param="n")
        length = request.max_tokens or request.max_completion_tokens or DEFAULT_MAX_TOKENS
        if prompt_len + length - 1 > self.max_seq_len:
            raise ApiError(
                400,
                f"{prompt_len} prompt tokens + {length} output tokens exceed the context of "
                f"{self.max_seq_len} tokens",
                param="max_tokens",
            )
        return length

    async def tokens(self, prompt: list[int], length: int) -> AsyncIterator[int]:
        """Generated token ids as they are produced; waits its turn for the model (or for a
        slot in the running batch, or for the end of an engine profile)."""
        while self._profiling is not None:
            await self._profiling.wait()
        self._in_flight += 1
        try:
            async for token in self._tokens(prompt, length):
                yield token
        finally:
            self._in_flight -= 1

    async def profile(self, settings: ProfileRequest) -> dict[str, Any]:
        """Time the serving engine's own steps (``profile_steps`` on this server's model and
        cache, no HTTP) while no request is in flight; requests that arrive meanwhile wait."""
        if self.engine is None:
            raise ApiError(
                400,
                "engine profiling needs continuous batching (serve-model --max-batch 2 or more)",
            )
        batches = settings.batch_sizes or sorted(
            {1, 2, self.max_batch_size} | {b for b in (4, 8) if b <= self.max_batch_size}
        )
        if not all(1 <= b <= self.max_batch_size for b in batches):
            raise ApiError(
                400, f"batch_sizes: each must be 1 to {self.max_batch_size}", param="batch_sizes"
            )
        longest = max(settings.prompt_tokens) + settings.output_tokens - 1
        if min(settings.prompt_tokens) < 1 or longest > self.max_seq_len:
            raise ApiError(
                400,
                f"prompt_tokens: each must be at least 1, and with output_tokens within the "
                f"context of {self.max_seq_len} tokens",
                param="prompt_tokens",
            )
        if self._profiling is not None or self._in_flight or not self.engine.idle:
            raise ApiError(
                409, "the engine is busy (requests in flight or a profile running); profile it "
                "when the server is idle", "conflict",
            )  # fmt: skip
        from idealized_runtime.local_runner.batching import profile_steps

        def run() -> list[Any]:
            return profile_steps(
                self.generator, batch_sizes=batches, prompt_tokens=settings.prompt_tokens,
                output_tokens=settings.output_tokens, token_budget=self.token_budget,
                repeats=settings.repeats, warmup=settings.warmup, seed=settings.seed,
            )  # fmt: skip

        self._profiling = done = asyncio.Event()
        started = time.time()
        try:
            steps = await asyncio.get_running_loop().run_in_executor(self._executor, run)
        finally:
            self._profiling = None
            done.set()
        return {
            "object": "engine.profile",
            "model": self.arch.name,
            "max_batch": self.max_batch_size,
            "token_budget": self.token_budget,
            "batch_sizes": batches,
            "prompt_tokens": settings.prompt_tokens,
            "output_tokens": settings.output_tokens,
            "started_at_s": round(started, 6),
            "seconds": round(time.time() - started, 6),
            "steps": [step.to_dict() for step in steps],
        }

    async def _tokens(self, prompt: list[int], length: int) -> AsyncIterator[int]:
        if self.engine is not None:
            async for token in self._batched_tokens(prompt, length):
                yield token
            return
        async with self._lock:
            loop = asyncio.get_running_loop()
            produced: asyncio.Queue[int | None] = asyncio.Queue()
            stop = threading.Event()

            def on_token(token: Any) -> None:
                if stop.is_set():
                    raise _Cancelled
                loop.call_soon_threadsafe(produced.put_nowait, int(token[0]))

            def run() -> None:
                import torch

                ids = torch.tensor([prompt], dtype=torch.long)
                try:
                    self.generator.generate(ids, length, on_token=on_token)
                except _Cancelled:
                    pass
                finally:
                    loop.call_soon_threadsafe(produced.put_nowait, None)

            job = loop.run_in_executor(self._executor, run)
            try:
                while (token := await produced.get()) is not None:
                    yield token
                await job  # re-raise a failure of the generator
            finally:
                # Client gone (or failure): stop the generation, and keep the lock until the
                # thread is done with the model.
                stop.set()
                with contextlib.suppress(BaseException):
                    await asyncio.shield(job)

    async def _batched_tokens(self, prompt: list[int], length: int) -> AsyncIterator[int]:
        assert self.engine is not None
        self.engine.start()
        loop = asyncio.get_running_loop()
        produced: asyncio.Queue[int | BaseException | None] = asyncio.Queue()

        def on_token(token: int) -> None:
            loop.call_soon_threadsafe(produced.put_nowait, token)

        def on_done(error: BaseException | None) -> None:
            loop.call_soon_threadsafe(produced.put_nowait, error)

        sequence = self.engine.submit(prompt, length, on_token, on_done)
        try:
            while True:
                item = await produced.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            sequence.cancel()  # a no-op once it is done; frees the slot if the client left


def _json_line_logger(path: str) -> Callable[[dict[str, Any]], None]:
    """Appends each record as a JSON line (written whole, flushed at once)."""
    handle = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (the server's life)

    def log(record: dict[str, Any]) -> None:
        handle.write(json.dumps(record, separators=(",", ":")) + "\n")

    return log


def _content_text(content: Any) -> str:
    """A chat message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return "" if content is None else str(content)


def _error(
    status: int, message: str, kind: str = "invalid_request_error", param: str | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": None}}, status
    )


def create_app(service: ModelService) -> FastAPI:
    app = FastAPI(title="idealized-runtime local runner (OpenAI-compatible)")
    name = service.arch.name

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> JSONResponse:
        return _error(error.status, error.message, error.kind, error.param)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        # Unknown paths and methods, in OpenAI's error shape too.
        kind = "not_found" if error.status_code == 404 else "invalid_request_error"
        message = f"{request.method} {request.url.path}: {error.detail}"
        return _error(error.status_code, message, kind)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "idealized-runtime"}
            ],
        }

    async def parse(request: Request) -> CompletionRequest:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ApiError(400, "request body is not valid JSON") from None
        try:
            parsed = CompletionRequest.model_validate(body)
        except ValidationError as error:
            raise _validation_error(error) from None
        if parsed.model not in (None, "", name):
            raise ApiError(
                404, f"model {parsed.model!r} not found; serving {name!r}", "not_found", "model"
            )
        return parsed

    def usage(prompt_len: int, length: int) -> dict[str, int]:
        return {
            "prompt_tokens": prompt_len,
            "completion_tokens": length,
            "total_tokens": prompt_len + length,
        }

    async def complete(request: Request, chat: bool) -> Any:
        received = time.time()
        parsed = await parse(request)
        if chat and not parsed.messages:
            raise ApiError(400, "messages must not be empty", param="messages")
        prompt = service.prompt_ids(parsed)
        length = service.output_length(parsed, len(prompt))
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        head = {
            "id": ident,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": name,
            "system_fingerprint": service.fingerprint,
        }
        decode = service.tokenizer.decode_token
        # The request's times on the server's clock (seconds since the epoch): received, first
        # and last token handed to the connection (produced, when not streaming), finished.
        times: dict[str, Any] = {"received_at_s": received}

        def log_request(sent: int, ok: bool) -> None:
            if service.log_request is not None:
                service.log_request({
                    "id": ident, "endpoint": "chat" if chat else "completions",
                    "stream": parsed.stream, "num_prompt_tokens": len(prompt),
                    "num_output_tokens": sent, "ok": ok,
                    "user_agent": request.headers.get("user-agent"),
                    **{key: round(value, 6) for key, value in times.items()},
                    "finished_at_s": round(time.time(), 6),
                })  # fmt: skip

        def token_sent(count: int) -> None:
            now = time.time()
            if count == 1:
                times["first_token_at_s"] = now
            times["last_token_at_s"] = now

        if not parsed.stream:
            pieces = []
            async for token in service.tokens(prompt, length):
                pieces.append(decode(token))
                token_sent(len(pieces))
            log_request(len(pieces), ok=True)
            text = "".join(pieces)
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "logprobs": None}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            return {**head, "choices": [choice], "usage": usage(len(prompt), length)}

        if chat:
            head["object"] = "chat.completion.chunk"

        def chunk(piece: str | None, finish: str | None = None, role: bool = False) -> str:
            if chat:
                delta: dict[str, Any] = {"role": "assistant"} if role else {}
                if piece is not None:
                    delta["content"] = piece
                choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            else:
                choice = {
                    "index": 0,
                    "text": piece or "",
                    "finish_reason": finish,
                    "logprobs": None,
                }
            body = {**head, "choices": [choice]}
            if finish is not None:
                body["usage"] = usage(len(prompt), length)
            return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"

        async def events() -> AsyncIterator[str]:
            sent, ok = 0, False
            try:
                if chat:
                    yield chunk(None, role=True)  # as OpenAI: a role-only first chunk
                async for token in service.tokens(prompt, length):
                    piece = chunk(decode(token))
                    # The chunk goes to the connection now (after the yield, this generator
                    # resumes only when the event loop next gets to it).
                    sent += 1
                    token_sent(sent)
                    yield piece
                yield chunk("" if not chat else None, finish="length")
                yield "data: [DONE]\n\n"
                ok = True
            finally:
                log_request(sent, ok)

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await complete(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await complete(request, chat=True)

    @app.post("/v1/engine/profile")
    async def engine_profile(request: Request) -> dict[str, Any]:
        body = await request.body()
        try:
            settings = ProfileRequest.model_validate_json(body or b"{}")
        except ValidationError as error:
            if error.errors()[0]["type"] == "json_invalid":
                raise ApiError(400, "request body is not valid JSON") from None
            raise _validation_error(error) from None
        return await service.profile(settings)

    return app


def serve(
    arch: Architecture,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    device: str = "cpu",
    dtype: str = "float32",
    max_batch_size: int = 1,
    tokenizer: str | None = None,
    seed: int = 0,
    token_budget: int | None = None,
    step_log: str | None = None,
    request_log: str | None = None,
) -> None:
    """Build the model and serve it until interrupted."""
    import uvicorn

    service = ModelService(
        arch,
        device=device,
        dtype=dtype,
        max_batch_size=max_batch_size,
        seed=seed,
        tokenizer=tokenizer,
        token_budget=token_budget,
        step_log=step_log,
        request_log=request_log,
    )
    batching = f", continuous batching of up to {max_batch_size}" if max_batch_size > 1 else ""
    print(
        f"serving {arch.name} ({device}, {dtype}{batching}) at http://{host}:{port}/v1", flush=True
    )
    uvicorn.run(create_app(service), host=host, port=port, log_level="warning", access_log=False)
