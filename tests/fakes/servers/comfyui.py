"""A fake ComfyUI: ``<python> main.py --listen 127.0.0.1 --port N`` run in a
``ComfyUI/`` directory whose ``main.py`` calls :func:`main`.

Arguments as comfy/cli_args.py parses them: ``--listen`` (default
127.0.0.1; bare ``--listen`` means ``0.0.0.0,::``; a comma-separated list
binds each), ``--port`` (8188) and a few flags launchers pass.

Routes (server.py; each also under ``/api``):

* ``GET /system_stats``: ``system{os, ram_total, ram_free, comfyui_version,
  python_version, pytorch_version, embedded_python, argv, ...}`` and
  ``devices[{name, type, index, vram_total, vram_free, torch_vram_total,
  torch_vram_free}]``; vram figures are CUDA's view of the fake GPU
  (``vram_free`` = free + what torch has reserved but not in use).
* ``GET /queue``: ``queue_running`` / ``queue_pending`` items
  ``[number, prompt_id, prompt, extra_data, outputs_to_execute]``.
* ``GET /prompt``: ``{"exec_info": {"queue_remaining"}}``.
* ``POST /prompt``: queues a render of ``FAKE_COMFY_RENDER_S``; the first
  one loads the checkpoint (the process's memory grows by
  ``FAKE_COMFY_MODEL_BYTES``) and, with ``FAKE_COMFY_NODE_BYTES``, a custom
  node's own model.
* ``POST /free {unload_models, free_memory}``: only sets flags and answers
  200 at once.  The prompt worker reads them after the current prompt (as
  main.py's prompt_worker does: ``q.get`` returns, then ``get_flags``;
  ``set_flag`` wakes an idle worker), unloads the model manager's models and
  empties the cache.  Memory a custom node holds outside the model manager
  (``FAKE_COMFY_NODE_BYTES``) stays.
* ``POST /interrupt``, ``POST /queue {clear|delete}``, ``GET /history``,
  ``GET /history/{prompt_id}``.

Knobs (environment):

* ``FAKE_COMFY_RENDER_S``: seconds one prompt runs (0.5).
* ``FAKE_COMFY_MODEL_BYTES``: a checkpoint's size in VRAM (2132863277).
* ``FAKE_COMFY_NODE_BYTES``: bytes a custom node keeps on the GPU from its
  first run on, never freed by ``/free`` (0).
* ``FAKE_COMFY_CONTEXT_BYTES``: the CUDA context and torch's start-up
  allocations, held from start (417335091).
* ``FAKE_COMFY_VERSION``: ``comfyui_version`` (0.9.2).
* ``FAKE_NVML_PROCDIR``, ``FAKE_GPU``, ``FAKE_NVML_CONFIG``: see ``common``.
"""

from __future__ import annotations

import argparse
import copy
import heapq
import os
import sys
import threading
import time
import uuid
from pathlib import Path

from tests.fakes.servers.common import (
    CLOCK,
    Allocation,
    App,
    BadRequest,
    Handler,
    device_memory,
    env_float,
    env_int,
    env_str,
    gpu_index,
    launcher,
    listen,
    ram,
    serve,
)

DEFAULT_CKPT = "v1-5-pruned-emaonly-fp16.safetensors"
OUTPUT_NODES = ("SaveImage", "PreviewImage", "SaveAnimatedWEBP", "SaveLatent")
CACHE_SLACK = 41_943_040 + 6_291_456  # torch's cache left after a render, until emptied


def prepare(root: str | os.PathLike[str]) -> Path:
    """``root/ComfyUI/main.py`` (calls :func:`main`), and its models folder."""
    comfy = Path(root) / "ComfyUI"
    (comfy / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    (comfy / "models" / "checkpoints" / DEFAULT_CKPT).write_bytes(b"\0" * 16)
    launcher(str(comfy / "main.py"), "tests.fakes.servers.comfyui")
    return comfy


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", type=str, default="127.0.0.1", metavar="IP", nargs="?",
                        const="0.0.0.0,::")
    parser.add_argument("--port", type=int, default=8188)
    parser.add_argument("--cuda-device", type=str, default=None)
    parser.add_argument("--enable-cors-header", type=str, default=None, nargs="?", const="*")
    for flag in ("--cpu", "--lowvram", "--normalvram", "--highvram", "--gpu-only",
                 "--disable-auto-launch", "--dont-print-server", "--disable-all-custom-nodes",
                 "--disable-smart-memory", "--verbose"):
        parser.add_argument(flag, action="store_true")
    return parser.parse_args(argv)


class PromptQueue:
    """execution.PromptQueue: a heap of pending items, the running ones, history, flags."""

    def __init__(self) -> None:
        self.mutex = threading.RLock()
        self.not_empty = threading.Condition(self.mutex)
        self.task_counter = 0
        self.queue: list[tuple] = []
        self.currently_running: dict[int, tuple] = {}
        self.history: dict[str, dict] = {}
        self.flags: dict[str, object] = {}

    def put(self, item: tuple) -> None:
        with self.mutex:
            heapq.heappush(self.queue, item)
            self.not_empty.notify()

    def get(self, timeout: float | None = None) -> tuple[tuple, int] | None:
        with self.not_empty:
            while len(self.queue) == 0:
                self.not_empty.wait(timeout=timeout)
                if timeout is not None and len(self.queue) == 0:
                    return None
            item = heapq.heappop(self.queue)
            i = self.task_counter
            self.currently_running[i] = copy.deepcopy(item)
            self.task_counter += 1
            return item, i

    def task_done(self, item_id: int, status: dict) -> None:
        with self.mutex:
            prompt = self.currently_running.pop(item_id)
            self.history[prompt[1]] = {"prompt": list(prompt[:5]), "outputs": {}, "status": status,
                                       "meta": {}}

    def current(self) -> tuple[list, list]:
        with self.mutex:
            return list(self.currently_running.values()), list(self.queue)

    def tasks_remaining(self) -> int:
        with self.mutex:
            return len(self.queue) + len(self.currently_running)

    def set_flag(self, name: str, data: object) -> None:
        with self.mutex:
            self.flags[name] = data
            self.not_empty.notify()

    def get_flags(self) -> dict:
        with self.mutex:
            flags, self.flags = self.flags, {}
            return flags


class ModelManagement:
    """comfy.model_management as far as memory goes: loaded models, torch's cache,
    a custom node's memory outside it, all in this process's allocation."""

    def __init__(self) -> None:
        self.alloc = Allocation()
        self.lock = threading.Lock()
        self.context = env_int("FAKE_COMFY_CONTEXT_BYTES", 417_335_091)
        self.models: dict[str, int] = {}  # checkpoint -> bytes
        self.node_bytes = 0  # held by a custom node, outside the model manager
        self.cache = 0  # reserved by torch's allocator, not in use
        self.sm: int | None = None
        self._write()

    def _write(self) -> None:
        self.alloc.set(self.context + self.active() + self.cache, sm=self.sm)

    def active(self) -> int:
        return sum(self.models.values()) + self.node_bytes

    def load(self, ckpt: str) -> None:
        with self.lock:
            if ckpt not in self.models:
                self.models[ckpt] = env_int("FAKE_COMFY_MODEL_BYTES", 2_132_863_277)
                self._write()

    def custom_node(self) -> None:
        with self.lock:
            if self.node_bytes == 0:
                self.node_bytes = env_int("FAKE_COMFY_NODE_BYTES", 0)
                self._write()

    def rendering(self, on: bool) -> None:
        with self.lock:
            self.sm = 91 if on else None
            if not on:
                self.cache = max(self.cache, CACHE_SLACK)
            self._write()

    def unload_all_models(self) -> None:
        with self.lock:
            freed = sum(self.models.values())
            self.models.clear()
            self.cache += freed  # freed tensors stay in torch's cache until emptied
            self._write()

    def soft_empty_cache(self) -> None:
        with self.lock:
            self.cache = 0
            self._write()

    def torch_reserved(self) -> int:
        with self.lock:
            return self.active() + self.cache

    def torch_active(self) -> int:
        with self.lock:
            return self.active()


class ComfyApp(App):
    server_header = "Python/3.11 aiohttp/3.12.15"

    def __init__(self) -> None:
        super().__init__()
        self.argv = list(sys.argv)
        self.queue = PromptQueue()
        self.mm = ModelManagement()
        self.number = 0
        self.interrupted = threading.Event()
        for path, method, fn in (
                ("/system_stats", "GET", self.system_stats), ("/queue", "GET", self.get_queue),
                ("/queue", "POST", self.post_queue), ("/prompt", "GET", self.get_prompt),
                ("/prompt", "POST", self.post_prompt), ("/free", "POST", self.post_free),
                ("/interrupt", "POST", self.post_interrupt), ("/history", "GET", self.get_history)):
            self.route(method, path, "/api" + path)(fn)
        threading.Thread(target=self.prompt_worker, daemon=True).start()

    def dispatch(self, h: Handler) -> None:
        for prefix in ("/history/", "/api/history/"):
            if h.command == "GET" and h.path_only.startswith(prefix):
                prompt_id = h.path_only[len(prefix):]
                with self.queue.mutex:
                    entry = self.queue.history.get(prompt_id)
                    h.send_json(200, {prompt_id: copy.deepcopy(entry)} if entry else {})
                return
        super().dispatch(h)

    def not_found(self, h: Handler) -> None:
        h.send_text(404, "404: Not Found")

    def method_not_allowed(self, h: Handler) -> None:
        h.send_text(405, "405: Method Not Allowed")

    # ------------------------------------------------------------- routes

    def system_stats(self, h: Handler) -> None:
        dev = device_memory()
        reserved, active = self.mm.torch_reserved(), self.mm.torch_active()
        memory = ram()
        embedded = os.path.split(os.path.split(sys.executable)[0])[1] == "python_embeded"
        h.send_json(200, {
            "system": {
                "os": sys.platform, "ram_total": memory["total"], "ram_free": memory["available"],
                "comfyui_version": env_str("FAKE_COMFY_VERSION", "0.9.2"),
                "required_frontend_version": "1.34.9", "installed_templates_version": "0.7.25",
                "required_templates_version": "0.7.25",
                "python_version": sys.version, "pytorch_version": "2.9.1+cu128",
                "embedded_python": embedded, "argv": self.argv},
            "devices": [{
                "name": f"cuda:{gpu_index()} {dev['name']} : cudaMallocAsync", "type": "cuda",
                "index": gpu_index(), "vram_total": dev["total"],
                "vram_free": dev["free"] + (reserved - active),
                "torch_vram_total": reserved, "torch_vram_free": reserved - active}]})

    def get_queue(self, h: Handler) -> None:
        running, pending = self.queue.current()
        h.send_json(200, {"queue_running": [list(item[:5]) for item in running],
                          "queue_pending": [list(item[:5]) for item in pending]})

    def get_prompt(self, h: Handler) -> None:
        h.send_json(200, {"exec_info": {"queue_remaining": self.queue.tasks_remaining()}})

    def post_prompt(self, h: Handler) -> None:
        try:
            data = h.json(default={})
        except BadRequest:
            h.send_text(500, "500 Internal Server Error\n\nServer got itself in trouble")
            return
        if "number" in data:
            number = float(data["number"])
        else:
            number = self.number
            if data.get("front"):
                number = -number
            self.number += 1
        prompt = data.get("prompt")
        if prompt is None:
            error = {"type": "no_prompt", "message": "No prompt provided",
                     "details": "No prompt provided", "extra_info": {}}
            h.send_json(400, {"error": error, "node_errors": {}})
            return
        outputs = [node_id for node_id, node in (prompt.items() if isinstance(prompt, dict) else ())
                   if isinstance(node, dict) and node.get("class_type") in OUTPUT_NODES]
        if not outputs:
            error = {"type": "prompt_no_outputs", "message": "Prompt has no outputs",
                     "details": "", "extra_info": {}}
            h.send_json(400, {"error": error, "node_errors": {}})
            return
        prompt_id = str(data.get("prompt_id") or uuid.uuid4())
        extra = dict(data.get("extra_data") or {})
        if "client_id" in data:
            extra["client_id"] = data["client_id"]
        extra["create_time"] = int(time.time() * 1000)
        self.queue.put((number, prompt_id, prompt, extra, outputs, {}))
        h.send_json(200, {"prompt_id": prompt_id, "number": number, "node_errors": {}})

    def post_queue(self, h: Handler) -> None:
        data = h.json(default={}) or {}
        with self.queue.mutex:
            if data.get("clear"):
                self.queue.queue = []
            for prompt_id in data.get("delete", []):
                self.queue.queue = [item for item in self.queue.queue if item[1] != prompt_id]
                heapq.heapify(self.queue.queue)
        h.send_bytes(200, b"", "application/octet-stream")

    def post_free(self, h: Handler) -> None:
        data = h.json(default={}) or {}
        if data.get("unload_models", False):
            self.queue.set_flag("unload_models", data["unload_models"])
        if data.get("free_memory", False):
            self.queue.set_flag("free_memory", data["free_memory"])
        h.send_bytes(200, b"", "application/octet-stream")

    def post_interrupt(self, h: Handler) -> None:
        try:
            data = h.json(default={}) or {}
        except BadRequest:
            data = {}
        prompt_id = data.get("prompt_id")
        running, _ = self.queue.current()
        if not prompt_id or any(item[1] == prompt_id for item in running):
            self.interrupted.set()
        h.send_bytes(200, b"", "application/octet-stream")

    def get_history(self, h: Handler) -> None:
        max_items = h.query.get("max_items")
        with self.queue.mutex:
            items = list(self.queue.history.items())
            if max_items is not None:
                items = items[-int(max_items):]
            h.send_json(200, copy.deepcopy(dict(items)))

    # ------------------------------------------------------ prompt worker

    def execute(self, prompt: dict) -> dict:
        ckpt = DEFAULT_CKPT
        for node in prompt.values():
            if isinstance(node, dict) and node.get("class_type") == "CheckpointLoaderSimple":
                ckpt = str((node.get("inputs") or {}).get("ckpt_name", DEFAULT_CKPT))
        self.interrupted.clear()
        self.mm.load(ckpt)
        self.mm.custom_node()
        self.mm.rendering(True)
        try:
            finished = CLOCK.sleep(env_float("FAKE_COMFY_RENDER_S", 0.5), self.interrupted)
        finally:
            self.mm.rendering(False)
        if finished:
            return {"status_str": "success", "completed": True, "messages": []}
        return {"status_str": "error", "completed": False,
                "messages": [["execution_interrupted", {"timestamp": int(time.time() * 1000)}]]}

    def prompt_worker(self) -> None:
        """main.py's loop: a prompt (or a wake-up by set_flag, or the gc timeout),
        then the flags, then gc.collect() + soft_empty_cache() at most every 10 s,
        at once after an unload."""
        current_time, last_gc, need_gc, interval = 0.0, 0.0, False, 10.0
        while True:
            timeout = 1000.0
            if need_gc:
                timeout = max(interval - (current_time - last_gc), 0.0)
            queue_item = self.queue.get(timeout=timeout)
            if queue_item is not None:
                item, item_id = queue_item
                status = self.execute(item[2])
                need_gc = True
                self.queue.task_done(item_id, status)
                current_time = time.monotonic()
            flags = self.queue.get_flags()
            free_memory = flags.get("free_memory", False)
            if flags.get("unload_models", free_memory):
                self.mm.unload_all_models()
                need_gc, last_gc = True, 0.0
            if free_memory:
                need_gc, last_gc = True, 0.0  # e.reset(): the execution cache goes too
            if need_gc:
                current_time = time.monotonic()
                if current_time - last_gc > interval:
                    self.mm.soft_empty_cache()
                    last_gc, need_gc = current_time, False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    app = ComfyApp()
    servers = listen(app, [a for a in args.listen.split(",") if a], args.port)
    return serve(servers, cleanup=app.mm.alloc.clear,
                 banner=f"To see the GUI go to: http://{args.listen.split(',')[0]}:{args.port}")
