"""``--demo[=GxP]``: before or after the command, never eating the command's name."""

from __future__ import annotations

import argparse
import json

import pytest

from app import cli
from app.cli.demo_option import attach_scenarios, parse_scenario


def parse(*argv: str) -> argparse.Namespace:
    parser = cli.build_parser()
    return parser.parse_args(attach_scenarios(list(argv), cli._commands(parser)))


@pytest.mark.parametrize(("argv", "size"), [
    (["--demo"], None),
    (["--demo=8x64"], (8, 64)),
    (["--demo", "8x64"], (8, 64)),
    (["--demo", "--screenshot", "x.png"], None),
    (["--demo=2X3", "--after", "1"], (2, 3)),
])
def test_demo_for_the_window(argv, size):
    args = parse(*argv)
    assert args.demo is True
    assert args.demo_size == size
    assert args.command is None


@pytest.mark.parametrize(("argv", "command", "size"), [
    (["--demo", "status"], "status", None),
    (["status", "--demo"], "status", None),
    (["--demo=3x5", "status"], "status", (3, 5)),
    (["--demo", "3x5", "status", "--json"], "status", (3, 5)),
    (["status", "--demo=3x5", "--json"], "status", (3, 5)),
    (["status", "--demo", "3x5"], "status", (3, 5)),
    (["--demo=3x5", "status", "--demo"], "status", None),  # the last one given wins
    (["--demo", "agents", "--json"], "agents", None),
    (["--demo", "models"], "models", None),
])
def test_demo_for_a_command(argv, command, size):
    args = parse(*argv)
    assert args.demo is True
    assert args.demo_size == size
    assert args.command == command


def test_no_demo():
    args = parse("status")
    assert args.demo is False and args.demo_size is None
    assert parse().demo is False


def test_run_passes_the_programs_own_demo_flag_through():
    args = parse("run", "python", "train.py", "--demo", "status")
    assert args.cmd == ["python", "train.py", "--demo", "status"]
    assert args.demo is False


@pytest.mark.parametrize("bad", ["--demo=8", "--demo=x64", "--demo=0x4", "--demo=8x0",
                                 "--demo=17x4", "--demo=2x100", "--demo=big", "--demo", ])
def test_bad_scenario_is_an_argparse_error(capsys, bad):
    argv = [bad, "nonsense"] if bad == "--demo" else [bad]
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip()


def test_parse_scenario_limits():
    assert parse_scenario("1x1") == (1, 1)
    assert parse_scenario("16x99") == (16, 99)
    assert parse_scenario("") is None
    with pytest.raises(argparse.ArgumentTypeError, match="8x64"):
        parse_scenario("eight")


def test_status_shows_the_scaled_demo(capsys):
    rc = cli.main(["--demo=3x5", "status", "--json", "--interval", "0"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert len(data["gpus"]) == 3
    # One process in eight is a batch job that starts later: five all run from the start.
    assert [len(g["processes"]) for g in data["gpus"]] == [5, 5, 5]
    assert all("H100" in g["name"] for g in data["gpus"])


def test_the_scaled_demo_has_no_simulated_agents_and_the_scripted_one_has(capsys):
    assert cli.main(["agents", "--demo=2x4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert cli.main(["--demo", "agents", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
