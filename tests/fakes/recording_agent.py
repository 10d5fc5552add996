"""A ``FakeAgent`` that answers ``record`` as ``app.agent.recording`` does
(``reply``: the result; ``error``: (code, message) instead; ``delay_s``): an
accepted recording's connection first gets ``record_started`` (``heralds``
False: an older agent, which sends none)."""

from __future__ import annotations

import time
from typing import Any

from app.agent import protocol
from tests.fakes.fake_agent import FakeAgent

MiB = 1 << 20


def record_reply(path: str = "/state/recordings/123-20250101-120000-000.pickle"
                 ) -> dict[str, Any]:
    return {"path": path, "entries": 48213, "seconds": 5.0, "device": None, "truncated": False,
            "sites": [{"site": "train.py:42 in step", "bytes": 3 * 1024 * MiB, "count": 120,
                       "live_bytes": 512 * MiB},
                      {"site": "model.py:88 in forward", "bytes": 700 * MiB, "count": 4000,
                       "live_bytes": 0}]}


class RecordingAgent(FakeAgent):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reply: dict[str, Any] = record_reply()
        self.error: tuple[str, str] | None = None
        self.record_delay_s = 0.0
        self.heralds = True

    def _heralds(self, method: str, params: dict) -> list[dict]:
        if method != "record" or self.error is not None or not self.heralds:
            return []
        return [protocol.event(protocol.RECORD_STARTED,
                               {"seconds": params.get("seconds"),
                                "max_entries": params.get("max_entries", 100_000)})]

    def _answer(self, rid: Any, method: str, params: dict) -> dict:
        if method != "record":
            return super()._answer(rid, method, params)
        if self.record_delay_s:
            time.sleep(self.record_delay_s)
        if self.error is not None:
            return protocol.error(rid, *self.error)
        return protocol.result(rid, self.reply)
