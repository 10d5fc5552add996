"""Hand-made model servers and the snapshots holding them, for the UI's tests
and screenshots: an Ollama with two models (one idle, one generating) and its
runner, a ComfyUI, an AUTOMATIC1111 whose checkpoint is on the CPU, a llama.cpp
server (no unload) and a vLLM (a reservation)."""

from __future__ import annotations

from app.core.agents.types import ModelActionResult
from app.core.control.records import RELOAD, UNLOAD, ModelAction
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.servers.adapters.diffusion import A1111_UNLOAD, COMFY_UNLOAD
from app.core.servers.adapters.ollama import UNLOAD as OLLAMA_UNLOAD
from app.core.servers.adapters.reserving import LLAMACPP_NONE as LLAMA_NONE
from app.core.servers.adapters.reserving import VLLM_NO_SLEEP as VLLM_NONE
from app.core.servers.types import ModelServer, Reservation, ServerModel
from app.core.units import GiB, MiB

NOW = 1_700_000_000.0
OLLAMA, RUNNER, COMFY, A1111, LLAMA, VLLM = 4242, 4250, 5100, 5200, 5300, 5400



def ollama(busy_model: bool = True, **kw) -> ModelServer:
    qwen = ServerModel("qwen2.5:7b", "qwen2.5:7b", int(4.7 * GiB), int(5.1 * GiB), "size_vram",
                       gpu=0, expires_at=NOW + 180, idle_since=NOW - 245, busy=False,
                       unload=OLLAMA_UNLOAD)
    llama = ServerModel("llama3.2:3b", "llama3.2:3b", int(2.1 * GiB), int(2.4 * GiB),
                        "size_vram", gpu=0, expires_at=NOW + 290, busy=busy_model,
                        unload=OLLAMA_UNLOAD)
    fields = dict(kind="ollama", label="Ollama", pid=OLLAMA, pids=(OLLAMA, RUNNER), user="alice",
                  endpoint="http://127.0.0.1:11434", version="0.12.3", models=(qwen, llama),
                  busy=None, can_unload=True, unload_note=OLLAMA_UNLOAD, reachable=True,
                  reloads_on_use=True)
    fields.update(kw)
    return ModelServer(**fields)


def comfyui(**kw) -> ModelServer:
    busy = kw.get("busy", False)  # its queue: the one row's state too, as the directory sets it
    model = ServerModel("all", "models loaded by ComfyUI", int(6.2 * GiB),
                        figure="PyTorch allocated (ComfyUI's devices)", gpu=1,
                        idle_since=None if busy else NOW - 30, busy=busy, unload=COMFY_UNLOAD)
    fields = dict(kind="comfyui", label="ComfyUI", pid=COMFY, pids=(COMFY,), user="alice",
                  endpoint="http://127.0.0.1:8188", version="0.3.40", models=(model,),
                  busy=False, idle_since=NOW - 30, can_unload=True, unload_note=COMFY_UNLOAD,
                  reachable=True, reloads_on_use=True)
    fields.update(kw)
    return ModelServer(**fields)


def a1111(**kw) -> ModelServer:
    model = ServerModel("sd_xl_base_1.0.safetensors [31e35c80fc]",
                        "sd_xl_base_1.0.safetensors [31e35c80fc]", 180 * MiB,
                        figure="PyTorch allocated (/sdapi/v1/memory)", gpu=1, state="on cpu",
                        idle_since=NOW - 600, busy=False, unload=A1111_UNLOAD)
    fields = dict(kind="a1111", label="AUTOMATIC1111", pid=A1111, pids=(A1111,), user="bob",
                  endpoint="http://127.0.0.1:7860", models=(model,), busy=False,
                  idle_since=NOW - 600, can_unload=True, unload_note=A1111_UNLOAD,
                  reachable=True)
    fields.update(kw)
    return ModelServer(**fields)


def llamacpp(**kw) -> ModelServer:
    model = ServerModel("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
                        "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", None, gpu=0)
    fields = dict(kind="llamacpp", label="llama.cpp", pid=LLAMA, pids=(LLAMA,), user="alice",
                  endpoint="http://127.0.0.1:8080", version="b4500", models=(model,),
                  unload_note=LLAMA_NONE, reachable=True)
    fields.update(kw)
    return ModelServer(**fields)


def vllm(**kw) -> ModelServer:
    model = ServerModel("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", None,
                        figure="reserved pool", gpu=1)
    fields = dict(kind="vllm", label="vLLM", pid=VLLM, pids=(VLLM,), user="svc",
                  endpoint="http://127.0.0.1:8000", version="0.8.5", models=(model,),
                  unload_note=VLLM_NONE, reachable=True,
                  reservation=Reservation(0.9, "vLLM reserves 90 % of the GPU by design "
                                          "(--gpu-memory-utilization); its KV cache is the "
                                          "real fullness", 0.37))
    fields.update(kw)
    return ModelServer(**fields)


def proc(pid: int, mem: int | None, name: str, command: str, user: str = "alice"
         ) -> ProcessSample:
    return ProcessSample(pid, mem, sm_util=3.0, name=name, user=user, command=command,
                         create_time=NOW - 3600)


def server_procs() -> tuple[list[ProcessSample], list[ProcessSample]]:
    """The processes of every server above on GPU 0 and GPU 1."""
    gpu0 = [proc(OLLAMA, 310 * MiB, "ollama", "/usr/local/bin/ollama serve"),
            proc(RUNNER, int(6.9 * GiB), "ollama", "/usr/local/bin/ollama runner --model "
                 "/usr/share/ollama/.ollama/models/blobs/sha256-2bada8a74506 --ctx-size 8192 "
                 "--batch-size 512 --n-gpu-layers 29 --threads 8 --parallel 4 --port 39911"),
            proc(LLAMA, int(5.3 * GiB), "llama-server", "llama-server -m "
                 "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf --port 8080 -ngl 99")]
    gpu1 = [proc(COMFY, int(6.8 * GiB), "python3", "python3 main.py --listen 127.0.0.1"),
            proc(A1111, int(1.1 * GiB), "python3", "python3 launch.py --api", user="bob"),
            proc(VLLM, int(21.3 * GiB), "python3", "python3 -m vllm.entrypoints.openai."
                 "api_server --model Qwen/Qwen2.5-7B-Instruct --gpu-memory-utilization 0.9",
                 user="svc")]
    return gpu0, gpu1


def gpu(index: int, procs, total: int = 24 * GiB) -> GpuSample:
    return GpuSample(index=index, name=f"NVIDIA GeForce RTX 4090 #{index}", uuid=f"GPU-{index}",
                     memory_total=total,
                     memory_used=sum(p.gpu_memory or 0 for p in procs) + 400 * MiB,
                     memory_free=None, processes=tuple(procs))


def snapshot(servers=None, agents=None, t: float = 10.0) -> Snapshot:
    """Every server above on two GPUs (``servers``: those the snapshot names)."""
    gpu0, gpu1 = server_procs()
    if servers is None:
        servers = (ollama(), comfyui(), a1111(), llamacpp(), vllm())
    return Snapshot(NOW + t - 10.0, t, "nvml", "550.54", (gpu(0, gpu0), gpu(1, gpu1)),
                    agents=agents or {}, servers=tuple(servers))


def outcome(server: ModelServer, model_id: str, outcome_: str, note: str,
            freed: int | None = None, kind: str = UNLOAD) -> ModelAction:
    """A finished record of a server unload (or reload), as the controller keeps it."""
    ok = outcome_ in ("freed", "pending", "reloaded")
    action = ModelAction(kind, server.pid, model_id, server.model(model_id).name,
                         f"{server.display} ({server.pid})", nvml=False)
    action.result = ModelActionResult(server.pid, model_id, ok, error=None if ok else note,
                                      code=None if ok else outcome_.replace(" ", "_"),
                                      outcome=outcome_, note=note, freed_bytes=freed)
    action.done_at = 1.0
    return action


def running(server: ModelServer, model_id: str, kind: str = UNLOAD) -> ModelAction:
    return ModelAction(kind, server.pid, model_id, server.model(model_id).name,
                       f"{server.display} ({server.pid})", nvml=False)


__all__ = ["A1111", "COMFY", "LLAMA", "NOW", "OLLAMA", "RELOAD", "RUNNER", "UNLOAD", "VLLM",
           "a1111", "comfyui", "gpu", "llamacpp", "ollama", "outcome", "proc", "running",
           "server_procs", "snapshot", "vllm"]
