"""A model server's idle models as a Doctor finding whose fixes unload them
through the server; generating ones, recent ones and servers without an
unload give none."""

from __future__ import annotations

from app.core.diagnosis.server_advice import idle_server_models
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.servers.types import ModelServer, ServerModel

NOW = 2_000_000.0


def snapshot(*servers: ModelServer) -> Snapshot:
    gpu = GpuSample(0, "RTX 4090", "GPU-1", 25_757_220_864, 20_000_000_000, None,
                    processes=(ProcessSample(950, 7_000_000_000),))
    return Snapshot(NOW, 1.0, "nvml", "580", (gpu,), servers=servers)


def ollama(*models: ServerModel, can_unload: bool = True) -> ModelServer:
    return ModelServer("ollama", "Ollama", 900, (900, 950), "ollama", "http://127.0.0.1:11434",
                       "0.12.3", models, can_unload=can_unload, unload_note="keep_alive 0",
                       reachable=True)


def model(name: str, idle_s: float | None, busy: bool | None = False,
          vram: int | None = 4_683_075_271) -> ServerModel:
    return ServerModel(name, name, vram, gpu=0, busy=busy,
                       idle_since=None if idle_s is None else NOW - idle_s, unload="frees it")


def test_idle_models_are_one_finding_with_an_unload_fix_each() -> None:
    (d,) = idle_server_models(snapshot(ollama(model("qwen2.5:7b", 1800), model("llama", 60),
                                              model("busy", None, busy=True))), 600)
    assert (d.kind, d.pid, d.gpu) == ("idle_model", 900, "0")
    assert d.title == "Ollama 0.12.3 holds 1 idle model (4.4 GiB)"
    (fix,) = d.fixes
    assert (fix.action, fix.pid, fix.model, fix.gain_bytes) == (
        "unload_model", 900, "qwen2.5:7b", 4_683_075_271)
    assert "idle 30 min 00 s" in fix.text and "frees it" in fix.text


def test_nothing_when_nothing_is_idle_long_enough_or_there_is_no_unload() -> None:
    assert idle_server_models(snapshot(ollama(model("m", 60))), 600) == []
    assert idle_server_models(snapshot(ollama(model("m", 3600), can_unload=False)), 600) == []
    assert idle_server_models(snapshot(ollama(model("m", None, busy=None))), 600) == []


def test_an_unknown_size_is_named_so() -> None:
    (d,) = idle_server_models(snapshot(ollama(model("m", 3600, vram=None))), 600)
    assert d.title.endswith("(n/a)") and d.figures["idle_model_bytes"] is None
