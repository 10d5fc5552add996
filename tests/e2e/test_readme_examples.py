"""Each example session of the README, run for real: the README shows what the
command prints (see :mod:`tests.e2e.readme_examples` for the convention)."""

from __future__ import annotations

import pytest

from tests.e2e.readme_examples import README, examples, normalised, run

EXAMPLES = examples(README.read_text(encoding="utf-8"))


def test_the_readme_has_example_sessions_of_every_demo_command():
    commands = {e.args[0] for e in EXAMPLES}
    assert {"status", "agents", "models", "doctor", "unload"} <= commands
    assert all("--demo" in e.args for e in EXAMPLES)  # nothing that depends on this machine
    assert all(e.output for e in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.command for e in EXAMPLES])
def test_an_example_prints_what_the_readme_shows(example, tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    got = normalised(run(example.args, str(state)))
    shown = normalised(example.output)
    assert got == shown, (
        f"README.md:{example.line}: `{example.command}` prints otherwise now; "
        "`python -m tests.e2e.readme_examples --write` rewrites the examples")


def test_what_may_differ_is_only_the_clock_and_the_machine():
    # the sample's time, an OOM report id's creation time and the host name
    line = "gpu-box  2026-05-01 09:30:12  source demo, driver demo"
    assert normalised((line,)) == normalised(("workstation  2027-01-02 03:04:05  source demo, "
                                              "driver demo",))
    assert normalised(("id 1795803465369-23890-1",)) == normalised(("id 1700000000000-23890-1",))
    assert normalised(("id 1795803465369-23890-1",)) != normalised(("id 1700000000000-23891-1",))
    assert normalised(("  20417  ana  14.5 GiB",)) != normalised(("  20417  ana  14.6 GiB",))
