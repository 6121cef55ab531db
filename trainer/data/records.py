"""Call records -> (prompt ids, completion ids, supervision mask) in the target's own tokens.

A row's token ids are used as stored when the proxy recorded them. Otherwise the request is rendered with
the target's chat template (Anthropic and Responses requests through the proxy's own translators to Chat,
exactly as a translating proxy sends them upstream) and the response is rendered as the assistant turn
that follows; the row is kept only when both lengths equal the usage the target reported. Every row that
is not kept gets a reason, and the reasons are counted.

Only tokens the target generated are supervised; an empty thinking block at the start of a completion
(``<think>\\n\\n</think>\\n\\n``, scaffolding a template inserts or a model emits with thinking off) is not.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lm.model import Target
from records.agents import OTHER_AGENT
from records.io import read_batches
from records.schema import COLUMNS as RECORD_COLUMNS
from records.sequences import untrainable
from records.split import TEST, TRAIN
from trainer.errors import TrainerError
from wire import Api
from wire.chat_view import ChatViewError, chat_body, template_kwargs

# Columns read from the call records (the proxy's Parquet, or the factory's exported dataset).
COLUMNS = (
    *(c for c in RECORD_COLUMNS if c not in ("stream_raw_zstd", "user_agent", "dropped_fields")),
    "repo",
    "lang",
    "ids_redacted",  # the exported dataset's: a secret inside the ids was replaced by its placeholder's ids
)
STOPPED = {"stop", "end_turn", "tool_use", "tool_calls", "stop_sequence", "completed", "eos", "pause_turn"}
TRUNCATED = {"length", "max_tokens", "max_output_tokens", "incomplete", "model_context_window_exceeded"}
_HANGUL = re.compile("[\uac00-\ud7a3]")
_EMPTY_THINK = re.compile(r"\s*<think>\s*</think>\s*")


@dataclass
class CallExample:
    call_id: str
    session_id: str | None
    started_at: float
    prompt_ids: list[int]
    completion_ids: list[int]
    supervise: list[int]  # one per completion token: 1 = trained on
    source: str  # "stored" | "rendered"
    agent: str = OTHER_AGENT
    api: str = ""
    repo: str | None = None
    lang: str = "en"
    split_hint: str | None = None  # the dataset's own split, when the records come from an export
    regenerated_from: str | None = None  # a re-sample of this recorded call (trainer/regenerate.py)


@dataclass
class Report:
    rows: int = 0
    kept: int = 0
    kept_by_source: Counter[str] = field(default_factory=Counter)
    excluded: Counter[str] = field(default_factory=Counter)
    models: Counter[str] = field(default_factory=Counter)

    def exclude(self, reason: str) -> None:
        self.excluded[reason] += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "kept": self.kept,
            "kept_by_source": dict(self.kept_by_source),
            "excluded": dict(sorted(self.excluded.items())),
            "models": dict(self.models),
        }


class Excluded(TrainerError):
    """A row that does not become training data, and why (a short, countable reason)."""


def split_hint(path: Path) -> str | None:
    """The Hugging Face split a file belongs to (``test-00000-of-00001.parquet`` -> 'test'), if named so."""
    head = path.name.split("-", 1)[0]
    return {"train": TRAIN, "test": TEST, "validation": TEST, "eval": TEST}.get(head)


def read_rows(path: str | Path) -> Iterator[dict[str, Any]]:
    """Rows of the call records as dicts (only the columns the trainer uses; missing ones are None)."""
    for f, table in read_batches(path, COLUMNS, batch_size=256):
        hint = split_hint(f)
        for row in table.to_pylist():
            row["split_hint"] = hint
            yield row


def _json(text: Any) -> Any:
    if text is None:
        return None
    if isinstance(text, dict | list):
        return text
    try:
        return json.loads(text)
    except (TypeError, ValueError) as e:
        raise Excluded("bad_json") from e


def _ts(value: Any) -> float:
    if value is None:
        return 0.0
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    return float(value)


def detect_language(row: Mapping[str, Any]) -> str:
    if row.get("lang"):
        return str(row["lang"])
    raw = str(row.get("request_json") or "")
    if not _HANGUL.search(raw) and "\\u" in raw:  # JSON may escape non-ASCII
        with contextlib.suppress(ValueError):
            raw = json.dumps(json.loads(raw), ensure_ascii=False)
    return "ko" if _HANGUL.search(raw) else "en"


def empty_think_prefix(target: Target, completion: list[int]) -> int:
    """How many leading completion tokens form an empty thinking block (0 when there is none)."""
    if target.tokenizer is None:
        return 0
    best = 0
    for j in range(1, min(len(completion), 12) + 1):
        text = target.decode(completion[:j], skip_special_tokens=False)
        if not "<think>".startswith(text.lstrip()[:7]):
            break  # does not open with <think>
        if _EMPTY_THINK.fullmatch(text):
            best = j
    return best


def _render_example(target: Target, row: Mapping[str, Any]) -> tuple[list[int], list[int]]:
    api = row.get("api")
    response = _json(row.get("response_json"))
    if not isinstance(response, dict):
        raise Excluded("no_response")
    if api == Api.COMPLETIONS:  # a bare prompt: no template to render
        req = _json(row.get("request_json")) or {}
        prompt_text = req.get("prompt")
        if not isinstance(prompt_text, str):
            raise Excluded("unsupported_prompt")
        text = ((response.get("choices") or [{}])[0]).get("text") or ""
        prompt = target.encode(prompt_text)
        completion = target.encode(text, add_special_tokens=False)
        if _finish(row, response) == "stop" and target.stop_token_ids:
            completion.append(target.stop_token_ids[0])
        return prompt, completion
    try:
        before, after = chat_body(row), chat_body(row, response)
    except ChatViewError as e:
        raise Excluded(str(e)) from e
    tools = before.get("tools") or None
    try:
        prompt = target.render(
            before.get("messages", []), tools, chat_template_kwargs=template_kwargs(before)
        )
        full = target.render(
            after.get("messages", []),
            tools,
            add_generation_prompt=False,
            chat_template_kwargs=template_kwargs(after),
        )
    except Exception as e:  # a template that raises on this conversation
        raise Excluded(f"render_failed:{type(e).__name__}") from e
    if full[: len(prompt)] != prompt:
        raise Excluded("render_not_prefix")
    completion = full[len(prompt) :]
    stops = [i for i, t in enumerate(completion) if t in set(target.stop_token_ids)]
    if stops:  # drop the template's text after the end-of-turn token; keep the token if the model emitted it
        end = stops[-1]
        completion = completion[: end + 1] if _finish(row, response) == "stop" else completion[:end]
    return prompt, completion


def _finish(row: Mapping[str, Any], response: Mapping[str, Any]) -> str:
    reason = row.get("finish_reason")
    if reason is None:
        choices = response.get("choices") or [{}]
        reason = choices[0].get("finish_reason") or response.get("stop_reason") or response.get("status")
    reason = str(reason or "stop")
    return "length" if reason in TRUNCATED else "stop"


def to_example(target: Target, row: Mapping[str, Any]) -> CallExample:
    """One kept call, or ``Excluded`` with the reason."""
    p_ids, c_ids = row.get("prompt_token_ids"), row.get("completion_token_ids")
    why = untrainable(row)  # the rule the export's `sequences` share
    if why is not None and why != "no_ids":
        raise Excluded(why)
    if why is None:
        prompt, completion, source = list(p_ids), list(c_ids), "stored"  # type: ignore[arg-type]
        vocab = target.vocab_size
        if any(not 0 <= t < vocab for t in prompt) or any(not 0 <= t < vocab for t in completion):
            raise Excluded("ids_out_of_vocab")
    else:
        prompt, completion = _render_example(target, row)
        source = "rendered"
        if row.get("prompt_tokens") is None or row.get("completion_tokens") is None:
            raise Excluded("no_usage")
        if len(prompt) != int(row["prompt_tokens"]):
            raise Excluded("prompt_tokens_mismatch")
        if len(completion) != int(row["completion_tokens"]):
            raise Excluded("completion_tokens_mismatch")
        if p_ids is not None and list(p_ids) != prompt:
            raise Excluded("rendered_prompt_differs_from_stored")
    if not prompt:
        raise Excluded("empty_prompt")
    if not completion:
        raise Excluded("empty_completion")
    supervise = [1] * len(completion)
    for i in range(empty_think_prefix(target, completion)):
        supervise[i] = 0
    if sum(supervise) < 2:
        raise Excluded("nothing_to_supervise")
    return CallExample(
        call_id=str(row.get("call_id")),
        session_id=row.get("session_id"),
        started_at=_ts(row.get("started_at")),
        prompt_ids=prompt,
        completion_ids=completion,
        supervise=supervise,
        source=source,
        agent=str(row.get("agent") or OTHER_AGENT),
        api=str(row.get("api") or ""),
        repo=row.get("repo"),
        lang=detect_language(row),
        split_hint=row.get("split_hint"),
        regenerated_from=row.get("regenerated_from"),
    )


def load_examples(
    target: Target, rows: Iterable[Mapping[str, Any]], model: str | None = None
) -> tuple[list[CallExample], Report]:
    report = Report()
    out: list[CallExample] = []
    for row in rows:
        report.rows += 1
        report.models[str(row.get("model"))] += 1
        if model is not None and row.get("model") != model:
            report.exclude("other_model")
            continue
        try:
            ex = to_example(target, row)
        except Excluded as e:
            report.exclude(str(e))
            continue
        out.append(ex)
        report.kept += 1
        report.kept_by_source[ex.source] += 1
    return out, report
