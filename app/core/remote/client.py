"""A server's verbs as typed calls: what the CLI, the remote source and the
remote agent directory use, whatever the transport."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from app.core.agents.recording import RecordResult
from app.core.agents.types import AgentEntry, AgentReport, FreeCacheResult, ModelActionResult
from app.core.diagnosis.types import Diagnosis, OomReport
from app.core.monitor.samples import Snapshot
from app.core.remote.address import parse_address
from app.core.remote.errors import RemoteError
from app.core.remote.policy import POLICY_FIELDS, RemotePolicy
from app.core.wire.codec import WireError
from app.core.wire.delta import apply
from app.core.wire.snapshot import WireVersionError, decode, decode_snapshot


class Transport(Protocol):
    @property
    def url(self) -> str: ...

    def call(self, method: str, params: dict[str, Any] | None = None,
             timeout_s: float | None = None) -> Any: ...

    def frames(self) -> Iterator[dict[str, Any]]: ...

    def close(self) -> None: ...


class RemoteClient:
    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.url = transport.url

    def close(self) -> None:
        self.transport.close()

    def _typed(self, tp: Any, data: Any) -> Any:
        try:
            return decode(tp, data)
        except WireError as exc:
            raise RemoteError(f"{self.url} sent a malformed answer: {exc}", "protocol") from None

    # -- reads ------------------------------------------------------------------
    def hello(self) -> dict[str, Any]:
        result: dict[str, Any] = self.transport.call("hello")
        return result

    def snapshot(self) -> Snapshot:
        data = self.transport.call("snapshot")
        try:
            return decode_snapshot(data, self.url)
        except WireError as exc:
            raise _wire_error(self.url, exc) from None

    def snapshots(self, on_frame: Callable[[], None] | None = None) -> Iterator[Snapshot]:
        """Every new snapshot, as the server makes them (a ``full`` frame, then
        patches); RemoteUnavailable when the stream ends.  ``on_frame`` is
        called for every frame, pings included (the heartbeat)."""
        encoded: dict[str, Any] | None = None
        seq = None
        for frame in self.transport.frames():
            if on_frame is not None:
                on_frame()
            kind = frame.get("type")
            try:
                if kind == "full":
                    encoded, seq = frame.get("snapshot"), frame.get("seq")
                elif kind == "delta" and encoded is not None:
                    if seq is None or frame.get("seq") != seq + 1:
                        # A frame went missing: a patch must not go on the wrong base.
                        raise RemoteError(f"{self.url}: the stream skipped a snapshot",
                                          "protocol")
                    encoded, seq = apply(encoded, frame.get("patch")), frame["seq"]
                else:
                    continue
                yield decode_snapshot(encoded, self.url)
            except WireError as exc:
                raise _wire_error(self.url, exc) from None

    def agents(self) -> list[tuple[AgentEntry, AgentReport | None, str | None]]:
        out = []
        for item in self.transport.call("agents") or []:
            entry = self._typed(AgentEntry, item.get("entry"))
            report = None if item.get("report") is None else \
                self._typed(AgentReport, item["report"])
            out.append((entry, report, item.get("error")))
        return out

    def history(self, since_s: float, pid: int | None = None, gpu: int | None = None,
                timeout_s: float = 60.0) -> list[dict[str, Any]]:
        params = {"since_s": since_s, "pid": pid, "gpu": gpu}
        result: list[dict[str, Any]] = self.transport.call(
            "history", {k: v for k, v in params.items() if v is not None}, timeout_s)
        return result

    def doctor(self, pid: int | None = None) -> dict[str, Any]:
        data = self.transport.call("doctor", {} if pid is None else {"pid": pid})
        return {**data, "diagnoses": self._typed(list[Diagnosis], data.get("diagnoses")),
                "oom_reports": self._typed(list[OomReport], data.get("oom_reports"))}

    def policy(self) -> RemotePolicy:
        """The server's pressure policy, and whether this caller may change it."""
        result: RemotePolicy = self._typed(RemotePolicy, self.transport.call("policy"))
        return result

    # -- actions (the server checks the caller owns ``pid``) ----------------------
    def set_policy(self, **changes: Any) -> RemotePolicy:
        """Change the server's pressure policy (any of ``enabled``, ``threshold``,
        ``rearm``, ``min_idle_s``, ``min_interval_s``; None: kept); the policy
        as the server now runs it, or RemoteError with the server's refusal."""
        unknown = sorted(set(changes) - set(POLICY_FIELDS))
        if unknown:
            raise TypeError(f"set_policy() got an unexpected keyword {unknown[0]!r}")
        body = {k: v for k, v in changes.items() if v is not None}
        result: RemotePolicy = self._typed(RemotePolicy, self.transport.call("set_policy", body))
        return result

    def free_cache(self, pid: int, timeout_s: float) -> FreeCacheResult:
        return self._typed(FreeCacheResult, self._act("free_cache", pid, timeout_s))

    def collect_garbage(self, pid: int, timeout_s: float) -> dict[str, Any]:
        result: dict[str, Any] = self._act("collect_garbage", pid, timeout_s)
        return result

    def unload(self, pid: int, model: str, to: str | None, force: bool,
               timeout_s: float) -> ModelActionResult:
        return self._typed(ModelActionResult, self._act(
            "unload", pid, timeout_s, model=model, to=to, force=force))

    def reload(self, pid: int, model: str, timeout_s: float) -> ModelActionResult:
        return self._typed(ModelActionResult, self._act("reload", pid, timeout_s, model=model))

    def pin(self, pid: int, model: str, pinned: bool, timeout_s: float) -> ModelActionResult:
        return self._typed(ModelActionResult, self._act("pin", pid, timeout_s, model=model,
                                                        pinned=pinned))

    def set_idle_unload(self, pid: int, seconds: float | None,
                        timeout_s: float) -> dict[str, Any]:
        result: dict[str, Any] = self._act("set_idle_unload", pid, timeout_s, seconds=seconds)
        return result

    def record(self, pid: int, seconds: float, max_entries: int | None) -> RecordResult:
        return self._typed(RecordResult, self._act("record", pid, seconds + 60.0,
                                                   seconds=seconds, max_entries=max_entries))

    def terminate(self, pid: int, create_time: float | None,
                  grace_s: float | None = None) -> dict[str, Any]:
        params = {"pid": pid, "create_time": create_time, "grace_s": grace_s}
        result: dict[str, Any] = self.transport.call(
            "terminate", {k: v for k, v in params.items() if v is not None}, 90.0)
        return result

    def _act(self, method: str, pid: int, timeout_s: float, **params: Any) -> Any:
        body = {"pid": pid, **{k: v for k, v in params.items() if v is not None}}
        if method != "record":
            body["timeout_s"] = min(timeout_s, 300.0)
        if method == "set_idle_unload":
            body["seconds"] = params.get("seconds")
        return self.transport.call(method, body, timeout_s + 10.0)


def _wire_error(url: str, exc: WireError) -> RemoteError:
    if isinstance(exc, WireVersionError):
        return RemoteError(str(exc), "version")
    return RemoteError(f"{url} sent a malformed snapshot: {exc}", "protocol")


def open_client(url: str, token: str | None = None, ca_file: str | None = None,
                remote_command: str | None = None, timeout_s: float = 20.0) -> RemoteClient:
    """A client of the server at ``url`` (ValueError for a bad address,
    RemoteError when it cannot be reached)."""
    address = parse_address(url)
    if address.scheme == "ssh":
        from app.core.remote.ssh_transport import SshTransport

        ssh = SshTransport(address, remote_command, timeout_s=timeout_s)
        ssh.open()
        return RemoteClient(ssh)
    from app.core.remote.http_transport import HttpTransport

    return RemoteClient(HttpTransport(address, token, ca_file, timeout_s))
