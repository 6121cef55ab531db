"""The conversation as the target saw it, in OpenAI Chat form: what the dataset's chat view publishes (typed),
what the trainer renders with the target's template, and the normalisation vLLM applies before a template.

- `chat_body`: the Chat Completions body the target rendered for a recorded call — what the proxy sent
  upstream when it translated, the request itself for Chat, else the API's own translator — with the reply
  appended as the last assistant turn when one is given.
- `typed_messages` / `typed_tools`: that body's messages and tools with a fixed set of fields, so a Parquet
  column of them is a list of structs: a message is `role`, `content` (text parts joined with newlines, as
  vLLM joins them for a template), `reasoning_content`, `tool_calls` (`id`, `type`, `function.name`,
  `function.arguments` as JSON text), `tool_call_id`, `name`; a tool is `type` and `function` (`name`,
  `description`, `parameters` as JSON text, since a JSON schema has no fixed fields, and `strict`).
- `template_messages` / `template_tools`: typed ones back into what a chat template takes (vLLM's
  normalisation: tool-call arguments parsed into objects, missing content as ""), so the view is rendered
  exactly as the recorded prompt was.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from wire.apis import Api
from wire.errors import WireError
from wire.shapes import shape_of

MESSAGE_FIELDS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")


class ChatViewError(WireError):
    """A recorded call whose Chat form cannot be made (a short reason, countable)."""


def _json(text: Any) -> Any:
    if text is None or isinstance(text, dict | list):
        return text
    try:
        return json.loads(text)
    except (TypeError, ValueError) as e:
        raise ChatViewError("bad_json") from e


def chat_body(row: Mapping[str, Any], reply: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`row`: a call record's `api`, `request_json`, `translated`, `upstream_request_json`; `reply`: its
    response as recorded, in the client's API shape (`records.schema`: `response_json`)."""
    api = row.get("api")
    if row.get("translated") and row.get("upstream_request_json"):
        chat = dict(_json(row["upstream_request_json"]))
        if reply is not None:
            chat["messages"] = [*chat.get("messages", []), reply_turn(row, reply)]
        return chat
    req = _json(row.get("request_json"))
    if not isinstance(req, dict):
        raise ChatViewError("bad_json")
    if api == Api.CHAT:  # the pivot: the body is what the target rendered
        chat = dict(req)
        if reply is not None:
            chat["messages"] = [*chat.get("messages", []), assistant_turn(reply)]
        return chat
    shape = shape_of(api)
    if shape is None or shape.to_chat is None or shape.with_reply is None:
        raise ChatViewError(f"unsupported_api:{api}")
    body = shape.with_reply(req, reply) if reply is not None else dict(req)
    return dict(shape.to_chat(body).request)


def reply_turn(row: Mapping[str, Any], reply: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded reply (its API's shape) as the one Chat assistant turn that follows the prompt: a Chat
    reply's message; another API's through its translator (its request with its reply, made Chat, ends with
    that turn)."""
    api = row.get("api")
    if api == Api.CHAT:
        return assistant_turn(reply)
    shape = shape_of(api)
    req = _json(row.get("request_json"))
    if shape is None or shape.to_chat is None or shape.with_reply is None or not isinstance(req, dict):
        raise ChatViewError(f"unsupported_api:{api}")
    prompt = shape.to_chat(dict(req)).request.get("messages") or []
    extra = (shape.to_chat(shape.with_reply(req, reply)).request.get("messages") or [])[len(prompt) :]
    if len(extra) != 1 or extra[0].get("role") != "assistant":
        raise ChatViewError("reply_not_one_assistant_turn")
    return dict(extra[0])


def assistant_turn(response: Mapping[str, Any]) -> dict[str, Any]:
    """A Chat response's message as the assistant turn that follows the prompt."""
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0].get("message"), Mapping):
        raise ChatViewError("no_response_message")
    msg = dict(choices[0]["message"])
    msg["role"] = "assistant"
    if msg.get("reasoning") and not msg.get("reasoning_content"):
        msg["reasoning_content"] = msg["reasoning"]
    return {
        k: v
        for k, v in msg.items()
        if k in ("role", "content", "tool_calls", "reasoning_content") and v is not None
    }


def template_kwargs(chat: Mapping[str, Any]) -> dict[str, Any] | None:
    kw = chat.get("chat_template_kwargs")
    return dict(kw) if isinstance(kw, Mapping) else None


def text_of(content: Any) -> str | None:
    """A message's content as the template sees it: text parts joined with newlines (other parts dropped)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "") if isinstance(part, Mapping) else str(part)
            for part in content
            if not isinstance(part, Mapping) or part.get("type", "text") == "text"
        )
    return str(content)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def typed_messages(messages: list[Any]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        m = m if isinstance(m, Mapping) else {"role": "user", "content": str(m)}
        calls = None
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function") or {}
                calls.append(
                    {
                        "id": c.get("id"),
                        "type": c.get("type") or "function",
                        "function": {"name": fn.get("name"), "arguments": _text(fn.get("arguments"))},
                    }
                )
        out.append(
            {
                "role": str(m.get("role") or ""),
                "content": text_of(m.get("content")),
                "reasoning_content": _text(m.get("reasoning_content")),
                "tool_calls": calls,
                "tool_call_id": m.get("tool_call_id"),
                "name": m.get("name"),
            }
        )
    return out


def typed_tools(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    out = []
    for t in tools:
        fn = t.get("function") or {} if isinstance(t, Mapping) else {}
        out.append(
            {
                "type": t.get("type") or "function" if isinstance(t, Mapping) else "function",
                "function": {
                    "name": fn.get("name"),
                    "description": fn.get("description"),
                    "parameters": _text(fn.get("parameters")),
                    "strict": fn.get("strict") if isinstance(fn.get("strict"), bool) else None,
                },
            }
        )
    return out


def normalize_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI message → what chat templates expect, as vLLM prepares it: text content parts joined with
    newlines, missing content as "", and tool-call arguments parsed from their JSON string into an object
    (templates re-serialise them with `tojson`)."""
    msg = dict(message)
    msg["content"] = text_of(msg.get("content")) or ""
    if msg.get("tool_calls"):
        calls = []
        for call in msg["tool_calls"]:
            call = dict(call)
            fn = call.get("function")
            if isinstance(fn, Mapping) and isinstance(fn.get("arguments"), str):
                fn = dict(fn)
                with contextlib.suppress(ValueError):
                    fn["arguments"] = json.loads(fn["arguments"])
                call["function"] = fn
            calls.append(call)
        msg["tool_calls"] = calls
    return msg


def template_messages(typed: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Typed messages (as read back from Parquet) as a template takes them: unset fields left out."""
    return [normalize_message({k: v for k, v in m.items() if v is not None}) for m in typed]


def template_tools(typed: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    if not typed:
        return None
    out = []
    for t in typed:
        fn = {k: v for k, v in (t.get("function") or {}).items() if v is not None}
        if isinstance(fn.get("parameters"), str):
            with contextlib.suppress(ValueError):
                fn["parameters"] = json.loads(fn["parameters"])
        out.append({"type": t.get("type") or "function", "function": fn})
    return out
