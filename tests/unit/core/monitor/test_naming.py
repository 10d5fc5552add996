import pytest

from app.core.monitor.naming import process_label, short_name
from app.core.monitor.samples import ProcessSample


def proc(name, command, pid=42):
    return ProcessSample(pid, 1, name=name, command=command)


@pytest.mark.parametrize("name, command, expected", [
    ("python", "python train.py --bs 256", "train.py"),
    ("python3.11", "/usr/bin/python3.11 -u /home/ana/proj/train.py", "train.py"),
    ("python", "python -m vllm.entrypoints.openai.api_server --model x", "vllm.entrypoints.openai.api_server"),
    ("python", "python -W ignore serve.py", "serve.py"),
    ("python", "python -c import torch", "python -c"),
    ("python", "python", "python"),
    ("Xorg", "/usr/lib/xorg/Xorg vt2", "Xorg"),
    (None, "/opt/app/bin/worker --x", "worker"),
    (None, None, "pid"),
])
def test_short_name_prefers_the_script_or_module(name, command, expected):
    assert short_name(proc(name, command)) == expected


def test_label_carries_the_pid():
    assert process_label(proc("python", "python train.py", pid=20417)) == "train.py (20417)"
