"""Image servers: ComfyUI and AUTOMATIC1111 / Forge.

Both run PyTorch in the server's own process and report the caching
allocator through their APIs; neither names per-model bytes, so what they
hold is one row: the checkpoint(s) loaded, with the allocator's figure.
"""

from __future__ import annotations

from app.core.servers.adapters.base import Ack, Adapter, Probe, items, mapping, number, text
from app.core.servers.http import LocalHttp
from app.core.servers.recognise import Found
from app.core.servers.types import ServerModel

COMFY_UNLOAD = ("ComfyUI unloads every model after the prompt it is running (POST /free); a "
                "queued prompt loads what it needs again; memory a custom node holds outside "
                "its model manager stays")
A1111_UNLOAD = ("AUTOMATIC1111 moves the checkpoint to host RAM (VRAM freed, RAM grows by "
                "as much); Reload puts it back")
FORGE_UNLOAD = "Forge unloads every model through its memory manager"
ON_CPU_BELOW = 512 * 1024 * 1024


class ComfyUI(Adapter):
    kind = "comfyui"
    deadline_s = 30.0
    defers_while_busy = True  # /free is applied after the current prompt
    reloads_on_use = True  # the next prompt loads what it needs

    def probe(self, found: Found, http: LocalHttp) -> Probe:
        stats = mapping(http.get("/system_stats"))
        system = mapping(stats.get("system"))
        queue = mapping(http.get("/queue"))
        busy = bool(items(queue.get("queue_running")) or items(queue.get("queue_pending")))
        held = None
        for dev in items(stats.get("devices")):
            dev = mapping(dev)
            total, free = number(dev.get("torch_vram_total")), number(dev.get("torch_vram_free"))
            if dev.get("type") == "cuda" and total is not None and free is not None:
                held = (held or 0) + max(0, total - free)
        models = () if held == 0 else (ServerModel(
            id="all", name="models loaded by ComfyUI", vram_bytes=held,
            figure="PyTorch allocated (ComfyUI's devices)", busy=busy, unload=COMFY_UNLOAD),)
        return Probe(version=text(system.get("comfyui_version")), models=models, busy=busy,
                     can_unload=True, unload_note=COMFY_UNLOAD)

    def unload(self, http: LocalHttp, model: ServerModel) -> Ack:
        http.post("/free", {"unload_models": True, "free_memory": True})
        queue = mapping(http.get("/queue"))
        if items(queue.get("queue_running")) or items(queue.get("queue_pending")):
            return Ack(True, "ComfyUI frees after the prompt it is running", deferred=True)
        return Ack(True, "ComfyUI was asked to unload every model (POST /free)")


class A1111(Adapter):
    """AUTOMATIC1111 and Forge: the same API, different unloads."""

    deadline_s = 30.0

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.note = FORGE_UNLOAD if kind == "forge" else A1111_UNLOAD
        # Forge's memory manager loads again on the next job; A1111 leaves the
        # checkpoint on the CPU until Reload.
        self.reloads_on_use = kind == "forge"

    def probe(self, found: Found, http: LocalHttp) -> Probe:
        options = mapping(http.get("/sdapi/v1/options"))
        memory = mapping(http.get("/sdapi/v1/memory"))
        progress = mapping(http.get("/sdapi/v1/progress?skip_current_image=true"))
        state = mapping(progress.get("state"))
        job_count = number(state.get("job_count"))
        busy = bool(job_count) or bool(text(state.get("job")))
        cuda = mapping(memory.get("cuda"))
        allocated = number(mapping(cuda.get("allocated")).get("current"))
        checkpoint = text(options.get("sd_model_checkpoint"))
        models: tuple[ServerModel, ...] = ()
        if checkpoint:
            # A checkpoint is gigabytes: with under 512 MiB allocated it sits in host RAM
            # (an unload by anyone: this app, another client, a restart of this app).
            on_cpu = self.kind == "a1111" and allocated is not None and allocated < ON_CPU_BELOW
            models = (ServerModel(
                id=checkpoint, name=checkpoint, vram_bytes=allocated,
                figure="PyTorch allocated (/sdapi/v1/memory)", busy=busy, unload=self.note,
                state="on cpu" if on_cpu else "loaded"),)
        return Probe(models=models, busy=busy, can_unload=True, unload_note=self.note)

    def unload(self, http: LocalHttp, model: ServerModel) -> Ack:
        http.post("/sdapi/v1/unload-checkpoint", timeout_s=60.0)
        return Ack(True, "the checkpoint was unloaded" if self.kind == "forge"
                   else "the checkpoint was moved to host RAM")

    def reload(self, http: LocalHttp, model: ServerModel) -> Ack:
        http.post("/sdapi/v1/reload-checkpoint", timeout_s=120.0)
        return Ack(True, "the checkpoint was loaded back onto the GPU")


__all__ = ["A1111", "ComfyUI"]
