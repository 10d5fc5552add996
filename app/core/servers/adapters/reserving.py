"""Servers that take their memory at start by design (vLLM, SGLang, TGI) and
llama.cpp's server, none of which unloads through its API by default.

A pre-allocating server shows ~90 % used in NVML for as long as it lives:
that is its pool, not a leak, and its real fullness is its own KV-cache
usage.  The reservation says so, and the alerts for its GPU say so too.
"""

from __future__ import annotations

import dataclasses
import re

from app.core.servers.adapters.base import Ack, Adapter, Probe, items, mapping, text
from app.core.servers.http import LocalHttp, ServerHttpError
from app.core.servers.recognise import Found
from app.core.servers.types import Reservation, ServerModel

VLLM_SLEEP = ("vLLM sleep (level 1): weights to host RAM (needs as much free RAM), KV cache "
              "discarded, requests in flight aborted; it wakes on Reload (POST /wake_up), not "
              "by itself")
VLLM_NO_SLEEP = ("vLLM offers no unload unless started with --enable-sleep-mode and "
                 "VLLM_SERVER_DEV_MODE=1; stop it to free its memory")
LLAMACPP_NONE = ("llama.cpp's server has no unload API: stop it, or start it with "
                 "--sleep-idle-seconds N to free its model when idle")
TGI_NONE = "TGI has no unload API: its model is fixed per process; stop it to free its memory"
SGLANG_NONE = ("SGLang frees memory only when started with --enable-memory-saver "
               "(release_memory_occupation); stop it to free its memory")

_KV = re.compile(r"^vllm:(?:kv_cache_usage_perc|gpu_cache_usage_perc)(?:\{[^}]*\})?\s+"
                 r"([0-9.eE+-]+)\s*$", re.M)


def _fraction(value: str | None, default: float | None) -> float | None:
    try:
        f = float(value) if value else default
    except ValueError:
        return default
    return f if f is not None and 0.0 < f <= 1.0 else default


def _model_ids(http: LocalHttp) -> tuple[ServerModel, ...]:
    data = mapping(http.get("/v1/models"))
    out = []
    for m in items(data.get("data")):
        mid = text(mapping(m).get("id"))
        if mid:
            out.append(ServerModel(id=mid, name=mid, vram_bytes=None, figure="reserved pool"))
    return tuple(out)


class Vllm(Adapter):
    kind = "vllm"
    deadline_s = 60.0

    def probe(self, found: Found, http: LocalHttp) -> Probe:
        version = text(mapping(http.get("/version")).get("version"))
        usage = None
        try:
            metrics = http.get("/metrics")
            match = _KV.search(metrics) if isinstance(metrics, str) else None
            usage = float(match.group(1)) if match else None
        except (ServerHttpError, ValueError):
            usage = None
        fraction = _fraction(found.option("gpu_memory_utilization"), 0.9)
        sleep = found.option("sleep_mode") is not None and found.option("dev_mode") == "1"
        note = VLLM_SLEEP if sleep else VLLM_NO_SLEEP
        asleep = False
        if sleep:
            try:
                asleep = mapping(http.get("/is_sleeping")).get("is_sleeping") is True
            except ServerHttpError:
                asleep = False  # an older vLLM: its state is not said
        models = tuple(dataclasses.replace(m, unload=note if sleep else None,
                                           state="sleeping" if asleep else "loaded")
                       for m in _model_ids(http))
        pct = f"{fraction:.0%}" if fraction is not None else "most"
        return Probe(version=version, models=models, can_unload=sleep, unload_note=note,
                     reservation=Reservation(
                         fraction, f"vLLM reserves {pct} of the GPU by design "
                         "(--gpu-memory-utilization); its KV cache is the real fullness",
                         usage))

    def unload(self, http: LocalHttp, model: ServerModel) -> Ack:
        http.post("/sleep?level=1", timeout_s=120.0)
        return Ack(True, "vLLM is asleep (level 1)")

    def reload(self, http: LocalHttp, model: ServerModel) -> Ack:
        http.post("/wake_up", timeout_s=120.0)
        return Ack(True, "vLLM is awake")


class SgLang(Adapter):
    kind = "sglang"

    def probe(self, found: Found, http: LocalHttp) -> Probe:
        info = mapping(http.get("/get_model_info"))
        path = text(info.get("model_path"))
        models = (ServerModel(id=path, name=path, vram_bytes=None, figure="reserved pool"),) \
            if path else ()
        fraction = _fraction(found.option("mem_fraction_static"), None)
        pct = f"{fraction:.0%}" if fraction is not None else "most"
        return Probe(models=models, unload_note=SGLANG_NONE, reservation=Reservation(
            fraction, f"SGLang reserves {pct} of the GPU by design (--mem-fraction-static)"))


class LlamaCpp(Adapter):
    kind = "llamacpp"

    def probe(self, found: Found, http: LocalHttp) -> Probe:
        props = mapping(http.get("/props"))
        path = text(props.get("model_path"))
        name = path.replace("\\", "/").rsplit("/", 1)[-1] if path else None
        models = (ServerModel(id=name, name=name, vram_bytes=None),) if name else ()
        return Probe(version=text(props.get("build_info")), models=models,
                     unload_note=LLAMACPP_NONE)


class Tgi(Adapter):
    kind = "tgi"

    def probe(self, found: Found, http: LocalHttp) -> Probe:
        info = mapping(http.get("/info"))
        model = text(info.get("model_id"))
        models = (ServerModel(id=model, name=model, vram_bytes=None, figure="reserved pool"),) \
            if model else ()
        return Probe(version=text(info.get("version")), models=models, unload_note=TGI_NONE,
                     reservation=Reservation(None, "TGI sizes its KV cache to fill the GPU "
                                             "at start, by design"))

    def reload(self, http: LocalHttp, model: ServerModel) -> Ack:
        return Ack(False, TGI_NONE)


__all__ = ["LlamaCpp", "SgLang", "Tgi", "Vllm"]
