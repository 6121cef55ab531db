"""Re-sampled completions in the data build: on their source call's side of the split, never held out,
and the held-out calls `trainer regenerate` skips are exactly the ones the build holds out."""

from __future__ import annotations

from dataclasses import replace

from trainer.data.build import build_from_examples, heldout_call_ids
from trainer.data.records import CallExample, Report
from trainer.regenerate_rows import sample_id


def call(cid: str, session: str, t: float, prompt: list[int], completion: list[int]) -> CallExample:
    return CallExample(cid, session, t, prompt, completion, [1] * len(completion), "stored", repo="org/only")


def resample(src: CallExample, k: int, completion: list[int]) -> CallExample:
    return replace(
        src,
        call_id=sample_id(src.call_id, k),
        completion_ids=completion,
        supervise=[1] * len(completion),
        regenerated_from=src.call_id,
    )


def sessions() -> list[CallExample]:
    # what one harvested repository gives: whole sessions are held out, two calls each
    out = []
    for i in range(8):
        first = call(f"s{i}a", f"s{i}", 2 * i, [1, 2, 100 + i], [3, 4, 5])
        out += [first, call(f"s{i}b", f"s{i}", 2 * i + 1, [1, 2, 100 + i, 3, 4, 5, 9], [6, 7])]
    return out


def test_resamples_train_on_their_source_side_and_never_on_the_held_out_one() -> None:
    recorded = sessions()
    extra = [resample(c, k, [50 + k, 51, 52, 53]) for c in recorded for k in range(2)]
    res = build_from_examples([*recorded, *extra], Report(), max_len=100, eval_fraction=0.25)
    held = heldout_call_ids(recorded, 0.25)
    assert held  # some sessions are held out
    assert {cid for s in res.eval for cid in s.call_ids} == held  # the eval side: the recorded calls only
    trained = {cid for s in res.train for cid in s.call_ids}
    for ex in extra:
        assert (ex.call_id in trained) == (ex.regenerated_from not in held), ex.call_id
    # a re-sample is its own sequence: the source prompt unsupervised, the new completion supervised
    one = next(
        s for s in res.train if s.call_ids == [extra[0].call_id] and extra[0].regenerated_from not in held
    )
    assert one.input_ids == [*extra[0].prompt_ids, *extra[0].completion_ids]
    assert one.loss_mask == [0] * len(extra[0].prompt_ids) + [1] * 4
    reg = res.report["regenerated"]
    assert reg["rows"] == len(extra)
    assert res.report["dropped"]["regenerated_of_held_out_call"] == 2 * len(held)
    assert reg["supervised_tokens_regenerated"] == 4 * (len(extra) - 2 * len(held))
    assert reg["multiplier"] > 1


def test_the_split_does_not_move_when_resamples_are_added() -> None:
    recorded = sessions()
    plain = build_from_examples(list(recorded), Report(), max_len=100, eval_fraction=0.25)
    extra = [resample(c, 0, [7, 7, 7]) for c in recorded]
    more = build_from_examples([*recorded, *extra], Report(), max_len=100, eval_fraction=0.25)
    assert [s.call_ids for s in plain.eval] == [s.call_ids for s in more.eval]
