"""speculators itself, in an environment of its own (`.venv-speculators`, or $DFLASH_SPECULATORS_VENV), so
the adapters here are held against the real library (tests/trainer/speculators/test_real_package.py).

speculators 0.9 pins transformers <= 5.19 (the project's is newer), so it never shares the project's
environment. It shares the rest: a path file puts the project's site-packages after its own, so torch (the
project's CPU build, inside speculators' range) is not downloaded again. speculators and hs-connectors are
installed without their dependencies: they ask for torchvision and torchaudio, which DFlash never imports
and whose wheels would bring another torch. Idempotent: a stamp records what was installed.

    python -m trainer.speculators.env        # what `make speculators` runs
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

WITHOUT_DEPS = ("speculators==0.9.0", "hs-connectors==0.9.0")
WITH_DEPS = ("transformers==5.19.0", "datasets>=4.0.0,<=5.1.0", "loguru>=0.7.2,<=0.7.3", "openai>=2.0.0")
STAMP = ".dflash-speculators.json"
CHECK = (
    "import transformers; from speculators.models import DFlashDraftModel; print(transformers.__version__)"
)


def venv_dir() -> Path:
    env = os.environ.get("DFLASH_SPECULATORS_VENV")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".venv-speculators"


def python(root: Path | None = None) -> Path:
    return (root or venv_dir()) / "bin" / "python"


def _wanted() -> dict[str, list[str]]:
    return {"without_deps": list(WITHOUT_DEPS), "with_deps": list(WITH_DEPS)}


def installed(root: Path | None = None) -> bool:
    stamp = (root or venv_dir()) / STAMP
    return stamp.exists() and json.loads(stamp.read_text()).get("requirements") == _wanted()


def install(root: Path | None = None) -> Path:
    """Create and fill the environment unless it is already what this version wants; its python."""
    root = root or venv_dir()
    if installed(root):
        return python(root)
    venv.create(root, with_pip=True, clear=True)
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = Path(subprocess.check_output([python(root), "-c", where], text=True).strip())
    (purelib / "zz_dflash_project.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [str(python(root)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", *WITHOUT_DEPS], check=True)
    subprocess.run([*pip, *WITH_DEPS], check=True)
    version = subprocess.check_output([python(root), "-c", CHECK], text=True).strip()
    (root / STAMP).write_text(json.dumps({"requirements": _wanted(), "transformers": version}) + "\n")
    return python(root)


if __name__ == "__main__":
    sys.stdout.write(f"speculators environment: {install()}\n")
