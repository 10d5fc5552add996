"""End to end: a real child under ``main.py run`` (CPU torch) that looks like
ComfyUI (it imports a stub ``comfy.model_management``).  Its agent names the
server in the report and every model's blocker, refuses every unload (manual,
forced, pressure) with ``managed`` and leaves the weights untouched, and still
frees the allocator cache.
"""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from app.agent import protocol
from app.core.agents import client as agent_client
from app.core.agents.connection import AgentConnection, AgentError
from app.core.agents.types import AgentEntry, AgentReport
from tests.e2e.test_run_agent import BOOTSTRAP, Child, children, env, runtime  # noqa: F401
from tests.fakes.processes import agent_entry

pytestmark = [
    pytest.mark.skipif(not (BOOTSTRAP / "sitecustomize.py").exists(),
                       reason="the agent's bootstrap (app/agent/_bootstrap) is not there yet"),
    pytest.mark.skipif(os.name != "posix", reason="POSIX: AF_UNIX agents"),
]

REFUSAL = ("managed by ComfyUI: unloading it behind its back would break its bookkeeping; "
           "use its unload")

# The stub server: a package on the script's own sys.path, imported after the agent
# started (as ComfyUI's own modules are).
CHILD = textwrap.dedent("""
    import hashlib, json, os, sys, time
    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    os.makedirs(os.path.join(here, "server", "comfy"), exist_ok=True)
    open(os.path.join(here, "server", "comfy", "__init__.py"), "w").close()
    with open(os.path.join(here, "server", "comfy", "model_management.py"), "w") as f:
        f.write("current_loaded_models = []\\n")
    sys.path.insert(0, os.path.join(here, "server"))
    import comfy.model_management

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 8)).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    comfy.model_management.current_loaded_models.append(model)
    x = torch.randn(4, 32)

    def state():
        with torch.no_grad():
            out = model(x)
        weights = b"".join(p.numpy().tobytes() for p in model.parameters())
        return {"devices": sorted({str(p.device) for p in model.parameters()}),
                "weights": hashlib.sha256(weights).hexdigest(),
                "ptrs": [p.data_ptr() for p in model.parameters()],
                "out": hashlib.sha256(out.numpy().tobytes()).hexdigest()}

    print(json.dumps({"pid": os.getpid(), **state()}), flush=True)
    stop, ask = sys.argv[1], sys.argv[1] + ".ask"
    deadline = time.monotonic() + 120
    while not os.path.exists(stop) and time.monotonic() < deadline:
        if os.path.exists(ask):
            os.unlink(ask)
            print(json.dumps(state()), flush=True)
        time.sleep(0.02)
""")


def raw_report(entry: AgentEntry, timeout: float = 30.0) -> dict:
    """The report, once it lists the child's model."""
    deadline = time.monotonic() + timeout
    data: dict = {}
    while time.monotonic() < deadline:
        with AgentConnection(entry, 5.0) as conn:
            data = conn.call("report", {"models": True}, 10.0)
        if data.get("models"):
            return data
        time.sleep(0.2)
    raise AssertionError(f"no model reported: {data}")


def test_a_comfyui_process_keeps_its_models(tmp_path, env, runtime, children):
    child = Child(tmp_path, env, CHILD)
    children.append(child)
    first = child.line()
    pid = first["pid"]
    entry = agent_entry(runtime, pid)

    data = raw_report(entry)
    assert data["managed_by"] == "ComfyUI"
    [model] = [m for m in data["models"] if m["class"].rsplit(".", 1)[-1] == "Sequential"]
    assert model["unload_blocker"] == model["auto_unload_blocker"] == "managed by ComfyUI"
    report = AgentReport.from_json(data)
    assert report is not None and report.managed_by == "ComfyUI"
    [info] = [m for m in report.models if m.id == model["id"]]
    assert info.blocker == "managed by ComfyUI"

    # every unload is refused, forced or not, whatever the reason
    for kwargs in ({}, {"force": True}, {"to": "disk", "force": True}, {"reason": "pressure"}):
        result = agent_client.unload(entry, model["id"], timeout_s=30, **kwargs)
        assert not result.ok, (kwargs, result)
        assert (result.code, result.error) == (protocol.MANAGED, REFUSAL), kwargs
    with AgentConnection(entry, 5.0) as conn, pytest.raises(AgentError) as err:
        conn.call("unload", {"model": model["id"], "to": "cpu"}, 10.0)
    assert (err.value.code, err.value.message) == ("managed", REFUSAL)

    # the weights never moved: same device, same storages, same values, same outputs
    Path(f"{child.stop_file}.ask").write_text("")
    assert child.line() == {k: first[k] for k in ("devices", "weights", "ptrs", "out")}
    after = raw_report(entry)
    [again] = [m for m in after["models"] if m["id"] == model["id"]]
    assert (again["state"], again["device"]) == ("resident", "cpu")
    assert not [e for e in after["events"] if e["action"] == "unload"]

    # the allocator cache is not the server's books: freeing it stays allowed
    freed = agent_client.free_cache(entry, timeout_s=30)
    assert freed.ok, freed
    assert agent_client.collect_garbage(entry, timeout_s=30)["ok"]
    # and a reload of a model never unloaded is refused as in any process: nothing to reload
    reloaded = agent_client.reload(entry, model["id"], timeout_s=30)
    assert (reloaded.ok, reloaded.code, reloaded.error) == (
        False, protocol.REFUSED, "not offloaded (it is resident)")
    assert child.stop() == 0
