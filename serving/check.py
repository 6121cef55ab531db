"""What a target must accept before agents are pointed at it, probed up front (`python -m serving check URL`,
and by `make harvest` before any session starts).

Each agent sends `tool_choice: "auto"` with its tools, and asks for up to 32,000 completion tokens over a
prompt of thousands. A vLLM started plainly refuses the first (400) and a chat template without a tools
section silently drops the tool definitions; both would cost every call of a harvest. One line per problem,
naming the flag that mends it (docs/factory.md lists them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

# Claude Code's first prompt, its tools rendered, is ≈ 12.5k SmolLM2 tokens (9k Codex, 8k OpenCode).
MIN_CONTEXT = 16384
_TOOL = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Answer pong.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
}
_MESSAGES = [{"role": "user", "content": "Say ok."}]


@dataclass
class TargetCheck:
    url: str
    model: str | None = None
    max_model_len: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _error(reply: httpx.Response) -> str:
    try:
        err = reply.json().get("error")
        return str(err.get("message") if isinstance(err, dict) else err)
    except (ValueError, AttributeError):
        return reply.text[:300]


def check_target(url: str, client: httpx.Client | None = None) -> TargetCheck:
    """Probe `url` (an OpenAI-compatible base URL) the way the agents will use it."""
    url = url.rstrip("/")
    own = client is None
    http = client or httpx.Client(timeout=120)
    result = TargetCheck(url)
    try:
        card = http.get(f"{url}/v1/models").raise_for_status().json()["data"][0]
        result.model, limit = str(card["id"]), card.get("max_model_len")
        result.max_model_len = int(limit) if limit else None
        _check_tool_choice(http, result)
        _check_template(http, result)
        if result.max_model_len is not None and result.max_model_len < MIN_CONTEXT:
            result.problems.append(
                f"it serves {result.max_model_len:,} tokens of context; an agent's first prompt with its tools "
                f"is ≈ 12,500 tokens: start vLLM with --max-model-len {MIN_CONTEXT * 2} or more"
            )
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
        result.problems.append(f"{url}/v1/models does not list a model ({type(e).__name__}: {e})")
    finally:
        if own:
            http.close()
    return result


def _check_tool_choice(http: httpx.Client, result: TargetCheck) -> None:
    body = {
        "model": result.model,
        "messages": _MESSAGES,
        "tools": [_TOOL],
        "tool_choice": "auto",
        "max_tokens": 1,
        "temperature": 0,
    }
    reply = http.post(f"{result.url}/v1/chat/completions", json=body)
    if reply.status_code >= 400:
        result.problems.append(
            f"it refuses the agents' tool_choice=auto ({reply.status_code}: {_error(reply)[:200]}): start vLLM "
            "with --enable-auto-tool-choice --tool-call-parser PARSER (hermes for the project's SmolLM2)"
        )


def _check_template(http: httpx.Client, result: TargetCheck) -> None:
    """vLLM's /tokenize renders the chat template: with tools the prompt must grow."""
    counts = []
    for tools in ([_TOOL], None):
        body = {"model": result.model, "messages": _MESSAGES, "add_generation_prompt": True}
        reply = http.post(f"{result.url}/tokenize", json={**body, **({"tools": tools} if tools else {})})
        if reply.status_code >= 400:
            return  # no /tokenize (not vLLM): the template cannot be checked from here
        counts.append(int(reply.json().get("count") or len(reply.json().get("tokens") or [])))
    if counts[0] <= counts[1]:
        result.problems.append(
            "its chat template ignores tools (the agents' tool definitions would never reach the model): "
            "start vLLM with --chat-template FILE that renders them (the project's SmolLM2 one: "
            "lm/templates/smollm2_tools.jinja)"
        )
