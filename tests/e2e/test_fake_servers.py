"""The fake model servers (tests/fakes/servers) behave as the real ones do.

Each fake starts as a real process with the real command line and process
name, its memory shows in NVML through the ABI fake of libnvidia-ml (read by
the real pynvml in a child process in live mode), and each quirk the
servers are known for is there: Ollama's runner child, its ``expires_at``
bookkeeping and its unload while generating; ComfyUI's deferred ``/free`` and
the memory of a custom node that ``/free`` never frees; A1111 moving weights
to RAM; the servers' refusals without credentials.  The official ``ollama``
Python client parses the Ollama fake's answers.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

from tests.fakes import nvml_abi
from tests.fakes.processes import end, read_line, wait_for
from tests.fakes.servers import comfyui, ollama
from tests.fakes.servers.common import base_python
from tests.fakes.servers.world import GPU, ServerWorld

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(nvml_abi.unavailable_reason() is not None,
                                reason=nvml_abi.unavailable_reason() or "")

LLAMA = 2_019_393_189  # llama3.2:3b on disk
QWEN = 4_683_075_271


@pytest.fixture(scope="module")
def world():
    with ServerWorld() as w:
        yield w


def call(url: str, data: object = None, headers: dict[str, str] | None = None,
         method: str | None = None, timeout: float = 30) -> tuple[int, object]:
    """(status, body as JSON, or text when it is not JSON)."""
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode()


# --------------------------------------------------------------- NVML view

READER = textwrap.dedent("""
    import json, sys
    import pynvml

    pynvml.nvmlInit()
    print("ready", flush=True)
    for _ in sys.stdin:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        procs = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
        print(json.dumps({"used": memory.used, "procs": procs}), flush=True)
""")


class Nvml:
    """A child process holding one NVML session on the world's GPU (live mode)."""

    def __init__(self, world: ServerWorld) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", READER], env=world.env_for_app(),
                                     cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert read_line(self.proc, 60).strip() == b"ready"

    def read(self) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"read\n")
        self.proc.stdin.flush()
        line = read_line(self.proc, 30)
        assert line, "the NVML reader did not answer"
        data = json.loads(line)
        return {"used": data["used"], "procs": {int(k): v for k, v in data["procs"].items()}}

    def until(self, what: str, check) -> dict:
        return wait_for(what, lambda: (lambda r: r if check(r) else None)(self.read()),
                        timeout=15, every=0.02)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        end(self.proc)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def nvml(world):
    reader = Nvml(world)
    yield reader
    reader.close()


def ollama_client(url: str):
    ollama_pkg = pytest.importorskip("ollama")
    return ollama_pkg.Client(host=url, trust_env=False)


def runner_of(handle) -> psutil.Process:
    kids = psutil.Process(handle.pid).children()
    assert len(kids) == 1, kids
    return kids[0]


def parse_go_time(text: str) -> datetime:
    """Go's RFC 3339 with nanoseconds, to microseconds."""
    head, _, rest = text.partition(".")
    if rest:
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits):]
        head = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    return datetime.fromisoformat(head.replace("Z", "+00:00"))


# ------------------------------------------------------------------ shapes


def test_every_fake_has_the_real_process_shape_and_nothing_is_left(world):
    with ServerWorld() as own:
        servers = {name: getattr(own, f"start_{name}")() for name in
                   ("ollama", "comfyui", "a1111", "lmstudio", "tgw", "hanging")}
        o = servers["ollama"]
        assert psutil.Process(o.pid).name() == "ollama"
        assert psutil.Process(o.pid).cmdline() == [str(o.home / "bin" / "ollama"), "serve"]
        assert psutil.Process(servers["lmstudio"].pid).name() == "llmster"
        assert psutil.Process(servers["lmstudio"].pid).cmdline() == [str(servers["lmstudio"].home / "llmster")]
        for name, script, flags in (("comfyui", "main.py", ["--listen", "127.0.0.1", "--port"]),
                                    ("hanging", "main.py", ["--listen", "127.0.0.1", "--port"]),
                                    ("a1111", "launch.py", ["--api", "--port"]),
                                    ("tgw", "server.py", ["--api", "--api-port"])):
            handle = servers[name]
            proc = psutil.Process(handle.pid)
            assert proc.cmdline()[:2 + len(flags)] == [base_python(), script, *flags]
            assert proc.cmdline()[2 + len(flags)] == str(handle.port)
            assert proc.name().startswith("python")
        assert Path(psutil.Process(servers["comfyui"].pid).cwd()).name == "ComfyUI"
        assert Path(psutil.Process(servers["a1111"].pid).cwd()).name == "stable-diffusion-webui"
        assert Path(psutil.Process(servers["tgw"].pid).cwd()).name == "text-generation-webui"

        # Ollama's model memory is in a runner child, named and shaped as the real one.
        assert call(o.url + "/api/generate", {"model": "llama3.2:3b"})[1]["done_reason"] == "load"
        runner = runner_of(o)
        cmd = runner.cmdline()
        assert runner.name() == "ollama"
        assert cmd[:4] == [str(o.home / "bin" / "ollama"), "runner", "--ollama-engine", "--model"]
        assert Path(cmd[4]).name.startswith("sha256-") and cmd[5] == "--port" and cmd[6].isdigit()
        assert psutil.Process(o.pid).children() == [runner]
        pids = [h.pid for h in servers.values()] + [runner.pid]
        scratch = own.dir
    assert not [pid for pid in pids if psutil.pid_exists(pid)
                and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not scratch.exists()


def test_the_hanging_server_accepts_and_never_answers(world):
    hang = world.start_hanging()
    with socket.create_connection(("127.0.0.1", hang.port), timeout=5) as s:
        s.sendall(b"GET /system_stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s.settimeout(0.5)
        with pytest.raises(socket.timeout):
            s.recv(1)
    world.stop(hang)


# ------------------------------------------------------------------ Ollama


def test_ollama_client_parses_the_fake_and_memory_follows_the_runner(world, nvml):
    o = world.start_ollama()
    client = ollama_client(o.url)
    base = nvml.read()

    listed = {m.model: m for m in client.list().models}
    assert set(listed) == {"llama3.2:3b", "qwen2.5:7b"}
    assert listed["llama3.2:3b"].size == LLAMA and listed["qwen2.5:7b"].size == QWEN
    assert listed["llama3.2:3b"].details.family == "llama"
    assert listed["qwen2.5:7b"].details.quantization_level == "Q4_K_M"

    loaded = client.generate(model="llama3.2:3b", prompt="")
    assert loaded.done and loaded.done_reason == "load"
    runner = runner_of(o)
    (model,) = client.ps().models
    assert model.name == model.model == "llama3.2:3b"
    assert model.size_vram == model.size > LLAMA and model.context_length == 4096
    assert model.digest == listed["llama3.2:3b"].digest
    remaining = model.expires_at - datetime.now(UTC)
    assert timedelta(minutes=4, seconds=50) < remaining <= timedelta(minutes=5)

    seen = nvml.until("the runner in NVML", lambda r: runner.pid in r["procs"])
    assert seen["procs"][runner.pid] == model.size_vram
    assert seen["used"] - base["used"] == model.size_vram
    assert o.pid not in seen["procs"]  # the server itself holds nothing

    unloaded = client.generate(model="llama3.2:3b", prompt="", keep_alive=0)
    assert unloaded.done and unloaded.done_reason == "unload"
    wait_for("the model to be unloaded", lambda: not client.ps().models, timeout=10, every=0.02)
    assert not runner.is_running() or runner.status() == psutil.STATUS_ZOMBIE
    back = nvml.until("the runner gone from NVML", lambda r: runner.pid not in r["procs"])
    assert back["used"] == base["used"]
    world.stop(o)


def test_ollama_expires_at_is_left_alone_while_a_request_runs(world):
    o = world.start_ollama(generate_s=1.0, env={"OLLAMA_KEEP_ALIVE": "7m"})
    client = ollama_client(o.url)

    # A model loaded by a request still running has the zero expires_at: ps
    # estimates now + the session duration, a moving figure.
    first = threading.Thread(target=lambda: client.generate(model="qwen2.5:7b", prompt="why"))
    first.start()
    wait_for("qwen loaded", lambda: client.ps().models, timeout=10, every=0.02)
    a = client.ps().models[0].expires_at
    time.sleep(0.2)
    b = client.ps().models[0].expires_at
    assert b - a >= timedelta(seconds=0.15)
    assert timedelta(minutes=6, seconds=50) < a - datetime.now(UTC) <= timedelta(minutes=7)
    first.join()

    # Idle: fixed at the end of the request + OLLAMA_KEEP_ALIVE.  The scheduler
    # takes the request's end a moment after the client has read its answer.
    def steady():
        before = client.ps().models[0].expires_at
        time.sleep(0.05)
        return before if client.ps().models[0].expires_at == before else None

    settled = wait_for("expires_at to settle", steady, timeout=10, every=0.01)
    time.sleep(0.2)
    assert client.ps().models[0].expires_at == settled

    # A new request with another keep_alive: expires_at stays as it was while it runs...
    second = threading.Thread(target=lambda: client.generate(model="qwen2.5:7b", prompt="again",
                                                              keep_alive="1h"))
    second.start()
    time.sleep(0.4)
    assert second.is_alive()
    assert client.ps().models[0].expires_at == settled
    second.join()
    # ...and is the request's end + its keep_alive once it is done.
    renewed = wait_for("expires_at renewed", lambda: (lambda e: e if e != settled else None)(
        client.ps().models[0].expires_at), timeout=10, every=0.01)
    after = renewed - datetime.now(UTC)
    assert timedelta(minutes=59, seconds=50) < after <= timedelta(hours=1)

    # keep_alive -1 is forever: Go's now + MaxInt64 ns, some 292 years ahead.
    client.generate(model="qwen2.5:7b", prompt="", keep_alive=-1)
    assert client.ps().models[0].expires_at.year >= 2300
    status, raw = call(o.url + "/api/ps")
    assert raw["models"][0]["expires_at"].startswith(str(client.ps().models[0].expires_at.year))
    # A duration string without a unit is refused as Go's time.ParseDuration refuses it.
    status, body = call(o.url + "/api/generate", {"model": "qwen2.5:7b", "keep_alive": "300"})
    assert status == 400 and body == {"error": 'time: missing unit in duration "300"'}
    status, body = call(o.url + "/api/generate", {"model": "nope:1b"})
    assert status == 404 and body == {"error": "model 'nope:1b' not found"}
    world.stop(o)


def test_ollama_unload_while_generating_happens_when_the_generation_ends(world):
    o = world.start_ollama(generate_s=1.2)
    client = ollama_client(o.url)
    client.generate(model="llama3.2:3b", prompt="", keep_alive="10m")
    runner = runner_of(o)
    chunks: list = []

    def generate():
        for part in client.generate(model="llama3.2:3b", prompt="tell me", stream=True):
            chunks.append(part)

    gen = threading.Thread(target=generate)
    gen.start()
    wait_for("the first token", lambda: chunks, timeout=10, every=0.01)
    busy = (world.procdir / str(runner.pid)).read_text()
    assert "sm=83" in busy  # the runner reports SM use while it generates
    asked = datetime.now(UTC)
    answer = client.generate(model="llama3.2:3b", prompt="", keep_alive=0)
    assert answer.done_reason == "unload"
    assert gen.is_alive()  # the answer came at once, the generation goes on
    (model,) = client.ps().models  # still loaded, expiring "now"
    assert abs(model.expires_at - asked) < timedelta(seconds=1)
    assert runner.is_running() and runner.status() != psutil.STATUS_ZOMBIE
    assert world.allocations()[runner.pid] == model.size_vram

    gen.join()
    assert chunks[-1].done and chunks[-1].done_reason == "stop" and len(chunks) > 3
    assert "".join(c.response for c in chunks).startswith("The sky is blue")
    wait_for("the unload after the generation", lambda: not client.ps().models, timeout=10, every=0.02)
    assert runner.pid not in world.allocations()
    world.stop(o)


def test_ollama_partial_offload_and_chat_routes(world):
    o = world.start_ollama(partial=0.62, models="qwen2.5:7b=4683075271")
    client = ollama_client(o.url)
    loaded = client.chat(model="qwen2.5:7b", messages=[])
    assert loaded.done_reason == "load" and loaded.message.role == "assistant"
    (model,) = client.ps().models
    assert model.size_vram == int(model.size * 0.62)
    assert world.allocations()[runner_of(o).pid] == model.size_vram
    reply = client.chat(model="qwen2.5:7b", messages=[{"role": "user", "content": "hi"}], stream=False)
    assert reply.done_reason == "stop" and reply.message.content
    assert client.chat(model="qwen2.5:7b", messages=[], keep_alive="0").done_reason == "unload"
    wait_for("the unload", lambda: not client.ps().models, timeout=10, every=0.02)

    # An idle model goes when its keep-alive runs out.
    client.generate(model="qwen2.5:7b", prompt="", keep_alive="300ms")
    runner = runner_of(o)
    wait_for("the keep-alive to run out", lambda: not client.ps().models, timeout=10, every=0.02)
    assert runner.pid not in world.allocations()

    # SIGTERM to the server alone: it stops its runners and their memory goes.
    client.generate(model="qwen2.5:7b", prompt="")
    runner = runner_of(o)
    assert runner.pid in world.allocations()
    o.proc.terminate()
    assert o.proc.wait(10) == 0
    wait_for("the runner to end", lambda: not runner.is_running() or runner.status() == psutil.STATUS_ZOMBIE,
             timeout=10, every=0.02)
    assert runner.pid not in world.allocations()
    world.stop(o)


# ----------------------------------------------------------------- ComfyUI

PROMPT = {"4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": comfyui.DEFAULT_CKPT}},
          "3": {"class_type": "KSampler", "inputs": {"model": ["4", 0], "steps": 20}},
          "9": {"class_type": "SaveImage", "inputs": {"images": ["8", 0]}}}


def test_comfyui_free_waits_for_the_running_prompt_and_keeps_node_memory(world, nvml):
    node, model, context = 734_003_219, 2_132_863_277, 417_335_091
    c = world.start_comfyui(render_s=1.5, node_bytes=node)
    seen = nvml.until("ComfyUI's CUDA context", lambda r: r["procs"].get(c.pid) == context)
    status, stats = call(c.url + "/system_stats")
    assert stats["system"]["argv"] == ["main.py", "--listen", "127.0.0.1", "--port", str(c.port)]
    (dev,) = stats["devices"]
    assert dev["vram_total"] == GPU.total and dev["torch_vram_total"] == 0
    assert dev["name"] == f"cuda:0 {GPU.name} : cudaMallocAsync"

    status, queued = call(c.url + "/prompt", {"prompt": PROMPT, "client_id": "steward"})
    assert status == 200 and queued["node_errors"] == {}
    wait_for("the prompt running", lambda: call(c.url + "/queue")[1]["queue_running"], timeout=5,
             every=0.01)
    running = call(c.url + "/queue")[1]["queue_running"][0]
    assert running[:3] == [queued["number"], queued["prompt_id"], PROMPT] and running[4] == ["9"]
    assert call(c.url + "/prompt")[1] == {"exec_info": {"queue_remaining": 1}}
    loaded = nvml.until("model and node memory", lambda r: r["procs"].get(c.pid) == context + model + node)
    assert loaded["used"] - seen["used"] == model + node

    t0 = time.monotonic()
    status, body = call(c.url + "/free", {"unload_models": True, "free_memory": True})
    assert status == 200 and body is None and time.monotonic() - t0 < 0.5  # flags only
    time.sleep(0.2)
    assert world.allocations()[c.pid] == context + model + node  # the prompt still runs

    wait_for("the prompt done", lambda: call(c.url + "/history")[1], timeout=10, every=0.02)
    after = nvml.until("the model freed", lambda r: r["procs"].get(c.pid) == context + node)
    assert after["used"] - seen["used"] == node  # the custom node's memory stays
    history = call(c.url + f"/history/{queued['prompt_id']}")[1][queued["prompt_id"]]
    assert history["status"]["status_str"] == "success" and history["status"]["completed"]
    dev = call(c.url + "/api/system_stats")[1]["devices"][0]
    assert dev["torch_vram_total"] == node and dev["torch_vram_free"] == 0

    status, error = call(c.url + "/prompt", {"client_id": "x"})
    assert status == 400 and error["error"]["type"] == "no_prompt"
    world.stop(c)
    assert c.pid not in world.allocations()


# ------------------------------------------------------------------- A1111


def test_a1111_auth_and_unload_moves_weights_to_ram(world):
    model = 2_132_863_274
    a = world.start_a1111(auth="steward:s3cret", render_s=0.6)
    good = {"Authorization": "Basic " + base64.b64encode(b"steward:s3cret").decode()}
    bad = {"Authorization": "Basic " + base64.b64encode(b"steward:nope").decode()}
    assert call(a.url + "/sdapi/v1/memory") == (401, {
        "error": "HTTPException", "detail": "Not authenticated", "body": "",
        "errors": "401: Not authenticated"})
    status, body = call(a.url + "/sdapi/v1/options", headers=bad)
    assert status == 401 and body["detail"] == "Incorrect username or password"

    flags = call(a.url + "/sdapi/v1/cmd-flags", headers=good)[1]
    assert flags["api"] and flags["api_auth"] == "steward:s3cret" and flags["port"] == a.port
    assert call(a.url + "/sdapi/v1/options", headers=good)[1]["sd_model_checkpoint"].startswith(
        "v1-5-pruned-emaonly.safetensors [")
    wait_for("the checkpoint on the GPU", lambda: world.allocations().get(a.pid, 0) > model,
             timeout=10, every=0.02)
    before = call(a.url + "/sdapi/v1/memory", headers=good)[1]
    gpu_before = world.allocations()[a.pid]

    assert call(a.url + "/sdapi/v1/unload-checkpoint", {}, headers=good) == (200, {})
    after = call(a.url + "/sdapi/v1/memory", headers=good)[1]
    assert abs(gpu_before - world.allocations()[a.pid] - model) < 2 << 20  # whole 2 MiB segments
    assert abs(after["ram"]["used"] - before["ram"]["used"] - model) < 16 << 20
    assert before["cuda"]["allocated"]["current"] - after["cuda"]["allocated"]["current"] == model
    assert after["cuda"]["system"]["free"] - before["cuda"]["system"]["free"] == (
        gpu_before - world.allocations()[a.pid])
    assert set(after["cuda"]) == {"system", "active", "allocated", "reserved", "inactive", "events"}
    status, error = call(a.url + "/sdapi/v1/txt2img", {"prompt": "a cat", "steps": 4}, headers=good)
    assert status == 500 and "two devices" in error["errors"]

    assert call(a.url + "/sdapi/v1/reload-checkpoint", {}, headers=good) == (200, {})
    assert world.allocations()[a.pid] == gpu_before
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(
        call(a.url + "/sdapi/v1/txt2img", {"prompt": "a cat", "steps": 10}, headers=good)[1]))
    t.start()
    state = wait_for("txt2img running", lambda: (lambda p: p if p["state"]["job"] else None)(
        call(a.url + "/sdapi/v1/progress", headers=good)[1]), timeout=5, every=0.02)
    assert state["state"]["job"] == "scripts_txt2img" and state["state"]["sampling_steps"] == 10
    assert set(state["state"]) == {"skipped", "interrupted", "stopping_generation", "job", "job_count",
                                   "job_timestamp", "job_no", "sampling_step", "sampling_steps"}
    t.join()
    assert len(result["images"]) == 1 and json.loads(result["info"])["steps"] == 10
    idle = call(a.url + "/sdapi/v1/progress", headers=good)[1]
    assert idle["progress"] == 0 and idle["state"]["job_count"] == 0
    world.stop(a)


# --------------------------------------------------- LM Studio and the TGW


def test_lmstudio_token_load_and_unload(world, nvml):
    lm = world.start_lmstudio(token="sk-lm-7Qe2xV9d")
    auth = {"Authorization": "Bearer sk-lm-7Qe2xV9d"}
    status, body = call(lm.url + "/api/v1/models")
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert call(lm.url + "/api/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401

    status, loaded = call(lm.url + "/api/v1/models/load",
                          {"model": "qwen/qwen3-8b", "context_length": 8192, "echo_load_config": True},
                          headers=auth)
    assert status == 200 and loaded["instance_id"] == "qwen/qwen3-8b" and loaded["status"] == "loaded"
    assert loaded["load_config"]["context_length"] == 8192
    held = nvml.until("llmster's model", lambda r: r["procs"].get(lm.pid, 0) > 5_027_783_488)
    models = {m["key"]: m for m in call(lm.url + "/api/v1/models", headers=auth)[1]["models"]}
    assert models["qwen/qwen3-8b"]["loaded_instances"][0]["config"]["context_length"] == 8192
    assert "architecture" not in models["text-embedding-nomic-embed-text-v1.5"]
    v0 = {m["id"]: m["state"] for m in call(lm.url + "/api/v0/models", headers=auth)[1]["data"]}
    assert v0["qwen/qwen3-8b"] == "loaded" and v0["google/gemma-3-4b"] == "not-loaded"

    assert call(lm.url + "/api/v1/models/unload", {"instance_id": "qwen/qwen3-8b"}, headers=auth) == (
        200, {"instance_id": "qwen/qwen3-8b"})
    gone = nvml.until("llmster's memory freed", lambda r: lm.pid not in r["procs"])
    assert held["used"] - gone["used"] == held["procs"][lm.pid]
    assert call(lm.url + "/api/v1/models/unload", {"instance_id": "qwen/qwen3-8b"}, headers=auth)[0] == 404
    world.stop(lm)


def test_tgw_keys_host_check_load_and_unload(world):
    t = world.start_tgw(api_key="k-5c2a", admin_key="adm-91f0")
    user, admin = {"Authorization": "Bearer k-5c2a"}, {"Authorization": "Bearer adm-91f0"}
    assert call(t.url + "/v1/internal/model/info") == (401, {"detail": "Unauthorized"})
    assert call(t.url + "/v1/internal/model/info", headers=user)[1] == {
        "model_name": "None", "lora_names": [], "loader": None}
    assert call(t.url + "/v1/internal/model/list", headers=user)[0] == 401  # the admin key's route
    names = call(t.url + "/v1/internal/model/list", headers=admin)[1]["model_names"]
    assert "Qwen2.5-7B-Instruct-Q4_K_M.gguf" in names
    assert call(t.url + "/v1/internal/health", headers={**user, "Host": "example.com"}) == (
        400, {"detail": "Invalid host header"})

    assert call(t.url + "/v1/internal/model/load", {"model_name": "Qwen2.5-7B-Instruct-Q4_K_M.gguf"},
                headers=admin) == (200, "OK")
    assert call(t.url + "/v1/internal/model/info", headers=user)[1]["loader"] == "llama.cpp"
    assert world.allocations()[t.pid] == 364_904_755 + 4_683_073_952
    assert call(t.url + "/v1/internal/model/load", {"model_name": "missing"}, headers=admin) == (
        500, {"detail": "Failed to load the model."})
    assert call(t.url + "/v1/internal/model/unload", {}, headers=admin) == (200, "OK")
    assert t.pid not in world.allocations()
    assert call(t.url + "/v1/internal/model/info", headers=user)[1]["model_name"] == "None"
    world.stop(t)


def test_ollama_helpers_format_like_go():
    assert ollama.go_time(1_700_000_000_123_456_000, utc=True) == "2023-11-14T22:13:20.123456Z"
    assert ollama.go_time(1_700_000_000_000_000_000, utc=True) == "2023-11-14T22:13:20Z"
    assert ollama.parse_keep_alive("5m") == 300 * ollama.SECOND
    assert ollama.parse_keep_alive(0) == 0 and ollama.parse_keep_alive("0") == 0
    assert ollama.parse_keep_alive(-1) == ollama.FOREVER == ollama.parse_keep_alive("-1m")
    assert ollama.parse_keep_alive(1.5) == 1_500_000_000
    assert ollama.parse_go_duration("1h2m3.5s") == 3723 * ollama.SECOND + 500_000_000
    for bad in ("300", "5d", ""):
        with pytest.raises(ValueError):
            ollama.parse_go_duration(bad)
    assert parse_go_time("2023-11-14T22:13:20.123456789+02:00").microsecond == 123456
