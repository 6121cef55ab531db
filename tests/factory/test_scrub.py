"""Secret detection: detect-secrets plugins and own patterns find each kind of secret; the agents' public
constants, UUIDs, git object ids and ordinary code are left alone; scrubbed JSON stays valid JSON."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from factory.publish.scrub import Scrubber

SECRETS = {
    "aws_access_key": "AKIAIOSFODNN7PLANTED",
    "aws_secret_key": 'aws_secret_access_key = "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"',
    "gitlab_token": "glpat-PLANTEDgitlab0123456789ab",
    "npm_token": "//registry.npmjs.org/:_authToken=npm_PLANTEDnpmTOKEN0123456789abcdefghijk",
    "pypi_token": "pypi-AgEIcHlwaS5vcmcCJGE4YjJkNzYtYjU3Mi00NzM5LWE1NjItYzA0YzI0ZGJkYzI1AAIqWzMsImZhZmU",
    "high_entropy_assignment": 'DB_TOKEN="q8Zr2Lx0Vt7Nw4Pk1Jm9Hs3Ge6Fd5Ca"',
    "github_token": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "url_password": "postgres://admin:Tr0ub4dor3xyz@db.internal/prod",
    "email": "ops@corp.example.com",
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_kind_is_found_and_replaced(kind):
    counts: Counter[str] = Counter()
    text = f"config line: {SECRETS[kind]} end"
    out, n = Scrubber().scrub(text, counts)
    assert n >= 1
    assert f"<REDACTED:{kind}>" in out
    assert "PLANTED" not in out
    assert "Tr0ub4dor3xyz" not in out
    assert "ops@corp" not in out


def test_public_constants_and_ordinary_identifiers_are_not_secrets():
    text = (
        "Co-Authored-By: Claude <noreply@anthropic.com>\n"
        '"prompt_cache_key": "01a22b0d-521d-78f2-b326-ddfecb17b46b"\n'
        "commit 3f786850e387550fdab836ed7e6dc881de23001b\n"
        "password = get_password_from_environment_variable\n"
        "the monkey_key = some_function_name_here and a well-known token"
    )
    assert Scrubber().find(text) == []
    assert Scrubber(allow=["ops@corp.example.com"]).find("mail ops@corp.example.com") == []


def test_scrubbed_json_stays_valid_and_every_occurrence_goes():
    doc = {
        "messages": [
            {
                "content": f"key {SECRETS['gitlab_token']}\n-----BEGIN RSA PRIVATE KEY-----\nMIIabc\n"
                f"-----END RSA PRIVATE KEY-----"
            },
            {"content": SECRETS["gitlab_token"]},
        ]
    }
    out, n = Scrubber().scrub(json.dumps(doc))
    assert n == 3
    back = json.loads(out)
    assert "PLANTED" not in json.dumps(back)
    assert "<REDACTED:private_key>" in back["messages"][0]["content"]
