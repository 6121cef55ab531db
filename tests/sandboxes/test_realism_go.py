"""A Go module whose environment image downloads one dependency through the egress proxy, then a scripted fix
turns its failing test green.

proxy.golang.org cannot be reached from this machine, so the dependency comes from a module proxy of the
test's own: a container on the egress network serving the GOPROXY file layout, named in the proxy's
`egress_extra_hosts` (the setting for a site's own mirror). The download still goes through squid.
"""

from __future__ import annotations

import io
import json
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxes.config import SandboxSettings
from sandboxes.egress import egress_network
from sandboxes.envimage import gc_env_images
from sandboxes.environment import prepare
from sandboxes.session import run_session
from tests.sandboxes.conftest import base_commit
from tests.sandboxes.sessions import command_request, patched_files

pytestmark = [pytest.mark.docker, pytest.mark.slow]
MIRROR = "goproxy.dflash.test"
DEP, VERSION = "dflash.test/greet", "v1.0.0"
SETUP = f"go env -w GOPROXY=http://{MIRROR}:8000 GOSUMDB=off && go mod tidy"


def _module_files() -> dict[str, bytes]:
    """The GOPROXY layout of one module version: list, info, mod and the zip with its path@version prefix."""
    mod = f"module {DEP}\n\ngo 1.21\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{DEP}@{VERSION}/go.mod", mod)
        z.writestr(f"{DEP}@{VERSION}/greet.go", 'package greet\n\nfunc Word() string { return "hello" }\n')
    base = f"srv/{DEP}/@v"
    return {
        f"{base}/list": f"{VERSION}\n".encode(),
        f"{base}/{VERSION}.info": json.dumps({"Version": VERSION, "Time": "2024-01-01T00:00:00Z"}).encode(),
        f"{base}/{VERSION}.mod": mod.encode(),
        f"{base}/{VERSION}.zip": buf.getvalue(),
    }


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def module_mirror(docker_client, agents_image: str) -> Iterator[str]:  # type: ignore[no-untyped-def]
    files = _module_files()
    box = docker_client.containers.create(
        agents_image,
        ["python3", "-m", "http.server", "8000", "--directory", "/srv"],
        labels={"dflash.test": "go-mirror"},
    )
    try:
        box.put_archive("/", _tar(files))
        docker_client.networks.get(egress_network(docker_client)).connect(box, aliases=[MIRROR])
        box.start()
        yield MIRROR
    finally:
        box.remove(force=True)


def go_repo(root: Path) -> tuple[Path, str]:
    repo = root / "go-app"
    repo.mkdir()
    (repo / "go.mod").write_text(f"module dflash.test/app\n\ngo 1.21\n\nrequire {DEP} {VERSION}\n")
    (repo / "app.go").write_text(
        f'package app\n\nimport "{DEP}"\n\nfunc Hello() string {{ return greet.Word() }}\n'
    )
    (repo / "app_test.go").write_text(
        'package app\n\nimport "testing"\n\nfunc TestHello(t *testing.T) {\n'
        '\tif got := Hello(); got != "hello!" {\n\t\tt.Fatalf("got %q", got)\n\t}\n}\n'
    )
    return repo, base_commit(repo)


def test_go_module_dependency_through_the_proxy_and_resolved(  # type: ignore[no-untyped-def]
    docker_client, agents_image: str, module_mirror: str, tmp_path: Path
) -> None:
    settings = SandboxSettings(
        env_state_dir=tmp_path / "state",
        setup_time_limit_s=300,
        test_time_limit_s=180,
        env_min_free_gb=1,
        egress="none",  # the session itself needs nothing: the module is in the environment image
        egress_extra_hosts=[f"{module_mirror}:8000"],
    )
    repo, sha = go_repo(tmp_path)
    repo_id = f"test/go-{uuid.uuid4().hex[:6]}"
    prepared = prepare(docker_client, settings, agents_image, repo, sha, repo_id=repo_id, setup=SETUP)
    try:
        assert prepared.plan.family == "go"
        assert prepared.setup["status"] == "built", (prepared.setup["reason"], prepared.setup["tail"])
        # list/info/mod/zip of the one dependency, each a GET through squid (it logs hosts, not paths).
        fetched = [
            h for h in prepared.setup["egress"] if h["host"] == MIRROR and h["status"].endswith("/200")
        ]
        assert len(fetched) >= 2, prepared.setup["egress"]
        assert sum(h["bytes_in"] for h in fetched) > 200
        assert prepared.egress_image is None
        fix = "sed -i 's/return greet.Word()/return greet.Word() + \"!\"/' app.go"
        fields = {"task": "fix Hello", "time_limit_s": 60, "settings": settings, **prepared.request_fields()}
        req = command_request((repo, sha), fix, **fields)
        result = run_session(req)
        assert result.status == "succeeded", result.reason
        assert result.baseline is not None
        assert result.after is not None
        assert result.baseline["tests"] == {"TestHello": "failed"}, result.baseline["tail"]
        assert result.after["tests"] == {"TestHello": "passed"}, result.after["tail"]
        assert result.resolved is True
        assert patched_files(result) == ["+++ b/app.go"]
    finally:
        gc_env_images(docker_client, settings.model_copy(update={"env_budget_gb": 1e-6}), repo_id=repo_id)
