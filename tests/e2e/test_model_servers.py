"""Model servers end to end: the fake servers (``tests.fakes.servers``) run as
real processes on the ABI fake of libnvidia-ml in live mode, and VRAM
Steward's own commands and core, in child processes, find them, read what
they hold, and unload through their APIs with outcomes measured from NVML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fakes import nvml_abi
from tests.fakes.servers import comfyui
from tests.fakes.servers.world import ServerWorld

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(nvml_abi.unavailable_reason() is not None,
                                reason=nvml_abi.unavailable_reason() or "")

PROMPT = {"4": {"class_type": "CheckpointLoaderSimple",
                "inputs": {"ckpt_name": comfyui.DEFAULT_CKPT}},
          "3": {"class_type": "KSampler", "inputs": {"model": ["4", 0], "steps": 20}},
          "9": {"class_type": "SaveImage", "inputs": {"images": ["8", 0]}}}
TGW_MODEL = "Qwen2.5-7B-Instruct-Q4_K_M.gguf"


def call(url: str, data: object = None, headers: dict[str, str] | None = None,
         timeout: float = 60) -> object:
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, data=body, headers={
        "Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    try:
        return json.loads(raw or b"null")
    except ValueError:
        return raw.decode()


def in_background(url: str, data: object) -> threading.Thread:
    """A request left running (a render, a generation) until its server is stopped."""
    def run() -> None:
        try:
            call(url, data, timeout=120)
        except (OSError, urllib.error.URLError):
            pass  # the server was stopped under it

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


class App:
    """VRAM Steward's commands as a user runs them, seeing the world's GPU."""

    def __init__(self, world: ServerWorld, keys: list[dict] | None = None) -> None:
        self.state = tempfile.mkdtemp(prefix="vst-state-")
        os.chmod(self.state, 0o700)
        if keys is not None:
            path = os.path.join(self.state, "server-keys.json")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(keys, f)
        self.env = world.env_for_app()
        self.env.update(VRAM_STEWARD_STATE_DIR=self.state, PYTHONDONTWRITEBYTECODE="1")

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "app", *args], env=self.env, cwd=REPO,
                              capture_output=True, text=True, timeout=timeout)

    def json(self, *args: str) -> object:
        done = self.run(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def servers(self) -> dict[int, dict]:
        return {s["pid"]: s for s in self.json("servers")}  # type: ignore[union-attr]

    def unload(self, pid: int, model: str, *extra: str) -> tuple[int, dict]:
        done = self.run("unload", "--pid", str(pid), "--model", model, "--json", *extra)
        return done.returncode, json.loads(done.stdout)


@pytest.fixture
def world():
    with ServerWorld() as w:  # one per test: nothing a test leaves running reaches the next
        yield w


def drop(world: ServerWorld, before: dict[int, int], pids: list[int]) -> int:
    after = world.allocations()
    return sum(before.get(p, 0) - after.get(p, 0) for p in pids)


def test_every_server_is_found_with_what_it_holds_and_each_unload_is_measured(world):
    ollama = world.start_ollama()
    comfy = world.start_comfyui(render_s=0.2, node_bytes=734_003_219)
    a1111 = world.start_a1111()
    lmstudio = world.start_lmstudio(token="sk-lm-7Qe2xV9d")
    tgw = world.start_tgw(api_key="k-5c2a", admin_key="adm-91f0")
    keys = [{"kind": "lmstudio", "bearer": "sk-lm-7Qe2xV9d"},
            {"kind": "tgw", "bearer": "k-5c2a", "admin": "adm-91f0"}]
    assert call(ollama.url + "/api/generate", {"model": "qwen2.5:7b"})["done_reason"] == "load"
    call(comfy.url + "/prompt", {"prompt": PROMPT, "client_id": "steward"})
    call(lmstudio.url + "/api/v1/models/load", {"model": "qwen/qwen3-8b"},
         {"Authorization": "Bearer sk-lm-7Qe2xV9d"})
    call(tgw.url + "/v1/internal/model/load", {"model_name": TGW_MODEL},
         {"Authorization": "Bearer adm-91f0"})
    deadline = time.monotonic() + 20
    while call(comfy.url + "/prompt")["exec_info"]["queue_remaining"] and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    held = world.allocations()
    runner = next(p for p in held if p not in (comfy.pid, a1111.pid, lmstudio.pid, tgw.pid))

    app = App(world, keys)
    found = app.servers()
    assert {pid: s["kind"] for pid, s in found.items()} == {
        ollama.pid: "ollama", comfy.pid: "comfyui", a1111.pid: "a1111",
        lmstudio.pid: "lmstudio", tgw.pid: "tgw"}
    o = found[ollama.pid]
    assert o["pids"] == [ollama.pid, runner] and o["endpoint"] == ollama.url
    assert o["version"] and o["reachable"] and o["can_unload"] and o["error"] is None
    assert o["gpu_memory"] == held[runner]  # the runner's memory is the server's
    (qwen,) = o["models"]
    size_vram = call(ollama.url + "/api/ps")["models"][0]["size_vram"]
    assert (qwen["id"], qwen["vram_bytes"], qwen["gpu"]) == ("qwen2.5:7b", size_vram, 0)
    assert qwen["pid"] == runner  # its runner, found from the Modelfile's FROM and its command
    assert qwen["expires_at"] > time.time() and qwen["unload"].startswith("Ollama unloads")
    for pid in (comfy.pid, a1111.pid, lmstudio.pid, tgw.pid):
        assert found[pid]["gpu_memory"] == held[pid], found[pid]
        assert found[pid]["models"], found[pid]
    assert found[a1111.pid]["models"][0]["vram_bytes"] > 2_000_000_000
    assert found[lmstudio.pid]["models"][0]["vram_bytes"] is None  # it reports none: n/a
    assert found[lmstudio.pid]["models"][0]["size_bytes"] == 5_027_783_488

    rows = [r for r in app.json("models") if r["kind"] == "server"]
    assert {(r["server"], r["pid"], r["id"]) for r in rows} == {
        ("ollama", ollama.pid, "qwen2.5:7b"), ("comfyui", comfy.pid, "all"),
        ("a1111", a1111.pid, found[a1111.pid]["models"][0]["id"]),
        ("lmstudio", lmstudio.pid, "qwen/qwen3-8b"), ("tgw", tgw.pid, TGW_MODEL)}

    # Each unload through the server's own API, its outcome from NVML.
    before = world.allocations()
    rc, done = app.unload(runner, "qwen2.5:7b")  # the runner's pid names the server too
    assert rc == 0 and done["outcome"] == "freed", done
    assert done["freed_bytes"] == drop(world, before, [runner]) == before[runner]

    before = world.allocations()
    rc, done = app.unload(comfy.pid, "all")
    assert rc == 0 and done["outcome"] == "freed", done
    assert done["freed_bytes"] == drop(world, before, [comfy.pid]) > 2_000_000_000
    assert "still held by its processes" in done["note"]  # its CUDA context, the custom node's
    rc, done = app.unload(comfy.pid, "all", "--timeout", "3")  # only the node's memory is left
    assert rc == 1 and done["outcome"] == "not freed", done
    assert "held outside what the server manages" in done["error"]

    model = found[a1111.pid]["models"][0]["id"]
    before = world.allocations()
    rc, done = app.unload(a1111.pid, model)
    assert rc == 0 and done["outcome"] == "freed", done
    assert done["freed_bytes"] == drop(world, before, [a1111.pid])
    ram = call(a1111.url + "/sdapi/v1/memory")["ram"]["used"]
    assert app.servers()[a1111.pid]["models"][0]["state"] == "on cpu"  # seen from its figures
    reload = app.run("reload", "--pid", str(a1111.pid), "--model", model, "--json")
    assert reload.returncode == 0, reload.stdout + reload.stderr
    assert call(a1111.url + "/sdapi/v1/memory")["ram"]["used"] < ram  # back from host RAM
    assert app.servers()[a1111.pid]["models"][0]["state"] == "loaded"

    for server, model in ((lmstudio, "qwen/qwen3-8b"), (tgw, TGW_MODEL)):
        before = world.allocations()
        rc, done = app.unload(server.pid, model)
        assert rc == 0 and done["outcome"] == "freed", done
        assert done["freed_bytes"] == drop(world, before, [server.pid]) > 1_000_000_000
    for handle in (ollama, comfy, a1111, lmstudio, tgw):
        world.stop(handle)


def test_busy_servers_a1111_refused_comfyui_pending(world):
    a1111 = world.start_a1111(render_s=20)
    comfy = world.start_comfyui(render_s=6.0)
    app = App(world)
    model = app.servers()[a1111.pid]["models"][0]["id"]
    in_background(a1111.url + "/sdapi/v1/txt2img", {"prompt": "a cat", "steps": 20})
    time.sleep(0.5)
    before = world.allocations()[a1111.pid]
    rc, done = app.unload(a1111.pid, model)
    assert rc == 1 and done["outcome"] == "refused" and "generating now" in done["error"]
    assert world.allocations()[a1111.pid] == before  # nothing was sent

    call(comfy.url + "/prompt", {"prompt": PROMPT, "client_id": "steward"})
    time.sleep(0.5)  # rendering, its checkpoint loaded
    assert world.allocations()[comfy.pid] > 2_000_000_000
    rc, done = app.unload(comfy.pid, "all", "--timeout", "2")
    assert rc == 0 and done["outcome"] == "pending", done
    assert "frees after the prompt it is running" in done["note"]
    deadline = time.monotonic() + 30  # ComfyUI applies its /free once that prompt is done
    while world.allocations().get(comfy.pid, 0) > 500_000_000:
        assert time.monotonic() < deadline, "ComfyUI never freed after its prompt"
        time.sleep(0.2)
    world.stop(a1111)
    world.stop(comfy)


def test_a_hanging_server_costs_one_timeout_and_says_so(world):
    hang = world.start_hanging()
    started = time.monotonic()
    found = App(world).servers()
    assert time.monotonic() - started < 15
    server = found[hang.pid]
    assert server["kind"] == "comfyui" and not server["reachable"]
    assert server["error"] == "no answer in 1 s" and server["models"] == []
    world.stop(hang)


def test_api_keys_missing_wrong_and_right(world):
    a1111 = world.start_a1111(auth="steward:s3cret")
    none = App(world).servers()[a1111.pid]
    assert "401" in none["error"] and "needs an API key" in none["error"]
    wrong = App(world, [{"kind": "a1111", "basic": "steward:nope"}]).servers()[a1111.pid]
    assert "the API key kept for it was refused" in wrong["error"]
    right = App(world, [{"kind": "a1111", "port": a1111.port, "basic": "steward:s3cret"}])
    assert right.servers()[a1111.pid]["models"]
    loose = App(world)
    path = os.path.join(loose.state, "server-keys.json")
    with open(path, "w") as f:
        json.dump([{"kind": "a1111", "basic": "steward:s3cret"}], f)
    os.chmod(path, 0o644)
    done = loose.run("servers", "--json")
    assert "server keys refused" in done.stderr and "open to group/others" in done.stderr
    world.stop(a1111)


def test_another_users_ollama_is_found_and_controlled_through_its_api(world):
    from tests.fakes.neighbour import NAME, neighbour

    uid, gid = neighbour()
    ollama = world.start_ollama(user=(uid, gid))
    call(ollama.url + "/api/generate", {"model": "llama3.2:3b"})
    app = App(world)
    server = app.servers()[ollama.pid]
    assert server["user"] == NAME and len(server["pids"]) == 2
    runner = server["pids"][1]
    assert server["models"][0]["gpu"] == 0
    rc, done = app.unload(ollama.pid, "llama3.2:3b")
    assert rc == 0 and done["outcome"] == "freed" and runner not in world.allocations()
    world.stop(ollama)


POLICY = textwrap.dedent("""
    import json, sys, time
    from app.core.monitor.collector import Collector
    from app.core.monitor.nvml_source import NvmlSource
    from app.core.policies.pressure import PolicyRunner, PressurePolicyConfig
    from app.core.servers.directory import ServerDirectory
    from app.core.servers.routing import WithServers
    from tests.fakes.directories import EmptyDirectory

    servers = ServerDirectory(scan_s=0.5, probe_s=0.25, keys=[])
    agents = WithServers(EmptyDirectory(), servers)
    # No minimum idle time: the first look decides (a crossing is acted on once).
    runner = PolicyRunner(agents, PressurePolicyConfig(min_idle_s=0.0, min_interval_s=1.0))
    collector = Collector(NvmlSource(), agents=agents, pressure_policy=runner, doctor=False)
    collector.open()
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        snapshot = collector.collect()
        done = [d for d in runner.decisions() if d.kind == "unload" and d.done]
        if done:
            print(json.dumps([d.to_json() for d in runner.decisions()]), flush=True)
            break
        time.sleep(0.25)
    collector.close()
""")


def test_the_pressure_policy_unloads_an_idle_ollama_model_and_never_a_busy_one(world):
    ollama = world.start_ollama(generate_s=40,
                                models="llama3.1:8b=10123456789,qwen2.5:14b=10234567891")
    call(ollama.url + "/api/generate", {"model": "llama3.1:8b"})  # loaded, then idle
    in_background(ollama.url + "/api/generate",
                  {"model": "qwen2.5:14b", "prompt": "why is the sky blue", "stream": False})
    deadline = time.monotonic() + 20
    while len(call(ollama.url + "/api/ps")["models"]) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(0.5)  # generating: its runner busy on the SMs
    app = App(world)
    done = subprocess.run([sys.executable, "-c", POLICY], env=app.env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    decisions = json.loads(done.stdout)
    unload = next(d for d in decisions if d["kind"] == "unload")
    assert [(a["pid"], a["model"]) for a in unload["actions"]] == [(ollama.pid, "llama3.1:8b")]
    assert (ollama.pid, "qwen2.5:14b", "generating now") in {
        (s["pid"], s["model"], s["why"]) for s in unload["skipped"]}
    (result,) = unload["results"]
    assert result["ok"] and result["outcome"] == "freed" and result["freed_bytes"] > 10**10
    loaded = [m["name"] for m in call(ollama.url + "/api/ps")["models"]]
    assert loaded == ["qwen2.5:14b"]  # the busy one is still there, still generating
    world.stop(ollama)


FREE_ALL = textwrap.dedent("""
    import json, time
    from app.core.control.controller import AppController
    from app.core.control.requests import Unload
    from app.core.monitor.collector import Collector
    from app.core.monitor.nvml_source import NvmlSource
    from app.core.servers.directory import ServerDirectory
    from app.core.servers.routing import WithServers
    from app.ui.agents.server_texts import freeable
    from tests.fakes.directories import EmptyDirectory

    agents = WithServers(EmptyDirectory(), ServerDirectory(scan_s=0.5, probe_s=0.25))
    collector = Collector(NvmlSource(), agents=agents, pressure_policy=False, doctor=False)
    controller = AppController(agents)
    collector.open()
    snapshot = collector.collect()
    while not agents.servers.ready or not all(s.models for s in snapshot.servers):
        time.sleep(0.1)
        snapshot = collector.collect()
    controller.on_snapshot(snapshot)
    # What the tray's "Free all" submits for the servers (app.ui.shell.desktop.free_all).
    actions = [controller.submit(Unload(s.pid, m.id, reason="manual", name=m.name))
               for s, m in freeable(snapshot)]
    deadline = time.monotonic() + 90
    while not all(a.done for a in actions) and time.monotonic() < deadline:
        time.sleep(0.25)
        controller.on_snapshot(collector.collect())
    print(json.dumps([{"pid": a.pid, "model": a.model, "label": a.label,
                       **(a.result.to_json() if a.result else {})} for a in actions]))
    controller.close()
    collector.close()
""")


def test_free_all_reaches_every_server_whose_unload_comes_back_by_itself(world):
    ollama = world.start_ollama()
    comfy = world.start_comfyui(render_s=0.2)
    a1111 = world.start_a1111()
    lmstudio = world.start_lmstudio()
    tgw = world.start_tgw()
    call(ollama.url + "/api/generate", {"model": "llama3.2:3b"})
    call(comfy.url + "/prompt", {"prompt": PROMPT, "client_id": "steward"})
    call(lmstudio.url + "/api/v1/models/load", {"model": "qwen/qwen3-8b"})
    call(tgw.url + "/v1/internal/model/load", {"model_name": TGW_MODEL})
    time.sleep(1.0)
    before = world.allocations()
    parent = {p: psutil_parent(p) for p in before}  # Ollama's runner: its memory is Ollama's
    app = App(world)
    done = subprocess.run([sys.executable, "-c", FREE_ALL], env=app.env, cwd=REPO,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    results = {r["pid"]: r for r in json.loads(done.stdout)}
    # AUTOMATIC1111 and text-generation-webui do not load again by themselves: by hand only.
    assert set(results) == {ollama.pid, comfy.pid, lmstudio.pid}
    after = world.allocations()
    for pid, r in results.items():
        assert r["ok"] and r["outcome"] == "freed", r
        pids = [p for p in before if pid in (p, parent[p])]
        assert r["freed_bytes"] == sum(before[p] - after.get(p, 0) for p in pids), r
    assert after[a1111.pid] == before[a1111.pid] and after[tgw.pid] == before[tgw.pid]
    for handle in (ollama, comfy, a1111, lmstudio, tgw):
        world.stop(handle)


def psutil_parent(pid: int) -> int | None:
    import psutil

    try:
        return psutil.Process(pid).ppid()
    except psutil.NoSuchProcess:
        return None


def test_a_hosts_serve_shows_its_servers_and_unloads_through_them(world):
    from tests.fakes.processes import end, serve_url

    ollama = world.start_ollama()
    call(ollama.url + "/api/generate", {"model": "llama3.2:3b"})
    app = App(world)
    serve = subprocess.Popen([sys.executable, "-m", "app", "serve", "--listen", "127.0.0.1:0",
                              "--no-history", "--period", "0.25"], env=app.env, cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        url = serve_url(serve, lambda: "")
        deadline = time.monotonic() + 30
        while True:
            listed = {s["pid"]: s for s in app.json("servers", "--host", url)}
            if listed.get(ollama.pid, {}).get("models"):
                break
            assert time.monotonic() < deadline, listed
            time.sleep(0.5)
        assert listed[ollama.pid]["models"][0]["id"] == "llama3.2:3b"
        token = os.path.join(app.state, "serve-tokens")
        rc, done = app.unload(ollama.pid, "llama3.2:3b", "--host", url, "--token-file", token)
        assert rc == 0 and done["outcome"] == "freed", done
        assert done["freed_bytes"] > 2_000_000_000
    finally:
        end(serve)
        world.stop(ollama)
