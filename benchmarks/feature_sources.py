"""Feature tokens/s of the three feature sources on the same sequences, in one process.

hf: the target in-process (`Target.tap`); vllm: the same CPU model behind the stand-in extraction server
on 127.0.0.1 (HTTP request, safetensors file written and read back, every check of the vllm source);
cache: reading the files `trainer.sources.cache.write` stored. The ratio vllm/hf is the protocol's
overhead on a CPU target (on a GPU vLLM the forward itself is what changes); the features are checked
equal bit for bit before any figure is printed.

    python benchmarks/feature_sources.py [--target tiny-qwen3] [--sequences 16] [--length 512]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import uvicorn

from lm import load_target
from lm.standin.extract import ExtractionSettings, create_app
from trainer.sources import cache as cache_mod
from trainer.sources.cache import CacheSource
from trainer.sources.hf import HFSource
from trainer.sources.numbering import to_vllm
from trainer.sources.select import make_source
from trainer.sources.vllm import VllmSourceSettings


@contextlib.contextmanager
def serve(app: object, port: int) -> Iterator[str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="tiny-qwen3")
    ap.add_argument("--sequences", type=int, default=16)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--port", type=int, default=18431)
    args = ap.parse_args()
    target = load_target(args.target)
    taps = target.default_layer_ids(3)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(10, 5000, (args.length,), generator=g).tolist() for _ in range(args.sequences)]
    tokens = args.sequences * args.length
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        hf = HFSource(target).taps_many(seqs, taps)
        t_hf = time.perf_counter() - t0
        aux = to_vllm(taps, target.num_layers)
        app = create_app(target, ExtractionSettings(aux_layer_ids=aux, shared_storage_path=Path(tmp) / "hs"))
        with serve(app, args.port) as url:
            settings = VllmSourceSettings.model_validate(
                {"url": url, "launched_aux_layer_ids": aux, "concurrency": 1}
            )
            source = make_source("vllm", target, vllm=settings)
            t0 = time.perf_counter()
            served = source.taps_many(seqs, taps)
            t_vllm = time.perf_counter() - t0
        cache_mod.write(HFSource(target), seqs, taps, Path(tmp) / "features")
        t0 = time.perf_counter()
        cached = CacheSource(Path(tmp) / "features").taps_many(seqs, taps)
        t_cache = time.perf_counter() - t0
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(hf, served, cached, strict=True))
    print(
        f"target {args.target}, {args.sequences} sequences x {args.length} tokens, taps {taps}, threads {torch.get_num_threads()}"
    )
    for name, t in (("hf", t_hf), ("vllm (stand-in)", t_vllm), ("cache", t_cache)):
        print(f"{name:16s} {t:8.3f} s  {tokens / t:10.0f} feature tokens/s  {t / t_hf:6.3f}x hf's time")
    print("features equal bit for bit: yes")


if __name__ == "__main__":
    main()
