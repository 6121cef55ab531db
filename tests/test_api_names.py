"""The upstream API names have one owner, `wire.apis.Api`: no other module of the project spells one.

A new API should be one member of `Api` and one `ApiShape` in `wire.shapes.API_SHAPES`, not a hunt through
proxy and trainer for every `if api == "openai_responses"`. This scans every string constant of the packages
and benchmarks (tests keep their literals: they are the data recorded rows hold)."""

from __future__ import annotations

from pathlib import Path

from proxy.routes import ROUTES
from tests.support import REPO_ROOT as ROOT
from tests.support.literals import scan, spelled
from wire import API_SHAPES, Api

OWNER = ROOT / "wire" / "apis.py"
# "models" is also an ordinary JSON key (OpenCode's config, a /v1/models reply, a loader's model table):
# a literal "models" cannot be told from the API's name, so only the other names are scanned.
SCANNED = {a.value for a in Api} - {Api.MODELS.value}


def test_no_module_but_the_owner_spells_an_api_name() -> None:
    found = scan(SCANNED, {OWNER})
    assert found == [], "API names belong to wire.apis.Api:\n" + "\n".join(found)


def test_the_scan_finds_a_spelled_name(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('API = "openai_chat"\nOTHER = "openai_chat_v2"\nDOC = "an `openai_chat` call"\n')
    assert spelled(probe, SCANNED, tmp_path) == ["probe.py:1 'openai_chat'"]


def test_every_api_has_one_shape_and_one_route() -> None:
    assert set(API_SHAPES) == set(Api)
    assert all(shape.api is api for api, shape in API_SHAPES.items())
    assert sorted(r.api for r in ROUTES.values()) == sorted(Api)  # no two shapes share a route


def test_a_translated_api_has_every_part_a_chat_upstream_needs() -> None:
    for shape in API_SHAPES.values():
        if shape.to_chat is not None:  # proxy.chatmode.ViaChat and the trainer's re-rendering use all of them
            parts = (shape.from_chat, shape.stream, shape.with_reply, shape.stream_body)
            assert None not in parts, shape.api
        if shape.from_tokenize is not None:  # proxy.chatmode.CountTokensViaTokenize
            assert shape.tokenize, shape.api
