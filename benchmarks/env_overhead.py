"""Environment images: session start from an environment image vs today's copy-in, for a generated repository
of many files; environment image build time and size per language.

    python benchmarks/env_overhead.py [--files 50000] [--repeat 3] [--json OUT] [--builds-only]
    (also: python benchmarks/sandbox_overhead.py --env)

Needs a Docker engine (`make docker`); builds the agents, family and egress images when they are missing
(not timed). One small repository per language family: the Python one installs a PyPI dependency and the
Node one an npm dependency through the egress proxy (both registries are reachable here); Go, Rust, Java and
C++ have none (their registries are not reachable here), so their setup only fetches and builds.
Everything it creates carries the run id `bench-env-*`; its environment images are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sandboxes.config import SandboxSettings  # noqa: E402
from sandboxes.envimage import gc_env_images  # noqa: E402
from sandboxes.environment import prepare  # noqa: E402
from sandboxes.images.build import build_agents  # noqa: E402
from sandboxes.sandbox import Sandbox, SandboxSpec  # noqa: E402

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@b",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@b",
}


def commit_all(path: Path) -> str:
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=GIT_ENV, capture_output=True)
    return subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def big_repo(root: Path, files: int) -> tuple[Path, str]:
    """`files` small Python files in directories of 100 (about the shape of a large source tree)."""
    path = root / "big"
    for i in range(files):
        d = path / "src" / f"pkg{i // 100:04d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i % 100:03d}.py").write_text(
            f"# module {i}\nVALUE = {i}\n\n\ndef f(x):\n    return x + {i}\n"
        )
    (path / "requirements.txt").write_text("")
    return path, commit_all(path)


def python_repo(root: Path) -> tuple[Path, str]:
    path = root / "py"
    (path / "calc").mkdir(parents=True)
    (path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "calc"\nversion = "0.1"\ndependencies = ["six"]\n[tool.setuptools]\npackages = ["calc"]\n'
    )
    (path / "calc" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    return path, commit_all(path)


def go_repo(root: Path) -> tuple[Path, str]:
    path = root / "go"
    path.mkdir()
    (path / "go.mod").write_text("module bench.test/app\n\ngo 1.21\n")
    (path / "app.go").write_text("package app\n\nfunc Add(a, b int) int { return a + b }\n")
    return path, commit_all(path)


def files_repo(root: Path, name: str, files: dict[str, str]) -> tuple[Path, str]:
    path = root / name
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    return path, commit_all(path)


# name -> (files, setup given explicitly or None for detected, language for detection)
SMALL = {
    "rust": (
        {
            "Cargo.toml": '[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n',
            "src/lib.rs": "pub fn add(a: i32, b: i32) -> i32 { a + b }\n",
        },
        None,
        "Rust",
    ),
    "java": (
        {"src/Calc.java": "public class Calc { public static int add(int a, int b) { return a + b; } }\n"},
        "mkdir -p out && javac -d out src/*.java",
        "Java",
    ),
    "cpp": (
        {
            "CMakeLists.txt": "cmake_minimum_required(VERSION 3.16)\nproject(calc CXX)\nadd_library(calc calc.cpp)\n",
            "calc.cpp": "int add(int a, int b) { return a + b; }\n",
        },
        None,
        "C++",
    ),
    "node": (
        {
            "package.json": '{"name": "calc", "version": "0.1.0", "dependencies": {"is-number": "7.0.0"}}\n',
            "index.js": "module.exports = (a, b) => a + b;\n",
        },
        None,
        "JavaScript",
    ),
}


def own_mib(client: docker.DockerClient, image: str, below: str) -> float:
    return (client.images.get(image).attrs["Size"] - client.images.get(below).attrs["Size"]) / 2**20


def start_seconds(
    client: docker.DockerClient, spec: SandboxSpec, repeat: int
) -> tuple[float, dict[str, float]]:
    """Median time to a ready sandbox (network, container, repository in place) and the last run's steps."""
    times, steps = [], {}
    for _ in range(repeat):
        t = time.monotonic()
        with Sandbox(spec, client) as box:
            times.append(time.monotonic() - t)
            steps = dict(box.timings)
    return statistics.median(times), steps


def env_builds(
    client: docker.DockerClient, settings: SandboxSettings, agents: str, run_id: str, tmp: Path
) -> dict[str, object]:
    """Each language's small repository: its environment image's build time and layer sizes."""
    builds: dict[str, object] = {}
    repos: list[tuple[str, Path, str, str | None, str | None]] = [
        ("python", *python_repo(tmp), None, None),
        ("go", *go_repo(tmp), None, None),
    ]
    repos += [(n, *files_repo(tmp, n, f), setup, lang) for n, (f, setup, lang) in SMALL.items()]
    for lang, path, sha, setup, language in repos:
        t = time.monotonic()
        p = prepare(
            client, settings, agents, path, sha, repo_id=f"{run_id}/{lang}", setup=setup, language=language
        )
        assert p.setup["status"] == "built", p.setup
        family = client.images.get(str(p.image)).labels["dflash.env.family_image"]
        builds[lang] = {
            "build_s": round(time.monotonic() - t, 2),
            "setup_s": p.setup["seconds"],
            "env_layer_mib": round(own_mib(client, str(p.image), family), 1),
            "family_layer_mib": round(own_mib(client, family, agents), 1),
            "egress_hosts": sorted({str(h["host"]) for h in p.setup["egress"]}),  # type: ignore[union-attr]
        }
        print(lang, json.dumps(builds[lang]), flush=True)
    return builds


def start_comparison(
    client: docker.DockerClient,
    settings: SandboxSettings,
    agents: str,
    run_id: str,
    tmp: Path,
    files: int,
    repeat: int,
) -> dict[str, object]:
    """Session start from the big repository's environment image against copying its tree in."""
    out: dict[str, object] = {}
    t = time.monotonic()
    path, sha = big_repo(tmp, files)
    out["generate_repo_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    big = prepare(client, settings, agents, path, sha, repo_id=f"{run_id}/big", setup="true", test="true")
    out["big_env_build_s"] = round(time.monotonic() - t, 2)
    family = client.images.get(str(big.image)).labels["dflash.env.family_image"]
    out["big_env_layer_mib"] = round(own_mib(client, str(big.image), family), 1)
    copy = SandboxSpec(run_id, "copy", path, sha, "http://127.0.0.1:9", family, settings)
    env = SandboxSpec(run_id, "env", path, sha, "http://127.0.0.1:9", str(big.image), settings)
    env.prepared_base = big.prepared_base
    out["copy_in_start_s"], out["copy_in_steps"] = start_seconds(client, copy, repeat)
    out["env_image_start_s"], out["env_image_steps"] = start_seconds(client, env, repeat)
    out["speedup"] = round(float(out["copy_in_start_s"]) / float(out["env_image_start_s"]), 2)  # type: ignore[arg-type]
    return out


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--builds-only", action="store_true", help="only the per-language environment builds")
    args = ap.parse_args(argv)
    # Creating, committing and removing containers of a 50,000-file tree outlasts the SDK's 60 s default.
    client = docker.from_env(timeout=1800)
    run_id = f"bench-env-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="bench-env-") as tmp:
        settings = SandboxSettings(env_state_dir=Path(tmp) / "state", egress="none", env_min_free_gb=1)
        agents = build_agents(client, settings, log=lambda _m: None)
        out: dict[str, object] = {"run_id": run_id, "files": args.files}
        try:
            out["env_builds"] = env_builds(client, settings, agents, run_id, Path(tmp))
            if not args.builds_only:
                out.update(
                    start_comparison(client, settings, agents, run_id, Path(tmp), args.files, args.repeat)
                )
            print(json.dumps(out, indent=2), flush=True)
        finally:
            for lang in ("python", "go", *SMALL, "big"):
                gc_env_images(
                    client, settings.model_copy(update={"env_budget_gb": 1e-9}), repo_id=f"{run_id}/{lang}"
                )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
