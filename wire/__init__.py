"""Pure translation between the agents' APIs (Anthropic Messages, OpenAI Responses) and Chat Completions.

No I/O here: the relay calls these functions. `apis` names the APIs (`Api`, the strings the records store);
`shapes` holds one `ApiShape` per API in `API_SHAPES` (route, required fields, translators, assembly, stream
error), which the proxy and the trainer look up instead of branching on the name. One module per direction:

- `anthropic_request`: Messages body → Chat body (`anthropic_to_chat_request`); `count_tokens` → `/tokenize`;
  `anthropic_messages` converts the turns themselves.
- `anthropic_response`: Chat response → Anthropic message (`chat_to_anthropic_message`).
- `anthropic_stream`: Chat chunks → Anthropic SSE events (`AnthropicStreamTranslator`).
- `responses_request` / `responses_response` / `responses_stream`: the same for the Responses API
  (`responses_items` converts input items, `responses_tools` maps tool names).
- `stream_base`: what both stream translators share (chunk parsing, ids, usage, choice routing).
- `sse`, `assemble`, `client_view`: SSE parsing, whole-stream assembly, a translated reply in the client's shape.
- `continued`: a request followed by its recorded reply; `errors`: each API's failed-stream event.
- `token_ids`: take vLLM's token ids out of chat responses and chunks (dicts or raw bytes).
- `reverse`: Chat body → Messages / Responses body (auditing and round-trip tests).

Every request translation returns a `Translated`: the Chat body plus `dropped`, one `FieldNote` per field a
Chat upstream cannot take (path, `dropped`/`mapped`, what happened, count); `docs/translation.md` lists them.
"""

from wire.anthropic_request import (
    anthropic_to_chat_request,
    count_tokens_to_tokenize_request,
    tokenize_to_count_tokens,
)
from wire.anthropic_response import chat_to_anthropic_message
from wire.anthropic_stream import AnthropicStreamTranslator
from wire.apis import Api, UpstreamApi
from wire.common import FieldNote, Translated
from wire.responses_request import responses_to_chat_request, responses_to_tokenize_request
from wire.responses_response import chat_to_responses_response
from wire.responses_stream import ResponsesStreamTranslator
from wire.reverse import chat_to_anthropic_request, chat_to_responses_request
from wire.shapes import API_SHAPES, ApiShape, shape_of
from wire.token_ids import (
    SSETokenIdStripper,
    TokenIdCollector,
    TokenIds,
    ask_token_ids,
    pop_token_ids,
    read_token_ids,
    strip_token_ids_bytes,
)

__all__ = [
    "API_SHAPES",
    "AnthropicStreamTranslator",
    "Api",
    "ApiShape",
    "FieldNote",
    "ResponsesStreamTranslator",
    "SSETokenIdStripper",
    "TokenIdCollector",
    "TokenIds",
    "Translated",
    "UpstreamApi",
    "anthropic_to_chat_request",
    "ask_token_ids",
    "chat_to_anthropic_message",
    "chat_to_anthropic_request",
    "chat_to_responses_request",
    "chat_to_responses_response",
    "count_tokens_to_tokenize_request",
    "pop_token_ids",
    "read_token_ids",
    "responses_to_chat_request",
    "responses_to_tokenize_request",
    "shape_of",
    "strip_token_ids_bytes",
    "tokenize_to_count_tokens",
]
