"""A small OpenAI-compatible server (raw asyncio HTTP/1.1) that misbehaves on purpose.

Run as ``python -m tests.timing_client.fake_openai --port N [options]``. It counts one token per
prompt byte (+ ``--bos``), answers ``max_tokens`` tokens at ``--token-delay`` s each, and can
inject faults: ``--faults 429,drop,500,midstream`` is the sequence of answers the first attempts
of every distinct request get (429 carries ``Retry-After: --retry-after``; drop closes the
connection without an answer; midstream sends half a stream then closes), ``--reject-fields``
answers 400 naming the fields when a request carries any of them (as transformers serve does),
``--api-key`` demands that bearer token (401 otherwise). GET /stats reports what it saw.

A reasoning model and a prefix cache, counted by the server itself: ``--reasoning N`` streams N
reasoning tokens (deltas in ``--reasoning-field``, ``reasoning_content`` by default) before the
answer, within ``max_tokens``, and reports them in ``usage.completion_tokens_details``;
``--answer-tokens K`` stops the answer after K tokens (finish_reason "stop"), as a model that
decides its own length. ``--prefix-cache`` keeps every request's tokens (prompt and generated)
and reports the longest prefix a new prompt shares with one of them in
``usage.prompt_tokens_details.cached_tokens``. Chat prompts are tokenized as a chat template
would: each message is a role token, its content (a token a byte) and an end token, and the
prompt ends with the assistant's role token, after which the answer is generated (a single
message: its bytes + 3). ``--request-log FILE`` appends the server's own counts per request.

Latency for monitoring tests: ``--first-token-delay S`` waits S before the first token, and
``--jitter SIGMA`` multiplies a request's delays by exp(N(0, SIGMA)) drawn from a generator
seeded with ``--seed``; ``POST /control`` with ``{"latency_factor": F}`` multiplies every later
request's delays by F (a provider that slows down at a known time); ``--shift-after N
--shift-factor F`` does the same from the (N+1)th streamed request on, so that a monitor's
rounds of a fixed number of streamed probes see the shift begin at a known round.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import random
import time

STATS: dict[str, int] = collections.Counter()


class FakeServer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.faults = [f for f in args.faults.split(",") if f]
        self.reject = {f for f in args.reject_fields.split(",") if f}
        self.seen: dict[str, int] = collections.Counter()
        self.cache: list[bytes] = []  # every request's tokens, for --prefix-cache
        self.log = open(args.request_log, "a", buffering=1) if args.request_log else None  # noqa: SIM115
        self.noise = random.Random(args.seed)
        self.latency_factor = 1.0
        self.streamed = 0  # streamed requests answered, for --shift-after

    def delays(self) -> tuple[float, float]:
        """This request's wait before its first token and between tokens."""
        scale = self.latency_factor
        if self.args.jitter:
            scale *= math.exp(self.noise.gauss(0.0, self.args.jitter))
        return self.args.first_token_delay * scale, self.args.token_delay * scale

    def prompt_tokens(self, request: dict, chat: bool) -> bytes:
        """The prompt as tokens (one byte each): a chat template's, or BOS + the bytes."""
        if not chat:
            return b"\x01" * self.args.bos + request["prompt"].encode()
        tokens = b"".join(
            message["role"][:1].encode() + str(message["content"]).encode() + b"\x03"
            for message in request["messages"]
        )
        return b"\x01" * self.args.bos + tokens + b"a"

    def cached_tokens(self, tokens: bytes) -> int:
        """The longest prefix of ``tokens`` that an earlier request's tokens start with."""
        best = 0
        for earlier in self.cache:
            shared = 0
            for mine, theirs in zip(tokens, earlier, strict=False):
                if mine != theirs:
                    break
                shared += 1
            best = max(best, shared)
        return best

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if not await self.respond(method, path, headers, body, writer):
                    writer.transport.abort()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @staticmethod
    def send(writer: asyncio.StreamWriter, status: int, payload: object, extra: str = "") -> None:
        data = json.dumps(payload).encode()
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}
        head = (
            f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(data)}\r\n{extra}\r\n"
        )
        writer.write(head.encode() + data)

    async def respond(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        raw: bytes,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Answer one request; False to drop the connection."""
        if method == "GET":
            if path == "/health":
                self.send(writer, 200, {"status": "ok"})
            elif path == "/stats":
                self.send(writer, 200, dict(STATS))
            else:
                self.send(writer, 404, {"error": {"message": "not found"}})
            return True
        if path == "/control":
            self.latency_factor = float(json.loads(raw)["latency_factor"])
            self.send(writer, 200, {"latency_factor": self.latency_factor})
            return True
        STATS["requests"] += 1
        if self.args.api_key and headers.get("authorization") != f"Bearer {self.args.api_key}":
            STATS["unauthorized"] += 1
            self.send(writer, 401, {"error": {"message": "invalid API key"}})
            return True
        request = json.loads(raw)
        rejected = sorted(self.reject & set(request))
        if rejected:
            STATS["rejected_fields"] += 1
            message = f"Unexpected keys in the request: {', '.join(rejected)}"
            self.send(writer, 400, {"error": {"message": message}})
            return True
        chat = path.endswith("/chat/completions")
        prompt = request["messages"][-1]["content"] if chat else request["prompt"]
        key = f"{prompt}|{request.get('max_tokens')}"
        attempt = self.seen[key]
        self.seen[key] += 1
        fault = self.faults[attempt] if attempt < len(self.faults) else None
        if fault:
            STATS[f"fault_{fault}"] += 1
        if fault == "429":
            retry = f"retry-after: {self.args.retry_after}\r\n"
            self.send(writer, 429, {"error": {"message": "rate limited"}}, retry)
            return True
        if fault == "500":
            self.send(writer, 500, {"error": {"message": "internal error"}})
            return True
        if fault == "drop":
            return False
        tokens = self.prompt_tokens(request, chat)
        prompt_tokens = len(tokens)
        length = int(request.get("max_tokens") or 16)
        reasoning = min(self.args.reasoning, length - 1)
        answer = length - reasoning
        if self.args.answer_tokens:
            answer = min(answer, self.args.answer_tokens)
        finish = "length" if reasoning + answer == length else "stop"
        usage: dict = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": reasoning + answer,
            "total_tokens": prompt_tokens + reasoning + answer,
        }
        cached = self.cached_tokens(tokens) if self.args.prefix_cache else None
        if cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        if self.args.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        self.cache.append(tokens + b"r" * reasoning + b"x" * answer)
        ident = f"x-{STATS['requests']}"
        if self.log is not None:
            record = {
                "id": ident, "prompt_tokens": prompt_tokens, "cached_tokens": cached,
                "reasoning_tokens": reasoning, "answer_tokens": answer,
                "completion_tokens": reasoning + answer, "stream": bool(request.get("stream")),
            }  # fmt: skip
            self.log.write(json.dumps(record) + "\n")
        base = {"id": ident, "model": "fake", "created": int(time.time())}
        field = self.args.reasoning_field
        if request.get("stream"):
            self.streamed += 1
            STATS["streamed"] += 1
            if self.args.shift_after and self.streamed == self.args.shift_after + 1:
                self.latency_factor *= self.args.shift_factor
        first_delay, token_delay = self.delays()
        if not request.get("stream"):
            await asyncio.sleep(first_delay + token_delay * (reasoning + answer))
            text = "x" * answer
            choice = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            if reasoning:
                (choice["message"] if chat else choice)[field] = "r" * reasoning
            choice.update(index=0, finish_reason=finish)
            self.send(writer, 200, {**base, "choices": [choice], "usage": usage})
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )

        def event(payload: object) -> None:
            data = f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"
            writer.write(f"{len(data.encode()):x}\r\n{data}\r\n".encode())

        if chat:
            event({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        # Each token at its own deadline: a late wake-up does not delay the tokens after it.
        clock = asyncio.get_running_loop().time
        due = clock() + first_delay
        for i in range(reasoning + answer):
            due += token_delay
            await asyncio.sleep(max(0.0, due - clock()))
            if i < reasoning:
                piece = {"delta": {field: "r"}} if chat else {"text": "", field: "r"}
            else:
                piece = {"delta": {"content": "x"}} if chat else {"text": "x"}
            event({**base, "choices": [{"index": 0, **piece, "finish_reason": None}]})
            await writer.drain()
            if fault == "midstream" and i >= length // 2:
                return False
        final = {"delta": {}} if chat else {"text": ""}
        event({**base, "choices": [{"index": 0, **final, "finish_reason": finish}], "usage": usage})
        event("[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-delay", type=float, default=0.001)
    parser.add_argument("--faults", default="")
    parser.add_argument("--retry-after", default="0.2")
    parser.add_argument("--reject-fields", default="")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--bos", type=int, default=0)
    parser.add_argument("--reasoning", type=int, default=0)
    parser.add_argument("--reasoning-field", default="reasoning_content")
    parser.add_argument("--answer-tokens", type=int, default=0)
    parser.add_argument("--prefix-cache", action="store_true")
    parser.add_argument("--request-log", default="")
    parser.add_argument("--first-token-delay", type=float, default=0.0)
    parser.add_argument("--jitter", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shift-after", type=int, default=0)
    parser.add_argument("--shift-factor", type=float, default=1.0)
    args = parser.parse_args()
    server = await asyncio.start_server(FakeServer(args).handle, "127.0.0.1", args.port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
