"""A fake LM Studio headless daemon: a process named ``llmster`` whose command
line is just ``[<dir>/llmster]`` (a link to the base interpreter that reads
its script, which calls :func:`main`, from stdin).  Loaded models hold their
memory in the llmster process itself.

Routes (lmstudio-ai/docs: 1_developer/2_rest, 3_openai-compat):

* ``GET /api/v1/models``: ``models[{type, publisher, key, display_name,
  architecture, quantization{name, bits_per_weight}, size_bytes,
  params_string, loaded_instances[{id, config{context_length,
  eval_batch_size, parallel, flash_attention, offload_kv_cache_to_gpu}}],
  max_context_length, format}]`` (no memory figure: ``size_bytes`` is the
  file).  Embedding models have no ``architecture`` and a config with only
  ``context_length``.
* ``POST /api/v1/models/load {model, context_length, flash_attention, ...,
  echo_load_config}`` -> ``{type, instance_id, load_time_seconds, status:
  "loaded"[, load_config]}``; a second instance of a model gets ``key:2``.
* ``POST /api/v1/models/unload {instance_id}`` -> ``{instance_id}``.
* ``GET /api/v0/models``: ``{object: "list", data[{id, object, type,
  publisher, arch, compatibility_type, quantization, state:
  "loaded"|"not-loaded", max_context_length}]}``.
* ``GET /v1/models``: the OpenAI list (every downloaded model: JIT loading
  is on by default).

With ``FAKE_LMSTUDIO_TOKEN`` set, every request needs ``Authorization:
Bearer <token>``; otherwise 401 ``{"error": {"type": "invalid_request",
"code": "invalid_api_key", "message"}}`` (the shape LM Studio 0.4 logs).
Unknown models or instances: 404 with the same error shape.

Knobs (environment):

* ``FAKE_PORT``: the port (1234).
* ``FAKE_LMSTUDIO_TOKEN``: the API token; unset, no authentication.
* ``FAKE_LMSTUDIO_LOAD_S``: seconds a load takes (0.1).
* ``FAKE_NVML_PROCDIR``, ``FAKE_GPU``: see ``common``.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from pathlib import Path

from tests.fakes.servers.common import (
    CLOCK,
    Allocation,
    App,
    BadRequest,
    Handler,
    base_python,
    env_float,
    env_int,
    listen,
    serve,
)

#: The models on disk (docs' list example, sizes not round).
MODELS = [
    {"type": "llm", "publisher": "qwen", "key": "qwen/qwen3-8b", "display_name": "Qwen3 8B",
     "architecture": "qwen3", "quantization": {"name": "Q4_K_M", "bits_per_weight": 4},
     "size_bytes": 5_027_783_488, "params_string": "8B", "max_context_length": 40960,
     "format": "gguf"},
    {"type": "llm", "publisher": "google", "key": "google/gemma-3-4b", "display_name": "Gemma 3 4B",
     "architecture": "gemma3", "quantization": {"name": "Q4_K_M", "bits_per_weight": 4},
     "size_bytes": 3_341_081_549, "params_string": "4B", "max_context_length": 131072,
     "format": "gguf"},
    {"type": "embedding", "publisher": "nomic-ai", "key": "text-embedding-nomic-embed-text-v1.5",
     "display_name": "Nomic Embed Text v1.5", "quantization": {"name": "Q4_K_M", "bits_per_weight": 4},
     "size_bytes": 84_106_591, "params_string": None, "max_context_length": 2048, "format": "gguf"},
]


def prepare(root: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``root/llmster`` (a link to the base interpreter) and the script it reads from stdin."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    link = root / "llmster"
    if not link.is_symlink():
        link.symlink_to(base_python())
    script = root / "llmster-main.py"
    script.write_text("import sys\nfrom tests.fakes.servers.lmstudio import main\nsys.exit(main())\n")
    return link, script


def kv_bytes(model: dict, context: int) -> int:
    """A loaded instance's memory besides its weights (KV cache and buffers)."""
    return context * (model["size_bytes"] // 40_009) + 96_468_993


class LmStudioApp(App):
    server_header = None

    def __init__(self) -> None:
        super().__init__()
        self.token = os.environ.get("FAKE_LMSTUDIO_TOKEN") or None
        self.alloc = Allocation()
        self.lock = threading.Lock()
        self.instances: dict[str, dict] = {}  # id -> {model, config, bytes}
        self.route("GET", "/api/v1/models")(self.v1_models)
        self.route("POST", "/api/v1/models/load")(self.load)
        self.route("POST", "/api/v1/models/unload")(self.unload)
        self.route("GET", "/api/v0/models")(self.v0_models)
        self.route("GET", "/v1/models")(self.openai_models)

    # ---------------------------------------------------------- plumbing

    def dispatch(self, h: Handler) -> None:
        if self.token is not None:
            given = h.bearer()
            if given is None:
                self.error(h, 401, "invalid_api_key", "An API token is required: send it in the "
                           "Authorization header with the Bearer scheme.")
                return
            if not secrets.compare_digest(given, self.token):
                self.error(h, 401, "invalid_api_key", "The API token given is not valid.")
                return
        super().dispatch(h)

    @staticmethod
    def error(h: Handler, status: int, code: str, message: str) -> None:
        h.send_json(status, {"error": {"type": "invalid_request", "code": code, "message": message}})

    def not_found(self, h: Handler) -> None:
        self.error(h, 404, "unknown_endpoint", f"Unexpected endpoint or method. ({h.command} {h.path_only})")

    method_not_allowed = not_found

    def _update_memory(self) -> None:
        self.alloc.set(sum(i["bytes"] for i in self.instances.values()))

    # ------------------------------------------------------------- routes

    def v1_models(self, h: Handler) -> None:
        out = []
        with self.lock:
            for model in MODELS:
                entry = dict(model)
                entry["loaded_instances"] = [{"id": iid, "config": dict(inst["config"])}
                                             for iid, inst in self.instances.items()
                                             if inst["model"]["key"] == model["key"]]
                out.append({k: entry[k] for k in (
                    "type", "publisher", "key", "display_name", "architecture", "quantization",
                    "size_bytes", "params_string", "loaded_instances", "max_context_length", "format")
                    if k in entry})
        h.send_json(200, {"models": out})

    def load(self, h: Handler) -> None:
        try:
            req = h.json(default={}) or {}
        except BadRequest as e:
            self.error(h, 400, "invalid_json", str(e))
            return
        model = next((m for m in MODELS if m["key"] == req.get("model")), None)
        if model is None:
            self.error(h, 404, "model_not_found", f"Model '{req.get('model')}' not found.")
            return
        started = time.monotonic()
        CLOCK.sleep(env_float("FAKE_LMSTUDIO_LOAD_S", 0.1))
        context = int(req.get("context_length") or min(4096, model["max_context_length"]))
        if model["type"] == "llm":
            config = {"context_length": context, "eval_batch_size": int(req.get("eval_batch_size", 512)),
                      "parallel": 4, "flash_attention": bool(req.get("flash_attention", True)),
                      "offload_kv_cache_to_gpu": bool(req.get("offload_kv_cache_to_gpu", True))}
        else:
            config = {"context_length": context}
        with self.lock:
            iid, n = model["key"], 1
            while iid in self.instances:
                n += 1
                iid = f"{model['key']}:{n}"
            self.instances[iid] = {"model": model, "config": config,
                                   "bytes": model["size_bytes"] + kv_bytes(model, context)}
            self._update_memory()
        out = {"type": model["type"], "instance_id": iid,
               "load_time_seconds": round(time.monotonic() - started, 3), "status": "loaded"}
        if req.get("echo_load_config"):
            out["load_config"] = config
        h.send_json(200, out)

    def unload(self, h: Handler) -> None:
        try:
            req = h.json(default={}) or {}
        except BadRequest as e:
            self.error(h, 400, "invalid_json", str(e))
            return
        iid = req.get("instance_id")
        with self.lock:
            if iid not in self.instances:
                self.error(h, 404, "model_not_found", f"No loaded model instance with id '{iid}'.")
                return
            del self.instances[iid]
            self._update_memory()
        h.send_json(200, {"instance_id": iid})

    def v0_models(self, h: Handler) -> None:
        with self.lock:
            loaded = {inst["model"]["key"] for inst in self.instances.values()}
        h.send_json(200, {"object": "list", "data": [
            {"id": m["key"], "object": "model", "type": "llm" if m["type"] == "llm" else "embeddings",
             "publisher": m["publisher"], "arch": m.get("architecture", "nomic-bert"),
             "compatibility_type": m["format"], "quantization": m["quantization"]["name"],
             "state": "loaded" if m["key"] in loaded else "not-loaded",
             "max_context_length": m["max_context_length"]} for m in MODELS]})

    def openai_models(self, h: Handler) -> None:
        h.send_json(200, {"data": [{"id": m["key"], "object": "model", "owned_by": "organization_owner"}
                                   for m in MODELS], "object": "list"})


def main(argv: list[str] | None = None) -> int:
    app = LmStudioApp()
    port = env_int("FAKE_PORT", 1234)
    servers = listen(app, ["127.0.0.1"], port)
    return serve(servers, cleanup=app.alloc.clear, banner=f"Server started on port {port}")
