"""The card's "How to load it" and "Schema" sections: loading snippets for `datasets`, pandas and DuckDB
(tests/factory/test_dataset_plain.py runs every one of them against a fresh export), and one table per
config made from records.dataset_columns."""

from __future__ import annotations

import pyarrow as pa

from records.dataset_columns import COLUMN_DOCS

CONFIGS = ("calls", "trajectories", "sequences", "sessions")

_DATASETS = """```python
from datasets import load_dataset

repo = "{repo_id}"
calls = load_dataset(repo, "calls", split="train")
traj = {{t["trajectory_id"]: t for t in load_dataset(repo, "trajectories", split="train")}}
prompts = {{c["call_id"]: traj[c["trajectory_id"]]["token_ids"][: c["prompt_len"]]
           for c in calls if c["prompt_len"] is not None}}
sequences = load_dataset(repo, "sequences")  # train / test: input_ids, loss_mask, span_starts, …
```"""

_SFT = """```python
import json
from datasets import load_dataset
from transformers import AutoTokenizer

tok = AutoTokenizer.from_pretrained("{target}")  # the target's tokenizer and chat template
traj = load_dataset("{repo_id}", "trajectories", split="train")


def template_message(m):  # typed fields back to what a chat template takes: unset fields out, arguments parsed
    m = {{k: v for k, v in m.items() if v is not None}}
    for call in m.get("tool_calls") or []:
        call["function"]["arguments"] = json.loads(call["function"]["arguments"] or "{{}}")
    return m


def template_tool(t):
    fn = {{k: v for k, v in t["function"].items() if v is not None}}
    return {{"type": t["type"], "function": {{**fn, "parameters": json.loads(fn.get("parameters") or "{{}}")}}}}


row = traj[0]  # the whole conversation, the target's last reply included: one SFT example
text = tok.apply_chat_template([template_message(m) for m in row["chat_messages"]],
                               tools=[template_tool(t) for t in row["tools"] or []] or None, tokenize=False)
```"""

_PANDAS = """```python
import json
import pandas as pd

root = "hf://datasets/{repo_id}/data"  # or a local copy's data/ folder
traj = pd.read_parquet(f"{{root}}/trajectories", columns=["trajectory_id", "token_ids", "messages"])
calls = pd.read_parquet(f"{{root}}/calls").merge(traj, on="trajectory_id", how="left")
calls["prompt_ids"] = [t[: int(n)] if n == n else None for t, n in zip(calls.token_ids, calls.prompt_len)]
calls["messages"] = [[json.loads(m) for m in [*t[: int(p)], *tail]] if p == p else None  # NaN: no list
                     for t, p, tail in zip(calls.messages, calls.messages_prefix, calls.messages_tail)]
```"""

_DUCKDB = '''```python
import duckdb

root = "hf://datasets/{repo_id}/data"  # or a local copy's data/ folder
calls = duckdb.sql(f"""
    SELECT c.call_id, t.token_ids[1:c.prompt_len] AS prompt_ids, c.completion_token_ids,
           list_concat(t.messages[1:c.messages_prefix], c.messages_tail) AS messages
    FROM '{{root}}/calls/*.parquet' c LEFT JOIN '{{root}}/trajectories/*.parquet' t USING (trajectory_id)
""").df()
```'''


def loading(repo_id: str, target: str = "<the target model>") -> str:
    return f"""## How to load it

Four configs (YAML above), each with `train` and `test` splits:

- **calls**: one row per model call. Its prompt ids and request messages are not repeated on every row
  (an agent resends its whole history each call): they are slices of its **trajectory**, one row per chain
  of calls whose prompts extend each other, holding the last call's prompt + completion ids and messages.
  A call's prompt ids are `token_ids[:prompt_len]`; its messages `messages[:messages_prefix] + messages_tail`
  (JSON texts); the request body is `request_params` with that list under `messages_field`.
- **sequences**: training-ready: `input_ids`, `loss_mask` (1 on the target's own completions), the spans
  and call ids, session, agent, language, split and `source` (`recorded`, or `regenerated`: a recorded
  prompt's completion drawn again): the shape speculators and SpecForge take, and what dflash-factory's
  trainer reads.
- **sessions**: one row per agent session: task, outcome, patch, tests before and after, totals.

With `datasets`:

{_DATASETS.format(repo_id=repo_id)}

For SFT, the chat view (`chat_messages`, `tools`: the conversation as the target saw it, in OpenAI Chat
form) rendered with the target's chat template:

{_SFT.format(repo_id=repo_id, target=target)}

With pandas, every call's prompt ids and messages in one join and two slices:

{_PANDAS.format(repo_id=repo_id)}

With DuckDB (lists are 1-based, `[1:n]` is the first n):

{_DUCKDB.format(repo_id=repo_id)}
"""


def schema_tables(schemas: dict[str, pa.Schema]) -> str:
    out = ["## Schema\n"]
    for config in CONFIGS:
        out += [f"### `{config}`\n", "| column | type | meaning |", "|---|---|---|"]
        docs = COLUMN_DOCS[config]
        out += [f"| `{f.name}` | {_type(f.type)} | {docs[f.name]} |" for f in schemas[config]]
        out.append("")
    return "\n".join(out)


def _type(t: pa.DataType) -> str:
    return (
        str(t)
        .replace("large_string", "string")
        .replace("<item: ", "<")
        .replace("timestamp[us, tz=UTC]", "timestamp (UTC)")
    )
