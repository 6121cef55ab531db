"""The template the export checks the chat view with is the one the target serves: the project's for a
SmolLM2 started here (vLLM and the stand-in both serve it), a `--chat-template` passed to the target, or
an explicit one; none (the tokenizer's own) for other targets and for a target the harvest did not start."""

from __future__ import annotations

from pathlib import Path

from factory.harvest import HarvestOptions
from serving.launch import standin_template


def test_the_served_template_is_found_where_the_harvest_starts_the_target(tmp_path: Path) -> None:
    smollm2 = HarvestOptions(data_dir=tmp_path, target_model="smollm2").served_template()
    assert smollm2 == str(standin_template())
    assert Path(smollm2).read_text().startswith("{")
    assert HarvestOptions(data_dir=tmp_path, target_model="tiny-qwen3").served_template() is None
    given = ["--chat-template", "/x/t.jinja"]
    with_arg = HarvestOptions(data_dir=tmp_path, target_model="tiny-qwen3", target_arg=given)
    assert with_arg.served_template() == "/x/t.jinja"
    outside = HarvestOptions(data_dir=tmp_path, target_url="http://127.0.0.1:9", target_model="smollm2")
    assert outside.served_template() is None
    explicit = HarvestOptions(data_dir=tmp_path, target_url="http://127.0.0.1:9", chat_template="/y.jinja")
    assert explicit.served_template() == "/y.jinja"
