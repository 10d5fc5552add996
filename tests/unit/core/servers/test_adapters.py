"""Adapters read each server's answers as its API writes them: the shapes
here come from the servers' docs (reference notes, section D); answers that
are missing or of the wrong type are unknown, never 0."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.core.servers.adapters import ADAPTERS
from app.core.servers.adapters.reserving import LLAMACPP_NONE, TGI_NONE, VLLM_NO_SLEEP, VLLM_SLEEP
from app.core.servers.http import LocalHttp
from app.core.servers.recognise import Found

METRICS = """# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.3725
"""


class Routes(BaseHTTPRequestHandler):
    answers: dict[str, object] = {}
    posted: list[tuple[str, object]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._send(self.answers.get(self.path.split("?")[0], 404))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        Routes.posted.append((self.path, body))
        self._send(self.answers.get("POST " + self.path.split("?")[0], {}))

    def _send(self, data: object) -> None:
        if data == 404:
            self.send_response(404)
            self.end_headers()
            return
        raw = data.encode() if isinstance(data, str) else json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def server():
    Routes.answers, Routes.posted = {}, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Routes)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def found(kind: str, port: int, *options: tuple[str, str]) -> Found:
    return Found(kind, 10, (10,), "ada", "127.0.0.1", port, options=options)


def test_vllm_reserves_by_design_and_offers_sleep_only_where_enabled(server) -> None:
    Routes.answers = {"/version": {"version": "0.11.0"}, "/metrics": METRICS,
                      "/v1/models": {"object": "list", "data": [{"id": "Qwen/Qwen2.5-7B-Instruct",
                                                                 "object": "model"}]}}
    http = LocalHttp(f"http://127.0.0.1:{server}")
    plain = ADAPTERS["vllm"].probe(found("vllm", server), http)
    assert plain.version == "0.11.0" and not plain.can_unload
    assert plain.unload_note == VLLM_NO_SLEEP and plain.models[0].unload is None
    assert plain.reservation.fraction == 0.9 and plain.reservation.usage == pytest.approx(0.3725)
    assert "by design" in plain.reservation.text
    asleep = ADAPTERS["vllm"].probe(found("vllm", server, ("gpu_memory_utilization", "0.85"),
                                          ("sleep_mode", ""), ("dev_mode", "1")), http)
    assert asleep.can_unload and asleep.unload_note == VLLM_SLEEP
    assert "requests in flight aborted" in asleep.models[0].unload
    assert asleep.reservation.fraction == 0.85 and asleep.models[0].state == "loaded"
    ADAPTERS["vllm"].unload(http, asleep.models[0])
    Routes.answers["/is_sleeping"] = {"is_sleeping": True}
    slept = ADAPTERS["vllm"].probe(found("vllm", server, ("sleep_mode", ""), ("dev_mode", "1")),
                                   http)
    assert slept.models[0].state == "sleeping"
    ADAPTERS["vllm"].reload(http, slept.models[0])
    assert Routes.posted == [("/sleep?level=1", {}), ("/wake_up", {})]


def test_llama_cpp_and_tgi_say_they_offer_no_unload(server) -> None:
    Routes.answers = {"/props": {"model_path": "/models/Meta-Llama-3-8B.Q4_K_M.gguf",
                                 "build_info": "b4500-1234abcd"},
                      "/info": {"model_id": "bigscience/bloom-560m", "version": "3.3.4"}}
    http = LocalHttp(f"http://127.0.0.1:{server}")
    llama = ADAPTERS["llamacpp"].probe(found("llamacpp", server), http)
    assert (llama.models[0].name, llama.version) == ("Meta-Llama-3-8B.Q4_K_M.gguf", "b4500-1234abcd")
    assert not llama.can_unload and llama.unload_note == LLAMACPP_NONE
    tgi = ADAPTERS["tgi"].probe(found("tgi", server), http)
    assert not tgi.can_unload and tgi.unload_note == TGI_NONE and tgi.reservation is not None


def test_shapes_that_are_wrong_are_unknown_not_zero(server) -> None:
    Routes.answers = {
        "/system_stats": {"system": {"comfyui_version": 7},
                          "devices": [{"type": "cuda", "torch_vram_total": "big"}]},
        "/queue": {"queue_running": [], "queue_pending": []},
        "/api/version": {"version": "0.12.3"},
        "/api/ps": {"models": [{"name": "qwen2.5:7b", "size_vram": -1, "size": True,
                                "expires_at": "soon"}, "junk"]},
        "POST /api/show": {"modelfile": "FROM /m/blobs/sha256-abc\n"},
    }
    http = LocalHttp(f"http://127.0.0.1:{server}")
    comfy = ADAPTERS["comfyui"].probe(found("comfyui", server), http)
    assert comfy.version is None and comfy.models[0].vram_bytes is None and comfy.busy is False
    ollama = ADAPTERS["ollama"].probe(found("ollama", server), http)
    (model,) = ollama.models
    assert (model.vram_bytes, model.size_bytes, model.expires_at) == (None, None, None)
    assert model.file == "/m/blobs/sha256-abc"


def test_tgw_unloads_with_its_admin_key(server) -> None:
    from app.core.servers.http import Auth
    from app.core.servers.types import ServerModel

    http = LocalHttp(f"http://127.0.0.1:{server}", Auth(bearer="k", admin="adm"))
    seen: list[str | None] = []
    original = Routes.do_POST

    def remember(self) -> None:
        seen.append(self.headers.get("Authorization"))
        original(self)

    Routes.do_POST = remember  # type: ignore[method-assign]
    try:
        ADAPTERS["tgw"].unload(http, ServerModel("m", "m", None))
    finally:
        Routes.do_POST = original  # type: ignore[method-assign]
    assert seen == ["Bearer adm"]
