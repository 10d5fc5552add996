"""The agent never harms its host: each pattern of ordinary PyTorch usage gives
the same results with and without the agent, while a client polls the agent
at 4 Hz and unloads / reloads the pattern's models between its steps.

One test per file in ``patterns/``, or per variant of one (see
``patterns/README.md``); each runs the pattern twice in real child processes
(``harness.run_pair``) and fails with ``verdict.judge``'s account of every
difference, or skips when the machine cannot give it what it declares.
Deselect the corpus with ``-m "not host_harm"``; ``python -m
tests.e2e.host_harm [PATTERN[:VARIANT]...]`` runs patterns outside pytest and
prints the same account.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests.e2e.host_harm import harness, verdict

BOOTSTRAP = harness.ROOT / "app" / "agent" / "_bootstrap" / "sitecustomize.py"

pytestmark = [
    pytest.mark.host_harm,
    pytest.mark.skipif(os.name != "posix", reason="POSIX: AF_UNIX agents, process groups"),
    pytest.mark.skipif(not BOOTSTRAP.exists(), reason="the agent's bootstrap is not there"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
]


@pytest.fixture(scope="session")
def inductor_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One torch.compile cache for every run of the session, as a user's machine
    has one: each graph is compiled from scratch once, not once per run."""
    return str(tmp_path_factory.mktemp("inductor"))


def _missing(modules: tuple[str, ...]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


@pytest.mark.parametrize("pattern", harness.pattern_names())
def test_pattern_behaves_the_same_under_the_agent(pattern: str, inductor_cache: str) -> None:
    missing = _missing(harness.pattern_requirements(pattern))
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    try:
        pair = harness.run_pair(pattern, inductor_cache=inductor_cache)
    except harness.CannotRun as exc:
        pytest.skip(str(exc))
    report = verdict.judge(pair)
    if report:
        pytest.fail(report, pytrace=False)


@pytest.fixture(scope="session")
def installed_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh virtualenv with the agent installed (``agent install``) and this
    test environment's packages reachable: the agent comes through the
    environment's hook, with no launcher."""
    import subprocess
    import sys
    import sysconfig

    from app.core import agent_install

    root = tmp_path_factory.mktemp("installed")
    env_dir = root / "env"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv",
                    "--without-pip", str(env_dir)], check=True)
    env = agent_install.probe(agent_install.env_python(str(env_dir)))
    agent_install.install(env, keep_record=False)
    (Path(env.site) / "zz_test_packages.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n" + str(harness.ROOT) + "\n")
    return env.python


@pytest.mark.parametrize("pattern", harness.pattern_names())
def test_pattern_behaves_the_same_with_the_agent_installed(pattern: str, inductor_cache: str,
                                                          installed_python: str) -> None:
    """The same corpus, the agent loaded by ``agent install``'s hook instead of ``run``."""
    missing = _missing(harness.pattern_requirements(pattern))
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    try:
        pair = harness.run_pair(pattern, inductor_cache=inductor_cache, python=installed_python)
    except harness.CannotRun as exc:
        pytest.skip(str(exc))
    report = verdict.judge(pair)
    if report:
        pytest.fail(report, pytrace=False)
