"""How faithful the chat view is: a sample of calls' published views rendered with the chat template the
target served (the tokenizer's, or the one it was started with: `chat_template`) and compared, id for id, with the
prompt ids the target recorded. The share that agrees, with a 95 % Wilson interval, goes to the card.

The view is rendered as a reader of the dataset would: read back typed, tool-call arguments and tool
parameters parsed from their JSON text, normalised as vLLM normalises a request (wire/chat_view.py), and
tokenized without added special tokens (vLLM's default for chat). Calls are sampled by a hash of their id,
so the same export samples the same calls."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from factory.publish.chat_rows import ChatView
from records.split import fraction
from wire.chat_view import template_messages, template_tools


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of k successes in n (a sample proportion near 0 or 1 stays inside [0, 1])."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, mid - half), min(1.0, mid + half)


@dataclass
class ChatCheck:
    tokenizer: Any
    template: str | None  # the template the target served, where it is not the tokenizer's
    rate: float  # the fraction of calls checked
    checked: Counter[str] = field(default_factory=Counter)  # per agent
    equal: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)  # the template raised, per exception type

    @classmethod
    def sampling(cls, tokenizer: Any, template: str | None, total_calls: int, sample: int) -> ChatCheck:
        return cls(tokenizer, template, min(1.0, sample / total_calls) if total_calls else 0.0)

    def __call__(self, row: dict[str, Any], prompt: Any, view: ChatView) -> None:
        if prompt is None or fraction(str(row["call_id"])) >= self.rate:
            return
        agent = str(row.get("agent"))
        self.checked[agent] += 1
        try:
            ids = render(self.tokenizer, view, self.template)
        except Exception as e:  # a template that raises on this conversation is a disagreement, counted
            self.failed[type(e).__name__] += 1
            return
        self.equal[agent] += ids == [int(t) for t in prompt]

    def summary(self) -> dict[str, Any]:
        n, k = sum(self.checked.values()), sum(self.equal.values())
        lo, hi = wilson(k, n)
        by_agent = {a: {"checked": c, "equal": self.equal[a]} for a, c in sorted(self.checked.items())}
        return {
            "checked": n,
            "equal": k,
            "share": round(k / n, 4) if n else None,
            "ci95": [round(lo, 4), round(hi, 4)],
            "template_failed": dict(self.failed),
            "by_agent": by_agent,
        }


def render(tokenizer: Any, view: ChatView, template: str | None = None) -> list[int]:
    kwargs = json.loads(view.kwargs) if view.kwargs else {}
    text = tokenizer.apply_chat_template(
        template_messages(view.messages),
        tools=template_tools(view.tools),
        add_generation_prompt=True,
        tokenize=False,
        chat_template=template,
        **kwargs,
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
