"""`records.atomic`: a file is replaced whole or not at all, durably, by any writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from records.atomic import atomic_path, leftovers, write_text


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    final = write_text(tmp_path / "sub" / "state.json", "old")  # the folder is made

    def killed_mid_write() -> None:
        with atomic_path(final) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        killed_mid_write()
    assert final.read_text() == "old"
    assert sorted(p.name for p in final.parent.iterdir()) == ["state.json"]


def test_the_temporary_is_hidden_beside_the_file_and_renamed_over_it(tmp_path: Path) -> None:
    final = tmp_path / "shard-00000.safetensors"
    with atomic_path(final) as tmp:
        assert tmp.parent == final.parent
        assert tmp.name.startswith(".")  # a reader listing shard-* never sees it
        tmp.write_bytes(b"whole")
        assert not final.exists()
    assert final.read_bytes() == b"whole"
    assert [p.name for p in tmp_path.iterdir()] == [final.name]
    assert final.stat().st_size == 5


def test_a_killed_writers_temporary_is_found_for_the_next_writer(tmp_path: Path) -> None:
    final = write_text(tmp_path / "shard.safetensors", "whole")
    dead = tmp_path / ".shard.safetensors.4242.1.tmp"  # what a writer killed mid-write leaves
    dead.write_text("half")
    (tmp_path / ".other.safetensors.4242.1.tmp").write_text("not this file's")
    assert leftovers(final) == [dead]
