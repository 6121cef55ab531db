"""The names of the upstream APIs the proxy relays: the one place they are spelled.

The values are what the call records store in their `api` column (records.schema.CallRecord.api is a plain
string because `records` imports nothing): renaming a member's value would orphan every recorded row.
What each API looks like on the wire (routes, translators, assembly, errors) is `wire.shapes.API_SHAPES`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class Api(StrEnum):
    MESSAGES = "anthropic_messages"
    COUNT_TOKENS = "anthropic_count_tokens"
    RESPONSES = "openai_responses"
    CHAT = "openai_chat"
    COMPLETIONS = "openai_completions"
    MODELS = "models"


# What a proxy sends its upstream. chat: Messages/Responses calls become Chat Completions, the only API whose
# answers carry exact token ids (vLLM and the stand-in alike); native relays each API as is.
UpstreamApi = Literal["native", "chat"]
