"""Benchmark: removing vLLM token ids from relayed chat SSE bytes, a scan of the bytes vs json loads/dumps.

Run: `.venv/bin/python -m tests.wire.bench_token_ids` (not collected by pytest). The numbers
in docs/translation.md come from this script.
"""

from __future__ import annotations

import json
import timeit
from collections.abc import Callable

from wire.token_ids import SSETokenIdStripper, strip_token_ids_bytes


def _line(obj: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


HEAD = {
    "id": "chatcmpl-9f1c2e0a",
    "object": "chat.completion.chunk",
    "created": 1764000000,
    "model": "Qwen/Qwen3-8B",
}
DELTA = _line(
    {
        **HEAD,
        "choices": [
            {
                "index": 0,
                "delta": {"content": " the"},
                "logprobs": None,
                "finish_reason": None,
                "token_ids": [279],
            }
        ],
    }
)
PLAIN = _line(
    {**HEAD, "choices": [{"index": 0, "delta": {"content": " the"}, "logprobs": None, "finish_reason": None}]}
)
FIRST = _line(
    {
        **HEAD,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
                "token_ids": [],
            }
        ],
        "prompt_token_ids": list(range(100_000, 112_000)),  # a 12k-token Claude Code prompt
    }
)


def json_strip(data: bytes) -> bytes:
    out = []
    for line in data.split(b"\n"):
        if line.startswith(b"data: {"):
            obj = json.loads(line[6:])
            obj.pop("prompt_token_ids", None)
            for choice in obj.get("choices") or []:
                choice.pop("token_ids", None)
            line = b"data: " + json.dumps(obj, separators=(",", ":")).encode()
        out.append(line)
    return b"\n".join(out)


def per_call_us(fn: Callable[[bytes], bytes], data: bytes, n: int) -> float:
    """Best of 5 runs of n calls (the least disturbed by other load on the machine)."""
    return min(timeit.repeat(lambda: fn(data), number=n, repeat=5)) / n * 1e6


def main() -> None:
    assert json.loads(strip_token_ids_bytes(DELTA)[6:]) == json.loads(json_strip(DELTA)[6:])
    stripper = SSETokenIdStripper()
    rows = [
        ("delta chunk (1 id)", DELTA, 20_000),
        ("delta chunk, no ids", PLAIN, 20_000),
        ("first chunk (12k prompt ids)", FIRST, 200),
    ]
    print(f"{'payload':32} {'bytes':>8} {'scan µs':>10} {'stripper µs':>12} {'json µs':>10} {'speedup':>8}")
    for name, data, n in rows:
        scan = per_call_us(strip_token_ids_bytes, data, n)
        streamed = per_call_us(stripper.feed, data, n)
        js = per_call_us(json_strip, data, n)
        print(f"{name:32} {len(data):8d} {scan:10.2f} {streamed:12.2f} {js:10.2f} {js / scan:7.1f}x")


if __name__ == "__main__":
    main()
