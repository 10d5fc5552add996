"""Tests in tests/gpu need a real NVIDIA GPU: skip them unless ``nvidia-smi``
exists and runs successfully (no driver, no GPU, or a broken driver all skip)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile

import pytest


def _nvidia_smi_works() -> tuple[bool, str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False, "nvidia-smi not found"
    try:
        done = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, f"nvidia-smi failed: {err}"
    if done.returncode != 0 or "GPU" not in done.stdout:
        return False, f"nvidia-smi failed (rc={done.returncode}): {done.stdout.strip() or done.stderr.strip()}"
    return True, ""


@pytest.fixture(scope="session")
def nvidia_smi_available() -> tuple[bool, str]:
    return _nvidia_smi_works()


@pytest.fixture(autouse=True)
def _require_nvidia_gpu(nvidia_smi_available: tuple[bool, str]) -> None:
    ok, why = nvidia_smi_available
    if not ok:
        pytest.skip(f"needs an NVIDIA GPU: {why}")


@pytest.fixture
def runtime():
    """A private runtime dir for the agents a test starts."""
    path = tempfile.mkdtemp(prefix="vsgpu-")
    yield path
    shutil.rmtree(path, ignore_errors=True)
