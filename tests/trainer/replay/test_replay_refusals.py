"""Bad input through the command: one clear sentence and a non-zero exit, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.lm.conftest import Live
from tests.support import free_port
from tests.trainer.replay.test_units import _rows, _write
from trainer.cli import app


def _replay(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["replay", *args])
    # CliRunner keeps an escaped exception instead of printing its traceback: a refusal is a SystemExit
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return _write(tmp_path, "test-00000-of-00001.parquet", _rows(4))


def test_an_unreachable_endpoint(dataset: Path, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out = _replay("--data", str(dataset), "--endpoint", f"base={url}", "--out", str(tmp_path / "o"))
    assert code == 2
    assert f"replay: endpoint base ({url}) is unreachable: ConnectError" in out


def test_a_dataset_without_held_out_calls(tmp_path: Path) -> None:
    data = _write(tmp_path, "train-00000-of-00001.parquet", _rows(4))
    code, out = _replay("--data", str(data), "--endpoint", "base=http://127.0.0.1:9")
    assert code == 2
    assert "has no held-out calls: its files are the ['train'] split only" in out


def test_no_call_records_and_a_malformed_endpoint(tmp_path: Path) -> None:
    code, out = _replay("--data", str(tmp_path), "--endpoint", "base=http://127.0.0.1:9")
    assert code == 2
    assert "no Parquet call records under" in out
    code, out = _replay("--data", str(tmp_path), "--endpoint", "127.0.0.1:8000")
    assert code == 2
    assert "--endpoint (from command line)" in out
    assert "is not LABEL=URL" in out


@pytest.mark.slow  # loads tiny-qwen3 and serves it
def test_a_speculative_endpoint_without_counters(dataset: Path, plain: Live, tmp_path: Path) -> None:
    code, out = _replay(
        "--data",
        str(dataset),
        "--endpoint",
        f"base={plain.url}",
        "--endpoint",
        f"dflash={plain.url}",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2
    assert "endpoint dflash" in out
    assert "is labelled speculative but its /metrics has no vllm:spec_decode_* counters" in out


@pytest.mark.slow  # loads tiny-qwen3 and serves it
def test_an_endpoint_lost_midway_keeps_the_levels_already_done(tiny, dataset: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import threading

    import uvicorn

    from lm.standin.server import TargetServer
    from tests.support import wait_http
    from trainer.replay import ReplaySettings, run_replay
    from trainer.replay.run import Progress

    port = free_port()
    uv = uvicorn.Server(
        uvicorn.Config(TargetServer(tiny).app, host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    wait_http(f"http://127.0.0.1:{port}/health", timeout=60)

    def stop_after_first_level() -> None:
        uv.should_exit = True
        thread.join(timeout=30)

    settings = ReplaySettings(
        data=dataset,
        endpoint=[f"base=http://127.0.0.1:{port}"],
        concurrency=[1, 2],
        max_tokens=2,
        out=tmp_path / "o",
    )
    report = run_replay(settings, Progress(finish=stop_after_first_level))
    assert [lv["concurrency"] for lv in report["levels"]] == [1, 2]
    assert report["levels"][0]["endpoints"]["base"]["ok"] == 4  # the first level, kept
    assert report["levels"][1]["endpoints"]["base"]["ok"] == 0
    assert report["refused"]
    assert "stopped early: endpoint base" in report["problems"][-1]
    assert "answered no call" in report["problems"][-1]
    assert (tmp_path / "o" / "report.json").is_file()


@pytest.mark.slow  # loads tiny-qwen3 and serves it twice
def test_a_dead_method_is_left_out_and_the_others_keep_their_rows(
    tiny, dataset: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    import threading

    import uvicorn

    from lm.standin.server import TargetServer
    from tests.support import wait_http
    from trainer.replay import ReplaySettings, run_replay
    from trainer.replay.run import Progress

    servers, ports = [], []
    for _ in range(2):
        ports.append(free_port())
        uv = uvicorn.Server(
            uvicorn.Config(TargetServer(tiny).app, host="127.0.0.1", port=ports[-1], log_level="warning")
        )
        threading.Thread(target=uv.run, daemon=True).start()
        servers.append(uv)
        wait_http(f"http://127.0.0.1:{ports[-1]}/health", timeout=60)
    finished = []

    def stop_other_after_its_first_level() -> None:
        finished.append(1)
        if len(finished) == 2:  # base c=1, then other c=1: `other` goes away
            servers[1].should_exit = True

    settings = ReplaySettings(
        data=dataset,
        endpoint=[f"base=http://127.0.0.1:{ports[0]}", f"other=http://127.0.0.1:{ports[1]}"],
        baseline="base",
        speculative=[],
        concurrency=[1, 2, 3],
        max_tokens=2,
        out=tmp_path / "o",
    )
    report = run_replay(settings, Progress(finish=stop_other_after_its_first_level))
    servers[0].should_exit = True
    levels = {lv["concurrency"]: lv["endpoints"] for lv in report["levels"]}
    assert levels[1]["other"]["ok"] == 4  # its first level, kept
    assert levels[2]["other"]["ok"] == 0  # the level it died in
    assert "other" not in levels[3]  # then left out
    assert levels[3]["base"]["ok"] == 4  # while the baseline went on
    assert any(p.startswith("left out from then on: endpoint other") for p in report["problems"])
    assert not any(p.startswith("stopped early") for p in report["problems"])
