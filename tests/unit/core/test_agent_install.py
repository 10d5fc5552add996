"""Refusals of ``agent install``: each says why in one line and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.core import agent_install
from app.core.agent_install import Environment, InstallError


def fake_python(tmp_path, version: str) -> str:
    """An executable answering the probe as a Python of ``version`` would."""
    path = tmp_path / "bin" / "python"
    path.parent.mkdir(parents=True, exist_ok=True)
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    path.write_text(f"""#!/bin/sh
echo '{{"version": [{version}], "prefix": "{tmp_path}", "site": "{site}", "user_site": "{site}", "conda": false, "venv": true}}'
""")
    path.chmod(0o755)
    return str(path)


def test_a_python_older_than_the_agent_supports_is_refused(tmp_path):
    env = agent_install.probe(fake_python(tmp_path, "3, 8, 10"))
    assert env.version == (3, 8, 10) and env.kind == "venv"
    with pytest.raises(InstallError, match=r"Python 3.8.10 .* older than the agent supports "
                                           r"\(3.9 or later\)"):
        agent_install.install(env)
    assert os.listdir(env.site) == []


def test_a_site_the_user_cannot_write_is_refused(tmp_path, monkeypatch):
    env = agent_install.probe(fake_python(tmp_path, "3, 11, 7"))
    monkeypatch.setattr(os, "access", lambda path, mode: mode != os.W_OK)
    with pytest.raises(InstallError, match="cannot write .*--user"):
        agent_install.install(env)
    assert os.listdir(env.site) == []


def test_a_folder_without_python_and_a_program_that_is_not_python(tmp_path):
    with pytest.raises(InstallError, match="no Python there"):
        agent_install.env_python(str(tmp_path))
    liar = tmp_path / "liar"
    liar.write_text("#!/bin/sh\necho hello\n")
    liar.chmod(0o755)
    with pytest.raises(InstallError, match="did not answer as a Python interpreter"):
        agent_install.probe(str(liar))


def test_the_real_interpreter_describes_itself():
    env = agent_install.probe(sys.executable)
    assert env.version == tuple(sys.version_info[:3]) and os.path.isdir(env.site)
    assert env.kind == ("venv" if sys.prefix != sys.base_prefix else "system")


def test_uninstall_never_follows_a_link(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    elsewhere = tmp_path / "precious"
    elsewhere.mkdir()
    (site / agent_install.FILES_DIR).symlink_to(elsewhere)
    env = Environment("python", str(tmp_path), str(site), (3, 11, 7), "venv")
    with pytest.raises(InstallError, match="symlink"):
        agent_install.uninstall(env)
    assert elsewhere.is_dir()


def test_the_command_line_says_what_to_name(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    environ["VRAM_STEWARD_STATE_DIR"] = str(tmp_path / "state")
    for args, error in ((["install"], "give --env PATH"),
                        (["install", "--env", str(tmp_path), "--user"], "name one"),
                        (["uninstall", "--env", str(tmp_path)], "no Python there")):
        done = subprocess.run([sys.executable, "-m", "app", "agent", *args], capture_output=True,
                              text=True, env=environ, timeout=60)
        assert done.returncode == 2 and error in done.stderr and not done.stdout
