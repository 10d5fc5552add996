"""What a model server holds, as the snapshot carries it.

A model server's figures come from its own API, not from an agent: which
models it has loaded, how many bytes of each sit on a GPU where it says so,
whether it is generating now and since when it has been idle.  Unknown stays
None ("n/a"), never 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Outcomes of an unload through a server's API, measured from NVML.
FREED = "freed"  # the server's processes hold at least the bytes expected less, within the deadline
PENDING = "pending"  # the server accepted and frees later (its queue is busy)
NOT_FREED = "not freed"  # accepted, yet NVML shows no drop by the deadline
REFUSED = "refused"  # not sent: the server is busy, has no unload, or the model is unknown
FAILED = "failed"  # the server answered with an error or not at all
RELOADED = "reloaded"  # a reload the server carried out (A1111's checkpoint, vLLM woken)


@dataclass(frozen=True, slots=True)
class ServerModel:
    """One model a server has loaded."""

    id: str  # the server's own name for it: what its unload takes
    name: str
    vram_bytes: int | None  # on GPUs, as the server reports it (None: it reports none)
    size_bytes: int | None = None  # the model's whole size (Ollama's size; LM Studio's file)
    figure: str = ""  # where vram_bytes comes from: "size_vram", "torch allocated", ...
    gpu: int | None = None  # NVML index holding it (the server's processes' GPU), None: unknown
    state: str = "loaded"  # "loaded", "on cpu" (A1111 after an unload), "sleeping"
    expires_at: float | None = None  # epoch seconds the server unloads it by itself
    idle_since: float | None = None  # epoch seconds, from the server's own figures
    busy: bool | None = None  # generating now; None: the server does not say
    unload: str | None = None  # what an unload really does; None: the server offers none
    file: str | None = None  # the weights file its runner child was given (Ollama's blob)
    pid: int | None = None  # the child process holding it, where that is known (Ollama's runner)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Memory a server takes by design at start (vLLM, SGLang, TGI)."""

    fraction: float | None  # of the GPU's memory (vLLM's --gpu-memory-utilization)
    text: str  # "vLLM reserves 90 % of GPU 0 by design (--gpu-memory-utilization)"
    usage: float | None = None  # the server's own fullness of that pool (KV cache), 0..1


@dataclass(frozen=True, slots=True)
class ModelServer:
    """One recognised server: its processes, its API, and what it holds."""

    kind: str  # "ollama", "comfyui", "a1111", "forge", "lmstudio", "tgw", "vllm", ...
    label: str  # "Ollama", "ComfyUI", ...
    pid: int  # the process whose API it is
    pids: tuple[int, ...]  # it and the children holding its memory (Ollama's runner)
    user: str | None
    endpoint: str | None  # "http://127.0.0.1:11434"; None: found no port
    version: str | None = None
    models: tuple[ServerModel, ...] = ()
    busy: bool | None = None  # generating or rendering now; None: unknown
    idle_since: float | None = None  # epoch seconds its queue has been empty since
    can_unload: bool = False  # offers an unload through its API
    unload_note: str = ""  # what its unload does, or why there is none
    reservation: Reservation | None = None
    error: str | None = None  # why its API gave nothing this time ("no answer in 2 s")
    reachable: bool = False  # its API answered the latest probe
    # Its unload comes back by itself on the next request (Ollama, ComfyUI, Forge, LM
    # Studio): only these are unloaded automatically or by "Free all".
    reloads_on_use: bool = False
    owner: str = "you"  # "you", "service" (a system account) or "other" (another user)

    @property
    def display(self) -> str:
        return f"{self.label} {self.version}" if self.version else self.label

    def holds(self, pid: int) -> bool:
        return pid == self.pid or pid in self.pids

    def model(self, model_id: str) -> ServerModel | None:
        return next((m for m in self.models if m.id == model_id), None)


def holding(servers: Iterable[ModelServer], pid: int) -> ModelServer | None:
    """The server among ``servers`` whose processes include ``pid``."""
    return next((s for s in servers if s.holds(pid)), None)


@dataclass(frozen=True, slots=True)
class ServerUnload:
    """An unload through a server's API and what NVML showed after it."""

    pid: int
    kind: str
    model: str
    outcome: str  # FREED, PENDING, NOT_FREED, REFUSED or FAILED
    reason: str  # one line for people
    before_bytes: int | None = None  # the server's processes on NVML, before
    after_bytes: int | None = None  # at the outcome
    deadline_s: float = 0.0
    seconds: float | None = None  # until the outcome
    code: str | None = None  # a refusal's kind: "not_found" (no such server or model), ...

    @property
    def freed_bytes(self) -> int | None:
        if self.before_bytes is None or self.after_bytes is None:
            return None
        return max(0, self.before_bytes - self.after_bytes)

    @property
    def ok(self) -> bool:
        return self.outcome in (FREED, PENDING, RELOADED)
