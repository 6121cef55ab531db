"""Every column of every published config has its meaning written once (the card's schema tables are made
from it), and the split / join of a request body round-trips."""

from __future__ import annotations

import json

import pytest

from factory.publish.stats import SCHEMAS
from records.dataset import join_request, split_request
from records.dataset_columns import COLUMN_DOCS


@pytest.mark.parametrize("config", sorted(SCHEMAS))
def test_every_column_has_a_meaning_and_no_meaning_lacks_a_column(config: str) -> None:
    assert set(COLUMN_DOCS[config]) == set(SCHEMAS[config].names)
    assert all(text.strip() for text in COLUMN_DOCS[config].values())


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "system": "s", "messages": [{"role": "user", "content": "héllo"}], "max_tokens": 5},
        {"model": "m", "input": [{"type": "message", "role": "user", "content": "x"}], "tools": []},
    ],
)
def test_a_request_splits_into_its_messages_and_joins_back_equal(body: dict) -> None:
    params, field, messages = split_request(json.dumps(body))
    assert field in body
    assert messages is not None
    assert len(messages) == len(body[field])
    assert field not in json.loads(params or "{}")
    assert json.loads(join_request(params, field, messages) or "") == body


@pytest.mark.parametrize("text", ["not json", '{"input": "a plain string"}', "[1, 2]", None])
def test_a_body_without_a_message_list_is_kept_whole(text: str | None) -> None:
    assert split_request(text) == (text, None, None)
    assert join_request(text, None, None) == text
