"""The agent installed once into a Python environment (``agent install``).

Three things go into the environment's site-packages, and nothing else:
``vram-steward-agent.pth`` (one line, run by ``site`` at every interpreter
start), ``vram_steward_hook.py`` (waits for ``import torch``; see it) and
``vram_steward_agent_files/`` (a copy of the agent, so the environment does
not depend on where this app lies).  ``uninstall`` removes exactly those,
the hook's bytecode included, leaving the environment as it was.

The environments installed into are remembered in the state folder
(``agent-installs.json``) for ``agent status``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass

#: The oldest Python the agent runs on.
AGENT_MIN_PYTHON = (3, 9)
PTH_NAME = "vram-steward-agent.pth"
HOOK_NAME = "vram_steward_hook.py"
FILES_DIR = "vram_steward_agent_files"
RECORD_NAME = "agent-installs.json"

_PROBE = ("import json, site, sys, sysconfig; print(json.dumps({"
          "'version': list(sys.version_info[:3]), 'prefix': sys.prefix, "
          "'site': sysconfig.get_paths()['purelib'], 'user_site': site.getusersitepackages(), "
          "'conda': __import__('os').path.isdir(__import__('os').path.join(sys.prefix, "
          "'conda-meta')), 'venv': sys.prefix != sys.base_prefix}))")


class InstallError(Exception):
    """A refusal, in one line; nothing was changed."""


@dataclass(frozen=True)
class Environment:
    python: str  # the interpreter that was asked
    prefix: str  # sys.prefix
    site: str  # where the three things go
    version: tuple[int, int, int]
    kind: str  # "venv", "conda", "user" or "system"

    @property
    def version_text(self) -> str:
        return ".".join(str(v) for v in self.version)


def agent_dir() -> str:
    """The agent package this app carries (copied into environments)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agent")


def env_python(path: str) -> str:
    """The interpreter of the environment at ``path`` (a venv or conda env)."""
    for candidate in (os.path.join(path, "bin", "python"), os.path.join(path, "bin", "python3"),
                      os.path.join(path, "python.exe"), os.path.join(path, "Scripts",
                                                                     "python.exe")):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise InstallError(f"{path}: no Python there (expected bin/python of a virtualenv or "
                       "conda environment)")


def probe(python: str, user: bool = False) -> Environment:
    """What ``python`` says of itself; InstallError when it cannot be run."""
    # -E for an environment (its own paths, whatever the caller's PYTHON* say); none for
    # the user site, which PYTHONUSERBASE moves for every process of that user.
    flags = [] if user else ["-E"]
    try:
        done = subprocess.run([python, *flags, "-c", _PROBE], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstallError(f"cannot run {python}: {exc}") from None
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
        version = tuple(int(v) for v in data["version"][:3])
    except (ValueError, KeyError, IndexError, TypeError):
        raise InstallError(f"{python} did not answer as a Python interpreter"
                           + (f": {done.stderr.strip()[-200:]}" if done.stderr else "")) from None
    kind = "user" if user else "conda" if data.get("conda") else \
        "venv" if data.get("venv") else "system"
    site = str(data["user_site"] if user else data["site"])
    return Environment(python, str(data["prefix"]), site, version, kind)  # type: ignore[arg-type]


def check(env: Environment) -> None:
    """Refuse what the agent cannot be installed into, before anything is written."""
    if env.version < AGENT_MIN_PYTHON:
        raise InstallError(f"Python {env.version_text} at {env.python} is older than the "
                           f"agent supports ({'.'.join(map(str, AGENT_MIN_PYTHON))} or later)")
    if env.kind == "user":
        os.makedirs(env.site, exist_ok=True)
    if not os.path.isdir(env.site):
        raise InstallError(f"{env.site} does not exist")
    if not os.access(env.site, os.W_OK):
        raise InstallError(f"cannot write {env.site}: install as its owner, or into your own "
                           "site-packages with --user")


def installed(env: Environment) -> bool:
    return os.path.isfile(os.path.join(env.site, PTH_NAME))


def install(env: Environment, keep_record: bool = True) -> list[str]:
    """Put the hook and the agent into ``env``; the paths written.
    ``keep_record``: list it for ``agent status`` (the state folder)."""
    check(env)
    files = os.path.join(env.site, FILES_DIR)
    _remove_tree(files)  # an older copy: replaced whole
    shutil.copytree(agent_dir(), files, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copyfile(os.path.join(agent_dir(), "_bootstrap", HOOK_NAME),
                    os.path.join(env.site, HOOK_NAME))
    # Bytecode made now, by the environment's own Python: an interpreter start
    # never compiles the hook (a site-packages it cannot write, or no bytecode written).
    subprocess.run([env.python, "-E", "-m", "py_compile", os.path.join(env.site, HOOK_NAME)],
                   capture_output=True, timeout=60)
    with open(os.path.join(env.site, PTH_NAME), "w", encoding="utf-8") as f:
        f.write("import vram_steward_hook\n")  # last: no process sees half an install
    if keep_record:
        remember(env)
    return [os.path.join(env.site, n) for n in (PTH_NAME, HOOK_NAME, FILES_DIR)]


def uninstall(env: Environment, keep_record: bool = True) -> list[str]:
    """Remove what ``install`` put there (the .pth first: no new process
    starts the hook meanwhile); the paths removed."""
    removed = []
    for name in (PTH_NAME, HOOK_NAME):
        path = os.path.join(env.site, name)
        if os.path.lexists(path):
            os.unlink(path)
            removed.append(path)
    cache = os.path.join(env.site, "__pycache__")
    if os.path.isdir(cache):
        for name in os.listdir(cache):
            if name.startswith("vram_steward_hook."):
                os.unlink(os.path.join(cache, name))
                removed.append(os.path.join(cache, name))
        if not os.listdir(cache) and removed:
            os.rmdir(cache)
    files = os.path.join(env.site, FILES_DIR)
    if _remove_tree(files):
        removed.append(files)
    if keep_record:
        forget(env)
    return removed


def _remove_tree(path: str) -> bool:
    if os.path.islink(path):
        raise InstallError(f"{path} is a symlink: not removed")
    if os.path.isdir(path):
        shutil.rmtree(path)
        return True
    return False


# -- the record of installs (for ``agent status``) -----------------------------
def _record_path() -> str:
    from app.core.paths import private_state_dir

    return os.path.join(private_state_dir(), RECORD_NAME)


def recorded() -> list[Environment]:
    try:
        with open(_record_path(), encoding="utf-8") as f:
            items = json.load(f)
        return [Environment(i["python"], i["prefix"], i["site"], tuple(i["version"]), i["kind"])
                for i in items if isinstance(i, dict)]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _write_record(envs: list[Environment]) -> None:
    from app.agent.paths import replace_private_file

    replace_private_file(_record_path(), json.dumps([asdict(e) for e in envs],
                                                    indent=1).encode("utf-8"))


def remember(env: Environment) -> None:
    try:
        _write_record([e for e in recorded() if e.site != env.site] + [env])
    except OSError:
        pass  # the install stands; only ``status`` will not list it


def forget(env: Environment) -> None:
    try:
        _write_record([e for e in recorded() if e.site != env.site])
    except OSError:
        pass


def current_python() -> str | None:
    """The active environment's interpreter ($VIRTUAL_ENV, $CONDA_PREFIX), if any."""
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        path = os.environ.get(var)
        if path:
            try:
                return env_python(path)
            except InstallError:
                continue
    return None


__all__ = ["AGENT_MIN_PYTHON", "Environment", "InstallError", "check", "current_python",
           "env_python", "install", "installed", "probe", "recorded", "uninstall"]
