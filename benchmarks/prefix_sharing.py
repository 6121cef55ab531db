"""Target tokens computed per supervised token: once per call, merged chains, longest-common-prefix sharing.

Sessions: the real requests captured from each agent CLI in ``tests/fixtures/agents/`` (title/side call,
first call, the call carrying the tool result), and per agent a generated 30-turn session continuing
the captured one (a reasoning assistant turn with a shell tool call, then a ~1.5k-character tool result,
30 times). Every request is rendered with the target's chat template (tiny-qwen3: Qwen3's template,
which drops earlier turns' reasoning, so a later prompt is not a token-for-token extension of the
previous call); each call's completion is its assistant turn as the template renders it.

    python benchmarks/prefix_sharing.py [--target tiny-qwen3] [--turns 30]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from lm import load_target
from lm.model import Target
from trainer.data.build import build_from_examples
from trainer.data.records import CallExample, Report
from trainer.data.units import session_units, sharing_report
from wire import anthropic_to_chat_request, responses_to_chat_request

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "agents"
SHELL_TOOLS = ("Bash", "exec_command", "bash", "shell")


def to_chat(request: dict[str, Any]) -> dict[str, Any]:
    body, path = request["body"], request["path"]
    if path.startswith("/v1/messages"):
        return dict(anthropic_to_chat_request(body).request)
    if path.startswith("/v1/responses"):
        return dict(responses_to_chat_request(body).request)
    return dict(body)


def render_call(target: Target, chat: dict[str, Any], reply: dict[str, Any]) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids): the completion is the reply turn as the template renders it."""
    messages, tools = chat["messages"], chat.get("tools")
    prompt = target.render(messages, tools)
    full = target.render([*messages, reply], tools, add_generation_prompt=False)
    if full[: len(prompt)] == prompt:
        return prompt, full[len(prompt) :]
    return prompt, target.encode(str(reply.get("content") or ""), add_special_tokens=False)


def captured_session(agent_dir: Path) -> list[dict[str, Any]]:
    order = ("side_request.json", "first_request.json", "tool_result_request.json")
    return [to_chat(json.loads((agent_dir / n).read_text())) for n in order if (agent_dir / n).exists()]


def shell_tool(chat: dict[str, Any]) -> str:
    names = [t.get("function", {}).get("name") for t in chat.get("tools") or []]
    return next((n for n in names if n in SHELL_TOOLS), names[0] if names else "bash")


def extended(chat: dict[str, Any], turns: int, rng: random.Random) -> list[dict[str, Any]]:
    """``turns`` calls continuing ``chat``: each adds a reasoning tool-call turn and its tool result."""
    calls, messages, tool = [], list(chat["messages"]), shell_tool(chat)
    for t in range(turns):
        calls.append({**chat, "messages": list(messages)})
        call_id = f"call_{t}"
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": f"I should look at module {t} next to find where the bug is.",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": tool,
                            "arguments": json.dumps({"command": f"cat src/mod{t}.py"}),
                        },
                    }
                ],
            }
        )
        lines = [
            f"def f{t}_{i}(x):\n    return x * {rng.randint(2, 99)} + {rng.randint(0, 9)}" for i in range(30)
        ]
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "\n".join(lines)})
    return calls


def reply_of(calls: list[dict[str, Any]], i: int) -> dict[str, Any]:
    """The assistant turn that followed call i (what the next call carries), else a final answer."""
    cur = calls[i]["messages"]
    for nxt in calls[i + 1 :]:
        msgs = nxt["messages"]
        if len(msgs) > len(cur) and msgs[len(cur)].get("role") == "assistant":
            return dict(msgs[len(cur)])
    return {"role": "assistant", "content": "done", "reasoning_content": "The file exists now."}


def measure(target: Target, sessions: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out = {}
    for name, calls in sessions.items():
        examples = []
        for i, chat in enumerate(calls):
            prompt, completion = render_call(target, chat, reply_of(calls, i))
            examples.append(
                CallExample(
                    f"{name}-{i}", name, float(i), prompt, completion, [1] * len(completion), "rendered"
                )
            )
        built = build_from_examples(examples, Report(), max_len=10**9, eval_fraction=0.0)
        seqs = built.train + built.eval
        rep = sharing_report(seqs, session_units(seqs), built.report["merge"]["target_tokens_per_call"])
        rep["calls"], rep["merged_sequences"] = len(calls), len(seqs)
        out[name] = rep
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="tiny-qwen3")
    ap.add_argument("--turns", type=int, default=30)
    a = ap.parse_args()
    target = load_target(a.target)
    rng = random.Random(0)
    sessions: dict[str, list[dict[str, Any]]] = {}
    for agent_dir in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        calls = captured_session(agent_dir)
        sessions[f"{agent_dir.name} (captured, {len(calls)} calls)"] = calls
        sessions[f"{agent_dir.name} ({a.turns}-turn generated)"] = extended(calls[-1], a.turns, rng)
    results = measure(target, sessions)
    print(f"target {a.target}; target tokens computed per supervised token")
    print(f"{'session':<48} {'calls':>5} {'per call':>9} {'merged':>8} {'shared':>8} {'reduction':>9}")
    for name, r in results.items():
        p = r["per_supervised_token"]
        print(
            f"{name:<48} {r['calls']:>5} {p['per_call']:>9} {p['merged']:>8} {p['shared']:>8} "
            f"{r['reduction_vs_per_call']:>8}x"
        )


if __name__ == "__main__":
    main()
