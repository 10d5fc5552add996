"""Model servers that manage their own models: the agent never unloads theirs.

ComfyUI, AUTOMATIC1111 / Forge, text-generation-webui, vLLM and SGLang load,
move and free their models themselves and keep books on them (ComfyUI's
``model_management`` list of loaded models, A1111's ``sd_models`` checkpoint,
vLLM's and SGLang's engines and KV caches sized around the weights).  Weights
moved behind such a server's back would break those books: it would believe a
model is loaded, or size its memory for weights that are no longer there.  So
in such a process every unload is refused (manual, forced, the app's pressure
policy, the agent's own idle timer) with ``protocol.MANAGED``, and the report
names the server (``"managed_by"``); freeing the allocator cache stays
allowed: it changes no one's books.

The server is recognised from the names of the modules it has imported
(``sys.modules``) and nothing else: no import, no file read.  It is looked for
when a report is built or an unload asked for, since the server's modules are
imported after the agent starts; once found, the name is kept.  Standard
library only (loaded inside users' processes).
"""

from __future__ import annotations

import sys
from collections.abc import Container

#: (server, modules that must all be imported), first match wins.  Forge is
#: built on AUTOMATIC1111's ``modules`` package, so it comes before it; SGLang
#: imports parts of vLLM, so it comes before vLLM.
RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ComfyUI", ("comfy.model_management",)),
    ("Forge", ("modules_forge", "modules.sd_models", "modules.shared")),
    ("AUTOMATIC1111", ("modules.sd_models", "modules.shared")),
    ("text-generation-webui", ("modules.text_generation", "modules.shared")),
    ("SGLang", ("sglang.srt",)),
    ("vLLM", ("vllm.engine",)),
    ("vLLM", ("vllm.entrypoints",)),
)

_found: list[str] = []  # the server once recognised (a process does not stop being one)


def recognise(modules: Container[str]) -> str | None:
    """The server whose modules ``modules`` (module names) holds, or None."""
    for name, needed in RULES:
        if all(m in modules for m in needed):
            return name
    return None


def server() -> str | None:
    """The model server this process runs, or None; never raises."""
    if _found:
        return _found[0]
    try:
        name = recognise(sys.modules)
    except Exception:
        return None
    if name is not None:
        _found.append(name)
    return name


def blocker() -> str | None:
    """The blocker label of every model in this process (``managed by ComfyUI``)."""
    name = server()
    return None if name is None else "managed by %s" % name


def refusal(name: str) -> str:
    """The sentence a refused unload carries."""
    return ("managed by %s: unloading it behind its back would break its bookkeeping; "
            "use its unload" % name)
