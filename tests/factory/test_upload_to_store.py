"""`upload_to_store`: after a harvest's proxy stopped, the parts it left go to the store through the proxy's
own uploader, in the harvest's process; a store that cannot take them stops the run before the export and
says how to finish by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from factory.run.services import StoreUnavailable, upload_to_store


def test_parts_go_to_a_folder_store_and_leave_the_data_dir(tmp_path: Path) -> None:
    data, store = tmp_path / "data", tmp_path / "store"
    (data / "calls").mkdir(parents=True)
    (data / "calls" / "part-a.parquet").write_bytes(b"PAR1 not read here")
    line = upload_to_store(data, str(store))
    assert line.startswith(f"uploaded 1 part(s) to {store}; 0 left")
    assert (store / "calls" / "part-a.parquet").read_bytes() == b"PAR1 not read here"
    assert not list((data / "calls").glob("*.parquet"))


def test_a_store_that_cannot_be_opened_keeps_the_parts_and_says_how_to_finish(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "calls").mkdir(parents=True)
    (data / "calls" / "part-a.parquet").write_bytes(b"PAR1")
    with pytest.raises(StoreUnavailable) as ei:
        upload_to_store(data, "nosuchscheme://bucket/run")
    assert "python -m proxy.uploader --data-dir" in str(ei.value)
    assert (data / "calls" / "part-a.parquet").exists()
