"""What every column of the published dataset means: the card's schema tables are made from this, and a
test checks that it names exactly the columns of each config (records/dataset.py)."""

from __future__ import annotations

_SESSION_FACTS = {
    "repo": "the task's GitHub repository (`owner/name`)",
    "repo_language": "the repository's main programming language",
    "repo_license": "the repository's SPDX license",
    "issue_number": "the issue the agent was given",
    "issue_url": "its URL",
    "base_commit": "the commit the sandbox checked out",
    "lang": "`en` or `ko`: the language of the task the agent was given",
}
_TRAJECTORY = "`trajectory_id` of the trajectory this row belongs to"

CALLS = {
    "call_id": "the proxy's id of the call",
    "session_id": "the agent session (stable hash of `repo#issue:lang:agent`); join with `sessions`",
    **_SESSION_FACTS,
    "session_outcome": "the session's `succeeded`, `agent_failed` or `infra_failed`",
    "agent": "`claude-code`, `codex` or `opencode`: the agent the session ran",
    "turn_index": "0-based position of the call in its session",
    "client_agent": "the agent as the proxy identified it from the request headers",
    "user_agent_product": "the first product token of the User-Agent header, e.g. `claude-cli` (the agent is `agent`)",
    "agent_version": "the User-Agent product's version, e.g. `2.1.332`",
    "target_model": "the model that answered",
    "first_byte_latency_ms": "from the request reaching the proxy to the target's response headers",
    "ids_exact": "true: the ids are the target's own, returned with its reply; false: rendered afterwards "
    "(`/tokenize`); null: no ids",
    "ids_redacted": "true: a secret inside the ids was re-tokenized as its placeholder",
    "agent_session_id": "the agent's own session id, from its headers",
    "api": "`anthropic_messages`, `openai_responses`, `openai_chat`, … (the wire format of the call)",
    "model": "`model` of the request",
    "stream": "the response was a server-sent-event stream",
    "status_code": "HTTP status the agent received",
    "outcome": "`ok`, `rejected`, `upstream_error`, `timeout` or `client_disconnected`",
    "error": "why, when `outcome` is not `ok`",
    "finish_reason": "the target's stop reason",
    "response_json": "the response in the API's non-streaming shape (streams assembled), scrubbed",
    "prompt_tokens": "prompt tokens the target reported",
    "completion_tokens": "completion tokens the target reported",
    "trajectory_id": f"{_TRAJECTORY}; null for a call with neither prompt ids nor a message list",
    "prompt_len": "the call's prompt ids are the trajectory's `token_ids[:prompt_len]`; null: no prompt ids",
    "completion_token_ids": "the ids the target generated (exact where `ids_exact`)",
    "completion_in_trajectory": "the completion ids follow the prompt in the trajectory's `token_ids` "
    "(`token_ids[prompt_len:prompt_len + len(completion_token_ids)]`); false where the agent re-rendered "
    "the reply in its next request",
    "token_ids_source": "`upstream` (returned with the reply) or `tokenize`",
    "request_params": "the request body (JSON) without its message list; the whole body when "
    "`messages_field` is null",
    "messages_field": "the request field that held the message list (`messages`, or `input` for the "
    "Responses API); null: the request had none",
    "messages_prefix": "the call's messages begin with the trajectory's `messages[:messages_prefix]`",
    "messages_tail": "… and continue with these (one JSON text per message)",
    "chat_prefix": "the chat view: the conversation as the target saw it, in OpenAI Chat form, is the "
    "trajectory's `chat_messages[:chat_prefix]` …",
    "chat_tail": "… followed by these messages (`role`, `content`, `reasoning_content`, `tool_calls` with "
    "`id` and `function.name` / `function.arguments`, `tool_call_id`, `name`); null: no chat view",
    "chat_reply": "the target's reply as the assistant message that follows (null: not made)",
    "tools": "the function tools the target was offered (`function.parameters` is JSON text); null: the "
    "trajectory's `tools`",
    "chat_template_kwargs": "the request's `chat_template_kwargs` (JSON), which the template was rendered with",
    "started_at": "the request reached the proxy (UTC)",
    "first_byte_at": "the target's response headers arrived (UTC)",
    "finished_at": "the last byte was relayed (UTC)",
}

TRAJECTORIES = {
    "trajectory_id": "`<session_id>-t<k>`: a chain of calls of one session, each prompt extending the last",
    "session_id": "the session",
    "repo": "the task's repository",
    "lang": "the task's language",
    "agent": "the agent",
    "api": "the wire format of its calls",
    "n_calls": "calls in the trajectory",
    "call_ids": "their `call_id`s, in order",
    "token_ids": "the last call's prompt ids followed by its completion ids: every call's prompt is a "
    "prefix (`calls.prompt_len`)",
    "messages": "the last call's message list, one JSON text per message",
    "chat_messages": "the chat view of the last call followed by its reply: the conversation in OpenAI Chat "
    "form, typed (see `calls.chat_tail`), ready for SFT",
    "tools": "the function tools of the last call, typed (`function.parameters` is JSON text)",
}

SEQUENCES = {
    "sequence_id": "`<session_id>-s<k>`: a chain of the session's calls, each prompt extending the previous "
    "call's prompt + completion; a re-sample's own `call_id`",
    "input_ids": "token ids: the chain's last prompt + completion",
    "loss_mask": "1 on the ids the target generated (the completions), 0 on context",
    "span_starts": "where each supervised completion starts in `input_ids`",
    "span_ends": "where it ends (exclusive)",
    "call_ids": "the calls whose completions are the spans, in order",
    "session_id": "the session",
    "repo": "the task's repository",
    "agent": "the agent",
    "lang": "the task's language",
    "split": "`train` or `test` (whole repositories, or whole sessions: see the card)",
    "source": "`recorded` (the agents' calls) or `regenerated` (a recorded prompt's completion drawn again "
    "from the target by `python -m trainer regenerate`; `train` side only)",
    "regenerated_from": "for a `regenerated` row, the `call_id` whose prompt it re-sampled",
}

SESSIONS = {
    "session_id": "stable hash of `repo#issue:lang:agent`",
    **_SESSION_FACTS,
    "agent": "the agent",
    "agent_version": "its version, from the User-Agent of its calls",
    "target_model": "the model that answered",
    "task": "the exact text the agent received",
    "outcome": "`succeeded`, `agent_failed` (exit non-zero, timeout, out of memory) or `infra_failed`",
    "exit_status": "the agent's exit status",
    "error": "why the session failed",
    "agent_session_id": "the agent's own session id",
    "attempts": "how many times the session was started",
    "duration_s": "wall time of the final attempt",
    "started_at": "UTC",
    "finished_at": "UTC",
    "patch": "the agent's `git diff` against the base commit (scrubbed)",
    "n_calls": "its calls in `calls`",
    "n_calls_exact_ids": "… of which with the target's exact ids",
    "prompt_tokens": "the sum over its calls",
    "completion_tokens": "the sum over its calls",
    "test_command": "the repository's test command (null: none ran)",
    **{
        f"{when}_{k}": f"{k.replace('_', ' ')} of the tests {label}"
        for when, label in (("baseline", "before the agent"), ("after", "after its patch"))
        for k in ("passed", "failed", "errors", "timed_out", "exit_code", "tail")
    },
    "resolved": "a test that failed before passes after, and none that passed fails (null: unknown)",
    "setup_status": "the environment image's setup: `built`, `cached`, `failed` or `none`",
    "fix_kind": "how the issue was fixed upstream: `pull_request` or `commit` (null: not known)",
    "fix_url": "its URL",
    "fix_pull_request": "the pull request's number",
    "fix_merge_commit": "its merge commit",
    "fix_files": "the files it changed",
}

COLUMN_DOCS = {"calls": CALLS, "trajectories": TRAJECTORIES, "sequences": SEQUENCES, "sessions": SESSIONS}
