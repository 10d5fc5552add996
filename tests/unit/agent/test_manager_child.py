"""The model manager in a real child started through the bootstrap, over its socket."""

from __future__ import annotations

import json
import os
import subprocess

import psutil
import pytest

from app.agent import protocol
from tests.fakes.processes import quit_child

from .conftest import PYTHON, Client, agent_env, short_tmpdir, wait_entry, wait_line

CHILD = r'''
import json, sys
import torch
torch.set_num_threads(1)
torch.manual_seed(0)

class Big(torch.nn.Module):  # 4 x 4 MiB-ish layers x 4 = ~72 MiB of float32
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(2304, 2048) for _ in range(4))
        self.head = torch.nn.Linear(2048, 2304)
    def forward(self, x):
        for layer in self.layers:
            x = self.head(torch.relu(layer(x)))
        return x

class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 8)
    def forward(self, x):
        return self.l(x)

big, small = Big().eval(), Small().eval()
for p in list(big.parameters()) + list(small.parameters()):
    p.requires_grad_(False)
x = torch.randn(2, 2304)
ref = big(x).clone()
small(torch.ones(1, 8))
nbytes = sum(p.numel() * p.element_size() for p in big.parameters())
print("READY " + json.dumps({"param_bytes": nbytes}), flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "touch":
        big(x); small(torch.ones(1, 8))
        print("TOUCHED", flush=True)
    elif cmd == "check":
        print("EQUAL %s" % torch.equal(big(x), ref), flush=True)
    elif cmd == "quit":
        break
'''


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    rt = short_tmpdir()
    cache = str(tmp_path_factory.mktemp("cache"))
    proc = subprocess.Popen([PYTHON, "-c", CHILD], env=agent_env(rt, XDG_CACHE_HOME=cache),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=rt)
    info = json.loads(wait_line(proc, "READY ", timeout=120))
    entry = wait_entry(rt, proc.pid)
    client = Client(entry["address"], timeout=60)
    client.call("report")  # installs the hooks on both roots
    info_ = {"proc": proc}
    send(info_, "touch", "TOUCHED")  # one forward each: "seen in a forward"
    yield {"proc": proc, "client": client, "cache": cache, **info}
    client.close()
    quit_child(proc)


def send(child, cmd, prefix):
    child["proc"].stdin.write(cmd + "\n")
    child["proc"].stdin.flush()
    return wait_line(child["proc"], prefix)


def models_by_class(client):
    rep = client.call("report")["result"]
    return {m["class"].rsplit(".", 1)[-1]: m for m in rep["models"]}, rep


def test_disk_offload_lowers_rss_and_forward_reloads_bit_identical(child):
    c = child["client"]
    by, rep = models_by_class(c)
    big = by["Big"]
    assert (big["state"], big["offloaded_to"], big["pinned"], big["home_device"]) == (
        "resident", None, False, "cpu")
    assert big["auto_unload_blocker"] == "not on a GPU"
    assert rep["policy"] == {"idle_unload_s": None}
    proc = psutil.Process(child["proc"].pid)
    before = proc.memory_info().rss
    reply = c.call("unload", {"model": big["id"], "to": "disk"})
    ev = reply["result"]
    after = proc.memory_info().rss
    want = child["param_bytes"]
    assert want >= 64 << 20
    assert 0.7 * want <= before - after <= 1.3 * want, (before - after, want)
    assert ev["state"] == "offloaded" and ev["target"] == "disk" and ev["bytes_moved"] >= want
    folder = os.path.realpath(os.path.join(child["cache"], "vram-steward", "offload"))
    assert os.listdir(folder) == []  # nameless: nothing can outlive the process
    with open("/proc/%d/maps" % child["proc"].pid) as f:  # the child maps its files
        assert any(folder + "/" in line for line in f)
    by, rep = models_by_class(c)
    assert (by["Big"]["state"], by["Big"]["offloaded_to"], by["Big"]["device"]) == (
        "offloaded", "disk", "disk")
    assert send(child, "check", "EQUAL ") == "True"  # the forward reloads it
    by, rep = models_by_class(c)
    assert by["Big"]["state"] == "resident"
    assert [(e["action"], e["reason"]) for e in rep["events"]][-2:] == [
        ("unload", "manual"), ("reload", "forward")]


def test_protocol_errors_pin_policy_and_events(child):
    c = child["client"]
    assert c.call("subscribe", {"events": ["model_state"]})["result"] == {"events": ["model_state"]}
    by, _ = models_by_class(c)
    small = by["Small"]
    err = c.call("unload", {"model": "m999"})["error"]
    assert err["code"] == "not_found"
    err = c.call("unload", {"model": small["id"], "to": "gpu"})["error"]
    assert err["code"] == "bad_params"
    err = c.call("unload", {"model": small["id"], "to": "cpu"})["error"]
    assert err["code"] == "refused" and "already on the CPU" in err["message"]
    assert c.call("pin", {"model": small["id"], "pinned": True})["result"] == {
        "model": small["id"], "pinned": True}
    err = c.call("unload", {"model": small["id"], "to": "disk", "reason": "pressure"})["error"]
    assert err["code"] == "refused" and "pinned" in err["message"]
    by, _ = models_by_class(c)
    assert by["Small"]["pinned"] is True and by["Small"]["auto_unload_blocker"] == "pinned"
    assert c.call("set_policy", {"idle_unload_s": 600})["result"] == {"idle_unload_s": 600.0}
    assert c.call("report")["result"]["policy"] == {"idle_unload_s": 600.0}
    assert c.call("set_policy", {"idle_unload_s": None})["result"] == {"idle_unload_s": None}
    c.next_id += 1
    c.send_raw(protocol.encode(protocol.request(c.next_id, "unload",
                                                {"model": small["id"], "to": "disk"})))
    ev, pushed = None, None
    while ev is None or pushed is None:  # the reply and the pushed event, in either order
        msg = c.recv()
        if msg.get("id") == c.next_id:
            ev = msg["result"]
        elif msg.get("event") == "model_state" and msg["data"]["action"] == "unload":
            pushed = msg["data"]
    assert ev["ok"] and ev["reason"] == "manual"
    assert pushed == ev
    rel = c.call("reload", {"model": small["id"]})["result"]
    assert rel["action"] == "reload" and rel["state"] == "resident" and rel["reason"] == "manual"
    again = c.call("reload", {"model": small["id"]})["error"]  # resident: nothing to reload
    assert again == {"code": "refused", "message": "not offloaded (it is resident)"}
