"""A small OpenAI-compatible server (raw asyncio HTTP/1.1) that misbehaves on purpose.

Run as ``python -m tests.timing_client.fake_openai --port N [options]``. It counts one token per
prompt byte (+ ``--bos``), answers ``max_tokens`` tokens at ``--token-delay`` s each, and can
inject faults: ``--faults 429,drop,500,midstream`` is the sequence of answers the first attempts
of every distinct request get (429 carries ``Retry-After: --retry-after``; drop closes the
connection without an answer; midstream sends half a stream then closes), ``--reject-fields``
answers 400 naming the fields when a request carries any of them (as transformers serve does),
``--api-key`` demands that bearer token (401 otherwise). GET /stats reports what it saw.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time

STATS: dict[str, int] = collections.Counter()


class FakeServer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.faults = [f for f in args.faults.split(",") if f]
        self.reject = {f for f in args.reject_fields.split(",") if f}
        self.seen: dict[str, int] = collections.Counter()

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
        prompt_tokens = len(prompt.encode()) + self.args.bos + (3 if chat else 0)
        length = int(request.get("max_tokens") or 16)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": length,
            "total_tokens": prompt_tokens + length,
        }
        base = {"id": f"x-{STATS['requests']}", "model": "fake", "created": int(time.time())}
        if not request.get("stream"):
            await asyncio.sleep(self.args.token_delay * length)
            text = "x" * length
            choice = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            choice.update(index=0, finish_reason="length")
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
        for i in range(length):
            await asyncio.sleep(self.args.token_delay)
            piece = {"delta": {"content": "x"}} if chat else {"text": "x"}
            event({**base, "choices": [{"index": 0, **piece, "finish_reason": None}]})
            await writer.drain()
            if fault == "midstream" and i >= length // 2:
                return False
        final = {"delta": {}} if chat else {"text": ""}
        event(
            {**base, "choices": [{"index": 0, **final, "finish_reason": "length"}], "usage": usage}
        )
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
    args = parser.parse_args()
    server = await asyncio.start_server(FakeServer(args).handle, "127.0.0.1", args.port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
