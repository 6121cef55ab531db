"""Translation: protected spans survive byte for byte, bad answers are retried then rejected with
a reason, results are cached in the database, and calls carry the translation tag."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from factory.db import Issue, Repo, Translation, connect, session_factory
from factory.ingest.translate import (
    Checks,
    TranslationRejected,
    Translator,
    mask,
    translate_in_background,
    translate_missing,
    unmask,
    validate,
)
from factory.ingest.translate_text import paragraphs

BODY = """When I call `client.fetch()` on Windows the request hangs.

Steps:
1. Install with `pip install foo==1.2`
2. Run the script in src/foo/cli.py with --verbose
3. See https://example.com/docs/setup.html for details.

```python
from foo import Client
Client().fetch()  # hangs forever
```

The `retry_count` option and parse_config() are ignored. Expected: it returns within 5 seconds.
"""


def fake_korean(masked: str) -> str:
    """A 'model' that turns every English word into Korean and keeps placeholders."""
    return re.sub(r"[A-Za-z]+", "번역", masked)


class FakeModel:
    def __init__(self, *answers):
        self.answers = list(answers)  # callables masked -> answer, used in order (last repeats)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "fake-model"}]})
        body = json.loads(request.content)
        fn = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        content = fn(body["messages"][-1]["content"])
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": content}}]})


def translator(model: FakeModel, **kw) -> Translator:
    return Translator("http://proxy/s/translate/v1", transport=httpx.MockTransport(model), **kw)


def test_mask_protects_code_urls_paths_identifiers_and_roundtrips():
    masked, spans = mask(BODY)
    assert "```python\nfrom foo import Client\nClient().fetch()  # hangs forever\n```" in spans
    for protected in (
        "`client.fetch()`",
        "https://example.com/docs/setup.html",
        "src/foo/cli.py",
        "--verbose",
        "`retry_count`",
        "parse_config()",
    ):
        assert protected in spans, protected
        assert protected not in masked
    assert unmask(masked, spans) == BODY


def test_good_translation_keeps_code_byte_identical_and_is_tagged():
    model = FakeModel(fake_korean)
    res = translator(model).translate_issue("Fetch hangs on Windows", BODY)
    assert res.ok, res.reason
    assert "```python\nfrom foo import Client\nClient().fetch()  # hangs forever\n```" in res.body
    assert "`client.fetch()`" in res.body
    assert "https://example.com/docs/setup.html" in res.body
    assert "번역" in res.title
    chats = [r for r in model.requests if r.url.path.endswith("/chat/completions")]
    assert chats
    assert all(r.headers["X-Dflash-Tag"] == "translation" for r in chats)
    assert json.loads(chats[0].content)["model"] == "fake-model"


def test_retry_with_reason_then_success():
    drop_one = lambda m: fake_korean(m).replace("⟦0⟧", "", 1)  # noqa: E731
    model = FakeModel(drop_one, fake_korean)
    _text, attempts = translator(model).translate_text(BODY)
    assert attempts == 2
    second = json.loads([r for r in model.requests if r.url.path.endswith("/chat/completions")][1].content)
    assert any("rejected" in m["content"] and "⟦0⟧" in m["content"] for m in second["messages"])


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (lambda m: m, "Hangul share"),  # left in English
        (lambda m: fake_korean(m).replace("⟦0⟧", ""), "placeholder(s) lost"),
        (lambda m: fake_korean(m) + " ⟦99⟧", "invented"),
        (lambda m: fake_korean(m) + "가" * 5000, "length ratio"),
        (lambda m: "", "empty translation"),
    ],
)
def test_bad_answers_are_rejected_with_reason(answer, reason):
    model = FakeModel(answer)
    res = translator(model, max_attempts=2).translate_issue("Fetch hangs", BODY)
    assert not res.ok
    assert reason in res.reason


def test_validate_catches_changed_code_even_without_placeholders():
    ko = fake_korean(mask(BODY)[0])
    good = unmask(ko, mask(BODY)[1])
    validate(BODY, good)
    with pytest.raises(TranslationRejected, match="code blocks"):
        validate(BODY, good.replace("hangs forever", "멈춤"))
    with pytest.raises(TranslationRejected, match="inline code"):
        validate(BODY, good.replace("`retry_count`", "`재시도`"))
    with pytest.raises(TranslationRejected, match="URLs"):
        validate(BODY, good.replace("https://example.com/docs/setup.html", "https://example.org"))
    with pytest.raises(TranslationRejected, match="Hangul"):
        validate(BODY, BODY, Checks(min_hangul=0.3))


def test_all_code_text_needs_no_model():
    model = FakeModel(lambda m: pytest.fail("model must not be called"))
    assert translator(model).translate_text("`foo()`") == ("`foo()`", 0)


def issues_db(url: str, numbers: range) -> sessionmaker[OrmSession]:
    """A database with one repository and its issues `numbers`, each with BODY."""
    sessions = session_factory(connect(url))
    with sessions.begin() as s:
        r = Repo(name="o/r", language="Python", license="MIT", clone_url="x")
        s.add(r)
        s.flush()
        s.add_all(
            Issue(repo_id=r.id, number=n, title=f"Issue {n} fails", body=BODY, created_at="t", updated_at="t")
            for n in numbers
        )
    return sessions


def test_translate_missing_caches_ok_and_rejected(sqlite_url):
    sessions = issues_db(sqlite_url, range(1, 3))
    model = FakeModel(fake_korean)
    assert translate_missing(sessions, translator(model)) == {"ok": 2, "rejected": 0}
    calls = len(model.requests)
    assert translate_missing(sessions, translator(model)) == {"ok": 0, "rejected": 0}  # cached
    assert len(model.requests) == calls
    with sessions() as s:
        rows = s.scalars(select(Translation)).all()
        assert {t.status for t in rows} == {"ok"}
        assert all(t.model == "fake-model" for t in rows)

    with sessions.begin() as s:
        s.add(Issue(repo_id=1, number=3, title="Broken thing", body=BODY, created_at="t", updated_at="t"))
    bad = FakeModel(lambda m: m)
    assert translate_missing(sessions, translator(bad, max_attempts=2)) == {"ok": 0, "rejected": 1}
    with sessions() as s:
        t = s.scalar(select(Translation).where(Translation.status == "rejected"))
        assert t is not None
        assert "Hangul share" in t.reason
    # a rejection is cached too, until asked to retry
    assert translate_missing(sessions, translator(bad)) == {"ok": 0, "rejected": 0}
    assert translate_missing(sessions, translator(FakeModel(fake_korean)), retry_rejected=True) == {
        "ok": 1,
        "rejected": 0,
    }


def test_hyphenated_words_are_prose_and_flags_are_code():
    masked, spans = mask("A well-known non-blocking call; run it with --verbose or -v.")
    assert spans == ["--verbose", "-v"]
    assert "well-known non-blocking" in masked


def test_a_long_body_is_translated_in_pieces_within_max_tokens():
    body = "\n\n".join(f"Paragraph {i}: " + "the request hangs when it retries " * 12 for i in range(20))
    assert len(body) > 8000
    model = FakeModel(fake_korean)
    res = translator(model, max_tokens=4096).translate_issue("Hangs", body)
    assert res.ok, res.reason
    chats = [json.loads(r.content) for r in model.requests if r.url.path.endswith("/chat/completions")]
    assert len(chats) > 3  # the title, then the body in several pieces
    assert all(c["max_tokens"] <= 4096 for c in chats)
    assert all(len(c["messages"][-1]["content"]) <= 2 * c["max_tokens"] for c in chats)
    assert res.body.count("\n\n") == body.count("\n\n")  # paragraphs kept


def test_a_long_single_line_is_cut_at_sentences_then_spaces():
    line = " ".join(
        f"Step {i} retries the request and the client hangs until the timeout." for i in range(150)
    )
    words = "word " * 3000  # no sentence end at all
    body = f"Intro.\n\n{line}\n\n{words}\n\nKeep `--no-retry` as is."
    pieces = paragraphs(body, 1000)
    assert "".join(pieces) == body
    assert max(len(p) for p in pieces) <= 1000
    assert all(p.endswith((". ", " ", "\n", "is.")) for p in pieces)  # never inside a word
    model = FakeModel(fake_korean)
    res = translator(model, max_tokens=1024).translate_issue("Hangs", body)
    assert res.ok, res.reason
    chats = [json.loads(r.content) for r in model.requests if r.url.path.endswith("/chat/completions")]
    assert all(len(c["messages"][-1]["content"]) <= 2 * c["max_tokens"] for c in chats)


def test_reasoning_blocks_are_stripped_and_an_unfinished_one_is_rejected():
    res = translator(
        FakeModel(lambda m: "<think>\nLet me translate.\n</think>\n\n" + fake_korean(m))
    ).translate_issue("Fetch hangs", BODY)
    assert res.ok, res.reason
    assert "<think>" not in res.body
    assert "Let me" not in res.title
    bad = translator(FakeModel(lambda m: "<think>\nLet me think about " + m), max_attempts=1)
    res = bad.translate_issue("Fetch hangs", BODY)
    assert not res.ok
    assert "unfinished reasoning" in res.reason


def test_the_language_of_source_and_answer_is_identified():
    model = FakeModel(lambda m: pytest.fail("a non-English source is not sent"))
    res = translator(model).translate_issue("Ошибка", "Эта ошибка возникает при запуске на Windows.")
    assert not res.ok
    assert "reads as russian" in res.reason
    japanese = lambda m: re.sub(r"[A-Za-z]+", "これは日本語の文章です", m) + " 번역"  # noqa: E731
    res = translator(FakeModel(japanese), max_attempts=1).translate_issue("Fetch hangs", BODY)
    assert not res.ok
    assert "reads as japanese" in res.reason


def test_translation_runs_concurrently_in_the_background(sqlite_url):
    sessions = issues_db(sqlite_url, range(1, 7))
    done: list[int] = []
    lock, inflight, peak = threading.Lock(), [0], [0]

    def slow_korean(m: str) -> str:  # each answer takes a while: requests in flight at once are counted
        with lock:
            inflight[0] += 1
            peak[0] = max(peak[0], inflight[0])
        time.sleep(0.05)
        with lock:
            inflight[0] -= 1
        return fake_korean(m)

    future = translate_in_background(
        sessions,
        translator(FakeModel(slow_korean)),
        concurrency=3,
        on_done=lambda issue, res: done.append(issue),
    )
    assert future.result(timeout=60) == {"ok": 6, "rejected": 0}
    assert sorted(done) == [1, 2, 3, 4, 5, 6]
    assert 2 <= peak[0] <= 3  # concurrent, and bounded by `concurrency`
