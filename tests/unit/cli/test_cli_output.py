"""The watch on every CLI output of the suite (``tests.cli_output``): it sees the
CLI run in this process and in a child, and finds None where it is said."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app import cli
from app.cli import agents as cli_agents
from tests.cli_output import MAIN, CliOutputs, is_cli_command, offending_lines

ROOT = Path(__file__).resolve().parents[3]
PY = sys.executable


@pytest.mark.parametrize(("text", "said"), [
    ("18822 m3: resident again (from None)", True), ("None", True), ("x=None,", True),
    ("NoneType", False), ("Nonesuch", False), ("none of them", False), ("null", False),
    ("n/a", False)])
def test_none_is_found_as_a_word(text, said):
    assert bool(offending_lines(f"first line\n{text}\nlast")) is said


@pytest.mark.parametrize(("args", "cwd", "cli_run"), [
    ([PY, MAIN, "status"], None, True),
    ([PY, "main.py", "--demo"], ROOT, True),
    ([PY, "main.py", "--listen"], "/tmp", False),  # another program's main.py
    ([PY, "-m", "app", "serve"], None, True),
    ([PY, "-m", "app.cli", "status"], None, True),
    ([PY, "-c", "from app.cli import main; main(['status'])"], None, True),
    ([PY, "-c", "print(None)"], None, False),
    ([PY, "-m", "pytest"], None, False),
    ("vram-steward status", None, False)])
def test_a_child_running_the_cli_is_known(args, cwd, cli_run):
    assert is_cli_command(args, cwd) is cli_run


def test_the_cli_in_this_process_and_in_a_child_is_read(capsys, monkeypatch,
                                                        _cli_never_says_none):
    def says_none(args) -> int:
        print("agents: None")
        print("error: None", file=sys.stderr)
        return 0

    monkeypatch.setattr(cli_agents, "cmd_agents", says_none)
    watch = CliOutputs()
    watch.install(monkeypatch)
    assert cli.main(["agents"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == ("agents: None\n", "error: None\n")  # passed on untouched
    subprocess.run([PY, "-c", "import app.cli; print('child: None')"], cwd=ROOT,
                   capture_output=True, check=True, timeout=60)
    problems = watch.problems()
    assert len(problems) == 3
    assert problems[0].startswith("main(['agents']) (stdout):") and "agents: None" in problems[0]
    assert "(stderr):" in problems[1] and "error: None" in problems[1]
    assert "child: None" in problems[2]
    _cli_never_says_none.outputs.clear()  # this test's None was on purpose
