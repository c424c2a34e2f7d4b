"""scripts/setup-venv.sh, which ./grade and ./run-tests run on first use: its steps, its choice of
PyTorch build, and that a second run does nothing.

A stub stands in for Python and pip (it records each call and answers as they would), so the
decisions are checked in a second, without installing anything."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import tomllib

from tests.conftest import ROOT

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
STUB = r"""#!/usr/bin/env bash
# A Python that records its calls: python -V, -c CODE, -m venv DIR, -m pip install ..., - [ARG] < script
echo "$*" >>"$STUB_LOG"
case "$1" in
    -V) echo "Python 3.11.7" ;;
    -c) [[ "$2" == *version_info* && -n "${STUB_OLD:-}" ]] && exit 1; exit 0 ;;
    -m)
        case "$2" in
            venv) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
            pip) echo "Collecting torch"; echo "  Downloading torch-2.13.0+cpu.whl (190 MB)"
                 echo "Installing collected packages: a, b, torch"; echo "Successfully installed a b torch"
                 [ -z "${STUB_PIP_FAILS:-}" ] || { echo "ERROR: No matching distribution found for torch"; exit 1; } ;;
        esac ;;
    -) cat >/dev/null
       if [ "$#" -gt 1 ]; then [ -n "${STUB_REACHABLE:-}" ]; exit $?; fi
       echo "2.13.0+cpu (CPU build)" ;;
esac
"""


def torch_requirement() -> str:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    return next(d for d in dependencies if d.startswith("torch"))


def setup(tmp_path: Path, *, gpu: bool = False, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "python-stub"
    stub.write_text(STUB)
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    smi = bin_dir / "nvidia-smi"
    if gpu:
        smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200'\n")
        smi.chmod(0o755)
    log = tmp_path / "calls.log"
    venv = tmp_path / "venv"
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PA_", "PIP_"))},
        "PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": str(stub), "STUB_LOG": str(log), **env,
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup-venv.sh"), str(venv), str(venv / ".installed-test")],
        capture_output=True, text=True, env=environ, timeout=60,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return proc, calls


def pip_calls(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("-m pip install")]


no_gpu_here = pytest.mark.skipif(Path("/proc/driver/nvidia/version").exists(), reason="this machine has an NVIDIA GPU")


@no_gpu_here
def test_without_a_gpu_pytorch_comes_from_the_cpu_index(tmp_path: Path) -> None:
    proc, calls = setup(tmp_path, STUB_REACHABLE="1")
    assert proc.returncode == 0, proc.stderr
    torch_call, project_call = pip_calls(calls)
    assert f"--extra-index-url {CPU_INDEX}" in torch_call and torch_call.endswith(torch_requirement())
    assert CPU_INDEX not in project_call and project_call.endswith(f"-e {ROOT}[test]")
    # A line per step, what it chose and why, and how long it took.
    for line in ("[1/3] virtual environment (Python 3.11.7)", "[2/3] PyTorch", "no NVIDIA GPU here: the CPU build", "[3/3] the grader"):
        assert line in proc.stderr, (line, proc.stderr)
    assert proc.stderr.count("done in") == 3 and "ready in" in proc.stderr
    assert (tmp_path / "venv" / ".installed-test").exists()
    assert "Downloading torch" in (tmp_path / "venv" / "setup.log").read_text()  # pip's whole output, kept


@no_gpu_here
def test_an_unreachable_cpu_index_falls_back_to_pips_own_indexes(tmp_path: Path) -> None:
    proc, calls = setup(tmp_path)  # offline, as on the development machine: torch 2.13.0 lies on its disk
    assert proc.returncode == 0, proc.stderr
    torch_call = pip_calls(calls)[0]
    assert "--extra-index-url" not in torch_call and torch_call.endswith(torch_requirement())
    assert "cannot be reached" in proc.stderr


def test_with_a_gpu_pytorch_is_pypis_build(tmp_path: Path) -> None:
    proc, calls = setup(tmp_path, gpu=True, STUB_REACHABLE="1")
    assert proc.returncode == 0, proc.stderr
    assert "--extra-index-url" not in pip_calls(calls)[0]
    assert "an NVIDIA GPU is here" in proc.stderr


def test_pa_torch_index_names_the_index(tmp_path: Path) -> None:
    proc, calls = setup(tmp_path, gpu=True, STUB_REACHABLE="1", PA_TORCH_INDEX="https://mirror.example/whl/cpu")
    assert proc.returncode == 0, proc.stderr
    assert "--extra-index-url https://mirror.example/whl/cpu" in pip_calls(calls)[0]


def test_bootstrap_sets_up_once(tmp_path: Path) -> None:
    """./grade and ./run-tests source bootstrap.sh: the set-up runs while its stamp is missing, then never."""
    bin_dir = tmp_path / "bin"
    setup(tmp_path, STUB_REACHABLE="1")  # writes the stub; its own venv is not the one below
    log = tmp_path / "bootstrap.log"
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PA_", "PIP_"))},
        "PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": str(bin_dir / "python-stub"), "STUB_LOG": str(log),
        "STUB_REACHABLE": "1", "PA_GRADER_VENV": str(tmp_path / "project-venv"),
    }
    command = ["bash", "-c", f"source {ROOT / 'scripts' / 'bootstrap.sh'} && echo \"$PATH\""]
    runs = [subprocess.run(command, capture_output=True, text=True, env=environ, timeout=60) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr
    assert len(pip_calls(log.read_text().splitlines())) == 2  # torch, then the project: the first time only
    assert "[1/3]" in runs[0].stderr and runs[1].stderr == ""
    assert runs[1].stdout.startswith(f"{tmp_path / 'project-venv'}/bin:")


def test_a_failed_install_says_why_and_leaves_no_stamp(tmp_path: Path) -> None:
    proc, _ = setup(tmp_path, STUB_REACHABLE="1", STUB_PIP_FAILS="1")
    assert proc.returncode == 1
    assert "installing PyTorch failed" in proc.stderr and "No matching distribution" in proc.stderr
    assert not (tmp_path / "venv" / ".installed-test").exists()


def test_too_old_a_python_is_named_before_anything_is_installed(tmp_path: Path) -> None:
    proc, calls = setup(tmp_path, STUB_OLD="1")
    assert proc.returncode == 1 and "needs Python >=" in proc.stderr and "PYTHON=" in proc.stderr
    assert not pip_calls(calls) and not (tmp_path / "venv").exists()
