"""One adapter per model server: read what it holds, unload through its API."""

from __future__ import annotations

from app.core.servers.adapters.base import Ack, Adapter, Probe
from app.core.servers.adapters.diffusion import A1111, ComfyUI
from app.core.servers.adapters.llm import LmStudio, TextGenWebUi
from app.core.servers.adapters.ollama import Ollama
from app.core.servers.adapters.reserving import LlamaCpp, SgLang, Tgi, Vllm

ADAPTERS: dict[str, Adapter] = {
    "ollama": Ollama(), "comfyui": ComfyUI(), "a1111": A1111("a1111"), "forge": A1111("forge"),
    "lmstudio": LmStudio(), "tgw": TextGenWebUi(), "vllm": Vllm(), "sglang": SgLang(),
    "llamacpp": LlamaCpp(), "tgi": Tgi(),
}

__all__ = ["ADAPTERS", "Ack", "Adapter", "Probe"]
