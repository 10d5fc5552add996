"""A fake AUTOMATIC1111 stable-diffusion-webui (and Forge, which shares its
API): ``<python> launch.py --api --port N [--api-auth user:pass]
[--nowebui]`` run in a ``stable-diffusion-webui/`` directory whose
``launch.py`` calls :func:`main` (the real launch.py runs webui in-process,
so the command line stays ``launch.py ...``).

Routes under ``/sdapi/v1`` (modules/api/api.py, models.py):

* ``GET cmd-flags``: ``vars(cmd_opts)`` (``api_auth`` included, as the real
  one leaks it).
* ``GET memory``: ``ram{free, used, total}`` (process RSS based: ``total`` =
  100 * rss / memory_percent, a float) and ``cuda{system{free, used, total},
  active, allocated, reserved, inactive {current, peak}, events{retries,
  oom}}`` (``torch.cuda.mem_get_info`` and ``memory_stats``).
* ``GET options`` (``sd_model_checkpoint``...), ``GET sd-models``.
* ``GET progress``: ``progress, eta_relative, state{skipped, interrupted,
  stopping_generation, job, job_count, job_timestamp, job_no, sampling_step,
  sampling_steps}, current_image, textinfo, current_task``.
* ``POST txt2img``: busy for ``FAKE_A1111_RENDER_S``, one at a time.
* ``POST unload-checkpoint``: ``send_model_to_cpu`` (A1111 >= 1.6): the
  weights move to host RAM: the process's VRAM drops by the model, its RAM
  (``ram.used``) grows by the same.  ``POST reload-checkpoint``: back.  The
  model stays loaded (``options`` unchanged); a txt2img while its weights are
  on the CPU fails as torch does with tensors on two devices (the real
  ``reload_model_weights`` keeps a model of the same checkpoint where it is).
* ``POST interrupt``, ``POST skip``.

With ``--api-auth`` every route needs HTTP Basic.  A refusal is FastAPI's
HTTPBasic 401 ("Not authenticated" without credentials, "Incorrect username
or password" with wrong ones) rewritten by the webui's exception handler
into ``{"error", "detail", "body", "errors"}``; that handler builds a new
response, so the ``WWW-Authenticate`` header of the exception is not sent.

Knobs (environment):

* ``FAKE_A1111_RENDER_S``: seconds one txt2img takes (0.6).
* ``FAKE_A1111_MODEL_BYTES``: the checkpoint's weights (2132863274).
* ``FAKE_A1111_CONTEXT_BYTES``: CUDA context and kernels, held from start
  (480389427).
* ``FAKE_A1111_LOAD_S``: seconds the start-up model load takes (0.05).
* ``FAKE_NVML_PROCDIR``, ``FAKE_GPU``, ``FAKE_NVML_CONFIG``: see ``common``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import datetime
import hashlib
import json
import os
import secrets
import sys
import threading
import time
from pathlib import Path

from tests.fakes.servers.common import (
    CLOCK,
    Allocation,
    App,
    Handler,
    device_memory,
    env_float,
    env_int,
    launcher,
    listen,
    ram,
    rss,
    serve,
)

CKPT_FILE = "v1-5-pruned-emaonly.safetensors"
SHA256 = "6ce0161689b3853acaa03779ec93eafe75a02f4ced659bee03f50797806fa2fa"
WORKSPACE = 4_718_592 + 65_537 * 3  # allocator blocks besides the weights
#: a 1x1 black PNG, what send_images returns base64-encoded
PNG_1X1 = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQAAAABJRU5ErkJggg==")


def prepare(root: str | os.PathLike[str]) -> Path:
    """``root/stable-diffusion-webui/launch.py`` and its checkpoint folder."""
    webui = Path(root) / "stable-diffusion-webui"
    (webui / "models" / "Stable-diffusion").mkdir(parents=True, exist_ok=True)
    (webui / "models" / "Stable-diffusion" / CKPT_FILE).write_bytes(b"\0" * 16)
    launcher(str(webui / "launch.py"), "tests.fakes.servers.a1111")
    return webui


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", action="store_true")
    parser.add_argument("--nowebui", action="store_true")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--listen", action="store_true")
    parser.add_argument("--api-auth", type=str, default=None)
    parser.add_argument("--api-log", action="store_true")
    parser.add_argument("--api-server-stop", action="store_true")
    parser.add_argument("--skip-torch-cuda-test", action="store_true")
    parser.add_argument("--xformers", action="store_true")
    parser.add_argument("--medvram", action="store_true")
    parser.add_argument("--lowvram", action="store_true")
    parser.add_argument("--no-half", action="store_true")
    parser.add_argument("--ckpt", type=str, default=None)
    parser.add_argument("--device-id", type=str, default=None)
    return parser.parse_args(argv)


class State:
    """modules.shared_state.State: what ``progress`` reports."""

    def __init__(self) -> None:
        self.skipped = self.interrupted = self.stopping_generation = False
        self.job = ""
        self.job_count = 0
        self.job_timestamp = "0"
        self.job_no = 0
        self.sampling_step = 0
        self.sampling_steps = 0
        self.time_start = 0.0
        self.textinfo = None

    def dict(self) -> dict:
        return {"skipped": self.skipped, "interrupted": self.interrupted,
                "stopping_generation": self.stopping_generation, "job": self.job,
                "job_count": self.job_count, "job_timestamp": self.job_timestamp,
                "job_no": self.job_no, "sampling_step": self.sampling_step,
                "sampling_steps": self.sampling_steps}

    def begin(self, job: str) -> None:
        self.sampling_step = 0
        self.time_start = time.time()
        self.job_count = -1
        self.job_no = 0
        self.job_timestamp = datetime.datetime.now().strftime("%Y%m%d%H%M%S")
        self.job = job
        self.skipped = self.interrupted = self.stopping_generation = False

    def end(self) -> None:
        self.job = ""
        self.job_count = 0
        self.sampling_step = self.sampling_steps = 0


class Torch:
    """The process's CUDA memory as torch's caching allocator and NVML see it,
    and the host RAM its weights take when they are on the CPU."""

    def __init__(self) -> None:
        self.alloc = Allocation()
        self.lock = threading.Lock()
        self.context = env_int("FAKE_A1111_CONTEXT_BYTES", 480_389_427)
        self.model = env_int("FAKE_A1111_MODEL_BYTES", 2_132_863_274)
        self.on_gpu = False
        self.loaded = False
        self.activations = 0  # during a render
        self.peaks = {"allocated": 0, "reserved": 0}
        self.sm: int | None = None
        self._write()

    def allocated(self) -> int:
        return (self.model if self.on_gpu else 0) + (WORKSPACE if self.loaded else 0) + self.activations

    def reserved(self) -> int:
        two_mib = 2 << 20
        return -(-self.allocated() // two_mib) * two_mib  # whole 2 MiB segments

    def host_bytes(self) -> int:
        return self.model if self.loaded and not self.on_gpu else 0

    def _write(self) -> None:
        self.peaks["allocated"] = max(self.peaks["allocated"], self.allocated())
        self.peaks["reserved"] = max(self.peaks["reserved"], self.reserved())
        self.alloc.set(self.context + self.reserved(), sm=self.sm)

    def load(self) -> None:
        with self.lock:
            self.loaded = self.on_gpu = True
            self._write()

    def to_cpu(self) -> None:
        with self.lock:
            if self.loaded:
                self.on_gpu = False
                self._write()  # torch_gc: the cache is emptied

    def to_gpu(self) -> None:
        with self.lock:
            if self.loaded:
                self.on_gpu = True
                self._write()

    def render(self, on: bool) -> None:
        with self.lock:
            self.activations = 1_610_612_736 + 12_583 if on else 0
            self.sm = 97 if on else None
            self._write()

    def memory_stats(self) -> dict:
        with self.lock:
            allocated, reserved = self.allocated(), self.reserved()
            return {"allocated": {"current": allocated, "peak": self.peaks["allocated"]},
                    "reserved": {"current": reserved, "peak": self.peaks["reserved"]},
                    "active": {"current": allocated, "peak": self.peaks["allocated"]},
                    "inactive": {"current": reserved - allocated,
                                 "peak": self.peaks["reserved"] - self.peaks["allocated"]}}


class WebuiApp(App):
    server_header = "uvicorn"

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args
        self.credentials: dict[str, str] = {}
        if args.api_auth:
            for auth in args.api_auth.split(","):
                user, password = auth.split(":")
                self.credentials[user] = password
        self.torch = Torch()
        self.state = State()
        self.queue_lock = threading.Lock()
        self.checkpoint_title = f"{CKPT_FILE} [{SHA256[:10]}]"
        api = "/sdapi/v1/"
        routes = (
                ("GET", "cmd-flags", self.cmd_flags), ("GET", "memory", self.memory),
                ("GET", "options", self.options), ("GET", "sd-models", self.sd_models),
                ("GET", "progress", self.progress), ("POST", "txt2img", self.txt2img),
                ("POST", "unload-checkpoint", self.unload), ("POST", "reload-checkpoint", self.reload),
                ("POST", "interrupt", self.interrupt), ("POST", "skip", self.skip))
        if args.api or args.nowebui:  # without either, only the gradio UI serves
            for method, name, fn in routes:
                self.route(method, api + name)(fn)
        threading.Thread(target=self._load_model, daemon=True).start()

    def _load_model(self) -> None:
        CLOCK.sleep(env_float("FAKE_A1111_LOAD_S", 0.05))
        self.torch.load()

    # --------------------------------------------------------------- auth

    def dispatch(self, h: Handler) -> None:
        if self.credentials and self.find(h.command, h.path_only) is not None:
            refusal = self._refusal(h.headers.get("Authorization"))
            if refusal is not None:
                self._error(h, 401, "HTTPException", refusal)
                return
        super().dispatch(h)

    def _refusal(self, header: str | None) -> str | None:
        scheme, _, param = (header or "").partition(" ")
        if not header or scheme.lower() != "basic":
            return "Not authenticated"
        try:
            user, sep, password = base64.b64decode(param).decode("ascii").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return "Invalid authentication credentials"
        if sep and user in self.credentials and secrets.compare_digest(password, self.credentials[user]):
            return None
        return "Incorrect username or password"

    @staticmethod
    def _error(h: Handler, status: int, error: str, detail: str, errors: str | None = None) -> None:
        h.send_json(status, {"error": error, "detail": detail, "body": "",
                             "errors": errors if errors is not None else f"{status}: {detail}"})

    def not_found(self, h: Handler) -> None:
        h.send_json(404, {"detail": "Not Found"})

    # ------------------------------------------------------------- routes

    def cmd_flags(self, h: Handler) -> None:
        a = self.args
        h.send_json(200, {
            "data_dir": str(Path.cwd()), "models_dir": str(Path.cwd() / "models"),
            "config": str(Path.cwd() / "configs" / "v1-inference.yaml"), "ckpt": a.ckpt,
            "ckpt_dir": None, "vae_dir": None, "gfpgan_dir": None, "no_half": a.no_half,
            "no_half_vae": False, "medvram": a.medvram, "lowvram": a.lowvram, "xformers": a.xformers,
            "listen": a.listen, "port": a.port, "api": a.api, "api_auth": a.api_auth,
            "api_log": a.api_log, "nowebui": a.nowebui, "api_server_stop": a.api_server_stop,
            "skip_torch_cuda_test": a.skip_torch_cuda_test, "device_id": a.device_id,
            "timeout_keep_alive": 30, "disable_safe_unpickle": False, "share": False,
            "gradio_auth": None, "subpath": None, "skip_version_check": False})

    def memory(self, h: Handler) -> None:
        used = rss() + self.torch.host_bytes()
        memory_percent = 100.0 * used / max(ram()["total"], 1)
        total = 100 * used / memory_percent if memory_percent else float(ram()["total"])
        dev = device_memory()
        stats = self.torch.memory_stats()
        cuda = {"system": {"free": dev["free"], "used": dev["total"] - dev["free"], "total": dev["total"]},
                "active": stats["active"], "allocated": stats["allocated"],
                "reserved": stats["reserved"], "inactive": stats["inactive"],
                "events": {"retries": 0, "oom": 0}}
        h.send_json(200, {"ram": {"free": total - used, "used": used, "total": total}, "cuda": cuda})

    def options(self, h: Handler) -> None:
        h.send_json(200, {"sd_model_checkpoint": self.checkpoint_title,
                          "sd_checkpoint_hash": SHA256, "sd_vae": "Automatic",
                          "CLIP_stop_at_last_layers": 1, "samples_format": "png",
                          "sd_checkpoints_limit": 1, "sd_checkpoints_keep_in_cpu": True})

    def sd_models(self, h: Handler) -> None:
        filename = str(Path.cwd() / "models" / "Stable-diffusion" / CKPT_FILE)
        h.send_json(200, [{"title": self.checkpoint_title, "model_name": CKPT_FILE.rsplit(".", 1)[0],
                           "hash": SHA256[:10], "sha256": SHA256, "filename": filename, "config": None}])

    def progress(self, h: Handler) -> None:
        s = self.state
        if s.job_count == 0:
            h.send_json(200, {"progress": 0.0, "eta_relative": 0.0, "state": s.dict(),
                              "current_image": None, "textinfo": s.textinfo, "current_task": None})
            return
        progress = 0.01
        if s.job_count > 0:
            progress += s.job_no / s.job_count
        if s.sampling_steps > 0 and s.job_count > 0:
            progress += 1 / s.job_count * s.sampling_step / s.sampling_steps
        since = time.time() - s.time_start
        eta_relative = since / progress - since
        h.send_json(200, {"progress": min(progress, 1), "eta_relative": eta_relative, "state": s.dict(),
                          "current_image": None, "textinfo": s.textinfo,
                          "current_task": getattr(self, "current_task", None)})

    def txt2img(self, h: Handler) -> None:
        req = h.json(default={}) or {}
        steps = int(req.get("steps", 20))
        task_id = req.get("force_task_id") or f"task({hashlib.md5(os.urandom(8)).hexdigest()[:15]})"
        with self.queue_lock:
            self.state.begin("scripts_txt2img")
            self.current_task = task_id
            try:
                if not self.torch.on_gpu:
                    self._error(h, 500, "RuntimeError", "", "Expected all tensors to be on the same "
                                "device, but found at least two devices, cuda:0 and cpu!")
                    return
                self.state.job_count = int(req.get("n_iter", 1))
                self.state.sampling_steps = steps
                self.torch.render(True)
                seconds = env_float("FAKE_A1111_RENDER_S", 0.6)
                for step in range(steps):
                    if self.state.interrupted or self.state.skipped:
                        break
                    CLOCK.sleep(seconds / steps)
                    self.state.sampling_step = step + 1
                self.torch.render(False)
            finally:
                self.state.end()
                self.current_task = None
        info = {"prompt": req.get("prompt", ""), "all_prompts": [req.get("prompt", "")],
                "seed": 2_735_177_201, "steps": steps, "sd_model_name": CKPT_FILE.rsplit(".", 1)[0],
                "sd_model_hash": SHA256[:10], "job_timestamp": self.state.job_timestamp}
        images = [PNG_1X1] if req.get("send_images", True) else []
        h.send_json(200, {"images": images, "parameters": req, "info": json.dumps(info)})

    def unload(self, h: Handler) -> None:
        self.torch.to_cpu()
        h.send_json(200, {})

    def reload(self, h: Handler) -> None:
        self.torch.to_gpu()
        h.send_json(200, {})

    def interrupt(self, h: Handler) -> None:
        self.state.interrupted = True
        h.send_json(200, {})

    def skip(self, h: Handler) -> None:
        self.state.skipped = True
        h.send_json(200, None)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.port is None:
        args_port = 7861 if args.nowebui else 7860
    else:
        args_port = args.port
    host = "0.0.0.0" if args.listen else "127.0.0.1"
    app = WebuiApp(args)
    servers = listen(app, [host], args_port)
    return serve(servers, cleanup=app.torch.alloc.clear,
                 banner=f"Running on local URL:  http://{host}:{args_port}")
