"""A fake text-generation-webui: ``<python> server.py --api --api-port N
[--api-key K] [--admin-key A] [--nowebui] [--model M]`` run in a
``text-generation-webui/`` directory whose ``server.py`` calls :func:`main`.
The model's memory is held by the server process.

Routes (modules/api/script.py, modules/api/models.py, modules/models.py):

* ``GET /v1/internal/model/info`` -> ``{model_name, lora_names, loader}``
  (``model_name`` is the string ``"None"`` when nothing is loaded; ``loader``
  stays the last one used).
* ``GET /v1/internal/model/list`` -> ``{model_names}`` (admin key).
* ``POST /v1/internal/model/load {model_name, args, ...}`` -> ``"OK"``
  (admin key); the previous model is unloaded first; a model it cannot load
  answers 500 ``{"detail": "Failed to load the model."}``.
* ``POST /v1/internal/model/unload`` -> ``"OK"`` (admin key).
* ``GET /v1/internal/health`` -> ``{"status": "ok"}``;
  ``POST /v1/internal/stop-generation`` -> ``"OK"``; ``GET /v1/models``.

Keys as verify_api_key / verify_admin_key check them: ``--api-key`` guards
every route with ``Authorization: Bearer <key>``; ``--admin-key`` (default:
the api key) guards the model routes.  A wrong or missing key is 401
``{"detail": "Unauthorized"}`` (the real server has no 403).  Without
``--listen`` a request whose Host is not localhost or 127.0.0.1 is refused
with 400 ``{"detail": "Invalid host header"}``.  Without ``--nowebui`` the
real server also runs its gradio UI; the fake serves only the API.

Knobs (environment):

* ``FAKE_TGW_MODELS``: models in ``user_data/models``, ``name=bytes``
  separated by commas; a name ending in ``.gguf`` loads with llama.cpp, any
  other with Transformers (default
  ``Qwen2.5-7B-Instruct-Q4_K_M.gguf=4683073952,Llama-3.2-3B-Instruct=6425499648``).
* ``FAKE_TGW_LOAD_S``: seconds a load takes (0.1).
* ``FAKE_TGW_CONTEXT_BYTES``: CUDA context, held while a model is loaded
  (364904755).
* ``FAKE_NVML_PROCDIR``, ``FAKE_GPU``: see ``common``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import threading
from pathlib import Path

from tests.fakes.servers.common import (
    CLOCK,
    Allocation,
    App,
    BadRequest,
    Handler,
    env_float,
    env_int,
    env_str,
    launcher,
    listen,
    serve,
)

DEFAULT_MODELS = "Qwen2.5-7B-Instruct-Q4_K_M.gguf=4683073952,Llama-3.2-3B-Instruct=6425499648"
ADMIN_PATHS = ("/v1/internal/model/list", "/v1/internal/model/load", "/v1/internal/model/unload",
               "/v1/internal/lora/list", "/v1/internal/lora/load", "/v1/internal/lora/unload")


def models(spec: str | None = None) -> dict[str, int]:
    """name -> bytes of ``spec`` (default: FAKE_TGW_MODELS, else DEFAULT_MODELS)."""
    out = {}
    for item in (spec or env_str("FAKE_TGW_MODELS", DEFAULT_MODELS)).split(","):
        if item.strip():
            name, _, size = item.strip().partition("=")
            out[name] = int(size)
    return out


def prepare(root: str | os.PathLike[str], spec: str | None = None) -> Path:
    """``root/text-generation-webui/server.py`` and its models (tiny files;
    ``spec`` as FAKE_TGW_MODELS)."""
    webui = Path(root) / "text-generation-webui"
    model_dir = webui / "user_data" / "models"
    model_dir.mkdir(parents=True, exist_ok=True)
    for name in models(spec):
        if name.endswith(".gguf"):
            (model_dir / name).write_bytes(b"GGUF\x03\x00\x00\x00")
        else:
            (model_dir / name).mkdir(exist_ok=True)
            (model_dir / name / "config.json").write_text('{"model_type": "llama"}\n')
    launcher(str(webui / "server.py"), "tests.fakes.servers.tgw")
    return webui


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", action="store_true")
    parser.add_argument("--api-port", type=int, default=5000)
    parser.add_argument("--api-key", type=str, default="")
    parser.add_argument("--admin-key", type=str, default="")
    parser.add_argument("--nowebui", action="store_true")
    parser.add_argument("--listen", action="store_true")
    parser.add_argument("--listen-port", type=int, default=None)
    parser.add_argument("--public-api", action="store_true")
    parser.add_argument("--model", type=str, default=None)
    parser.add_argument("--loader", type=str, default=None)
    parser.add_argument("--idle-timeout", type=int, default=0)
    return parser.parse_args(argv)


class TgwApp(App):
    server_header = "uvicorn"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args
        if args.api_key and not args.admin_key:
            args.admin_key = args.api_key  # run_server: the admin key defaults to the api key
        self.alloc = Allocation()
        self.lock = threading.Lock()
        self.model_name = "None"
        self.lora_names: list[str] = []
        self.loader: str | None = args.loader
        self.route("GET", "/v1/internal/model/info")(self.info)
        self.route("GET", "/v1/internal/model/list")(self.list_models)
        self.route("POST", "/v1/internal/model/load")(self.load)
        self.route("POST", "/v1/internal/model/unload")(self.unload)
        self.route("GET", "/v1/internal/health")(lambda h: h.send_json(200, {"status": "ok"}))
        self.route("POST", "/v1/internal/stop-generation")(lambda h: h.send_json(200, "OK"))
        self.route("GET", "/v1/models")(self.openai_models)

    def dispatch(self, h: Handler) -> None:
        if not (self.args.listen or self.args.public_api):
            host = (h.headers.get("Host") or "").split(":")[0]
            if host not in ("localhost", "127.0.0.1"):
                h.send_json(400, {"detail": "Invalid host header"})
                return
        if self.find(h.command, h.path_only) is not None:
            key = self.args.admin_key if h.path_only in ADMIN_PATHS else self.args.api_key
            given = h.headers.get("Authorization")
            if key and (given is None or not secrets.compare_digest(given, f"Bearer {key}")):
                h.send_json(401, {"detail": "Unauthorized"})
                return
        super().dispatch(h)

    # ------------------------------------------------------------- models

    def load_model(self, name: str) -> None:
        available = models()
        if name not in available:
            raise ValueError(f"no model {name!r}")
        self.unload_model()
        CLOCK.sleep(env_float("FAKE_TGW_LOAD_S", 0.1))
        self.loader = "llama.cpp" if name.endswith(".gguf") else "Transformers"
        self.model_name = name
        self.alloc.set(env_int("FAKE_TGW_CONTEXT_BYTES", 364_904_755) + available[name])

    def unload_model(self) -> None:
        self.model_name = "None"
        self.lora_names = []
        self.alloc.clear()

    # ------------------------------------------------------------- routes

    def info(self, h: Handler) -> None:
        h.send_json(200, {"model_name": self.model_name, "lora_names": self.lora_names,
                          "loader": self.loader})

    def list_models(self, h: Handler) -> None:
        h.send_json(200, {"model_names": sorted(models(), key=str.lower)})

    def load(self, h: Handler) -> None:
        try:
            req = h.json(default=None)
        except BadRequest as e:
            h.send_json(422, {"detail": [{"type": "json_invalid", "loc": ["body", 0], "msg": str(e)}]})
            return
        if not isinstance(req, dict) or "model_name" not in req:
            h.send_json(422, {"detail": [{"type": "missing", "loc": ["body", "model_name"],
                                          "msg": "Field required", "input": req}]})
            return
        with self.lock:
            try:
                self.load_model(str(req["model_name"]))
            except Exception:
                h.send_json(500, {"detail": "Failed to load the model."})
                return
        h.send_json(200, "OK")

    def unload(self, h: Handler) -> None:
        with self.lock:
            self.unload_model()
        h.send_json(200, "OK")

    def openai_models(self, h: Handler) -> None:
        data = [] if self.model_name == "None" else [
            {"id": self.model_name, "object": "model", "created": 0, "owned_by": "user"}]
        h.send_json(200, {"object": "list", "data": data})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    app = TgwApp(args)
    if args.model:
        app.load_model(args.model)
    host = "0.0.0.0" if args.listen else "127.0.0.1"
    servers = listen(app, [host], args.api_port)
    return serve(servers, cleanup=app.alloc.clear,
                 banner=f"OpenAI/Anthropic-compatible API URL:\n\nhttp://{host}:{args.api_port}/v1\n")
