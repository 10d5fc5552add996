"""LLM servers whose APIs unload a named model but report no VRAM:
LM Studio and text-generation-webui.  What they hold on a GPU is what NVML
shows for their processes; their model rows carry no byte figure of their own."""

from __future__ import annotations

from app.core.servers.adapters.base import Ack, Adapter, Probe, items, mapping, number, text
from app.core.servers.http import LocalHttp
from app.core.servers.recognise import Found
from app.core.servers.types import ServerModel

LMSTUDIO_UNLOAD = ("LM Studio unloads the instance; a request naming the model loads it "
                   "again (just-in-time loading)")
TGW_UNLOAD = ("text-generation-webui unloads its model; load it again from its Model tab "
              "or its API")


class LmStudio(Adapter):
    kind = "lmstudio"
    reloads_on_use = True  # just-in-time loading, on by default

    def probe(self, found: Found, http: LocalHttp) -> Probe:
        listing = mapping(http.get("/api/v1/models"))
        models = []
        for entry in items(listing.get("models")):
            entry = mapping(entry)
            name = text(entry.get("display_name")) or text(entry.get("key")) or "model"
            for inst in items(entry.get("loaded_instances")):
                inst_id = text(mapping(inst).get("id"))
                if inst_id:
                    models.append(ServerModel(
                        id=inst_id, name=name, vram_bytes=None,
                        size_bytes=number(entry.get("size_bytes")), figure="file size",
                        unload=LMSTUDIO_UNLOAD))
        return Probe(models=tuple(models), can_unload=True, unload_note=LMSTUDIO_UNLOAD)

    def unload(self, http: LocalHttp, model: ServerModel) -> Ack:
        http.post("/api/v1/models/unload", {"instance_id": model.id})
        return Ack(True, f"LM Studio unloaded {model.id}")


class TextGenWebUi(Adapter):
    kind = "tgw"

    def probe(self, found: Found, http: LocalHttp) -> Probe:
        info = mapping(http.get("/v1/internal/model/info"))
        name = text(info.get("model_name"))
        models: tuple[ServerModel, ...] = ()
        if name and name != "None":
            loader = text(info.get("loader"))
            models = (ServerModel(id=name, name=name + (f" ({loader})" if loader else ""),
                                  vram_bytes=None, unload=TGW_UNLOAD),)
        return Probe(models=models, can_unload=True, unload_note=TGW_UNLOAD)

    def unload(self, http: LocalHttp, model: ServerModel) -> Ack:
        http.post("/v1/internal/model/unload", admin=True)
        return Ack(True, "text-generation-webui unloaded its model")


__all__ = ["LmStudio", "TextGenWebUi"]
