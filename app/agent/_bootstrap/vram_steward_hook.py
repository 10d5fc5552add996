"""VRAM Steward's hook in an environment (``vram-steward agent install``).

A ``.pth`` file beside this module imports it when any Python of the
environment starts.  At that moment it only adds a watcher to
``sys.meta_path``: no thread, no socket, no file.  When the process imports
``torch``, the watcher lets torch load as usual and then starts the agent
(the copy installed beside this module), so processes that never use
torch (pip, linters, setup scripts) carry nothing else.

``VRAM_STEWARD_AGENT=0`` turns it off for one process; under ``run``
(``VRAM_STEWARD_AGENT=1``) the launcher's bootstrap loads the agent and this
hook stands aside.  Any error here is swallowed: the host's imports never
fail because of it.
"""

import os
import sys

# Nothing beyond os and sys (loaded already) at interpreter start: typing and
# even __future__ cost what this hook may not.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: Where the installed copy of the agent lies, beside this module.
AGENT_DIR = "vram_steward_agent_files"


class _BeforeTorch:
    """Finds nothing itself: the first ``import torch`` starts the agent, which
    then watches torch's import as it does under ``run``, and torch loads as
    usual."""

    def find_spec(self, name: str, path: "Any" = None, target: "Any" = None) -> "Any":
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)  # once
        except ValueError:
            pass
        _start()
        return None


def _start() -> None:
    try:
        agent: Any = sys.modules.get("vram_steward_agent")
        if agent is None:
            import importlib.util

            here = os.path.dirname(os.path.abspath(__file__))
            entry = os.path.join(here, AGENT_DIR, "_bootstrap", "vram_steward_agent.py")
            spec = importlib.util.spec_from_file_location("vram_steward_agent", entry)
            if spec is None or spec.loader is None:
                return
            agent = importlib.util.module_from_spec(spec)
            sys.modules["vram_steward_agent"] = agent
            try:
                spec.loader.exec_module(agent)
            except BaseException:
                sys.modules.pop("vram_steward_agent", None)
                raise
        agent.start()
    except Exception:
        pass  # the agent's own start logs what went wrong; the host goes on


def _install() -> None:
    if os.environ.get("VRAM_STEWARD_AGENT") in ("0", "1"):
        return  # off for this process, or ``run`` loads the agent itself
    if "torch" in sys.modules:
        _start()
        return
    if not any(isinstance(f, _BeforeTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeTorch())


try:
    _install()
except Exception:
    pass
