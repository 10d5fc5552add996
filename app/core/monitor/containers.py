"""Which container a GPU process runs in, read from its cgroup path.

The driver lists pids; ``nvidia-smi`` users then ask "whose job is that?".  On
a shared box the answer is usually a container, and ``/proc/<pid>/cgroup`` says
which one without privileges or talking to any daemon.  Qt-free and
stdlib-only: the sampler thread calls this for each new pid, so everything
here is cheap, never blocks on a socket and never raises (a process may exit
between the driver listing it and us reading /proc).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from app.core.monitor.samples import Container

_HEX64 = re.compile(r"[0-9a-f]{64}")
# One container's own cgroup: "<prefix>-<id>.scope" with the systemd cgroup
# driver (docker, podman, kubelet+containerd/cri-o, nerdctl), "<prefix>-<id>"
# with cgroupfs (podman's /libpod_parent, cri-o).  "-conmon-" is the runtime's
# monitor process, which sits beside the container but is not in it.
_SCOPE = re.compile(
    r"(docker|libpod|cri-containerd|crio|nerdctl)-(conmon-)?([0-9a-f]{64})(?:\.scope)?")
_SCOPE_RUNTIME = {
    "docker": "docker",
    "libpod": "podman",
    "cri-containerd": "containerd",
    "crio": "cri-o",
    "nerdctl": "containerd",  # nerdctl --cgroup-manager=systemd: "<slice>:nerdctl:<id>"
}
# The kubelet's pod cgroup: "pod<uid>" (cgroupfs),
# "kubepods-<qos>-pod<uid_with_underscores>.slice" (systemd; kind prefixes
# "kubelet-").  Static pods have a 32-hex uid (a config hash).
_POD = re.compile(
    r"(?:[\w.-]*-)?pod([0-9a-f]{8}(?:[-_][0-9a-f]{4}){3}[-_][0-9a-f]{12}|[0-9a-f]{32})"
    r"(?:\.slice)?")
_LXC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_LXC_PAYLOAD = "lxc.payload."  # LXC >= 4 ("lxc.monitor.<name>" is the monitor: not matched)

PODMAN_MIN_REREAD_S = 1.0  # a busy host rewrites containers.json at every create


def parse_cgroup(text: str) -> Container | None:
    """The container named by a ``/proc/<pid>/cgroup`` text, or None.

    Lines are ``hierarchy:controllers:path`` (v1: many lines, v2: ``0::path``);
    the first line whose path names a container wins, since v1 controllers
    may be left at ``/`` while others carry the container's path.
    """
    if not isinstance(text, str):
        return None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            found = _parse_path(parts[2])
            if found is not None:
                return found
    return None


def _parse_path(path: str) -> Container | None:
    """Walk the path from the leaf up, so the innermost container wins when nested."""
    segs = [s for s in path.strip().split("/") if s]
    for i in range(len(segs) - 1, -1, -1):
        seg, parent = segs[i], (segs[i - 1] if i else "")
        m = _SCOPE.fullmatch(seg)
        if m:
            if m.group(2):  # conmon: outside the container; an outer one may still hold it
                continue
            return Container(_SCOPE_RUNTIME[m.group(1)], m.group(3), pod=_pod_uid(parent, path))
        if _HEX64.fullmatch(seg):
            if parent == "docker":  # docker's cgroupfs driver: /docker/<id>
                return Container("docker", seg)
            pod = _pod_uid(parent, path)
            if pod is not None:
                # kubelet's cgroupfs driver: /kubepods/<qos>/pod<uid>/<id>.  The path does
                # not say which runtime; containerd is the default of k3s, kubeadm and the
                # managed clouds since dockershim's removal (cri-o spells "crio-<id>").
                return Container("containerd", seg, pod=pod)
            continue
        if seg.startswith(_LXC_PAYLOAD):
            name: str | None = seg[len(_LXC_PAYLOAD):]
        else:  # LXC 3 "/lxc.payload/<name>", older LXC and LXD "/lxc/<name>"
            name = seg if parent in ("lxc", "lxc.payload") else None
        if name and _LXC_NAME.fullmatch(name):
            return Container("lxc", name, name=name)
    return None


def _pod_uid(segment: str, path: str) -> str | None:
    """The pod uid when ``segment`` is a kubelet pod cgroup (the container's parent)."""
    if "kubepods" not in path:
        return None
    m = _POD.fullmatch(segment)
    return m.group(1).replace("_", "-") if m else None


def read_container(pid: int, proc_root: str = "/proc",
                   names: ContainerNames | None = None) -> Container | None:
    """The container ``pid`` runs in (one small read), with its name if ``names`` knows it."""
    path = os.path.join(proc_root, str(pid), "cgroup")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except (OSError, ValueError):
        return None  # exited, hidepid=2, not Linux
    found = parse_cgroup(text)
    if found is not None and found.name is None and names is not None:
        name = names.name(found)
        if name is not None:
            found = dataclasses.replace(found, name=name)
    return found


def _read_json(path: str) -> Any:
    """The parsed file, or None when missing, unreadable or not JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError, RecursionError):
        return None


def _default_podman_roots() -> tuple[str, ...]:
    data = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data):  # the XDG spec says to ignore relative values
        data = os.path.join(os.path.expanduser("~"), ".local", "share")
    return (
        os.path.join(data, "containers", "storage", "overlay-containers"),  # rootless
        "/var/lib/containers/storage/overlay-containers",  # rootful (root-only)
    )


class _PodmanStore:
    """One ``containers.json`` (id -> first name), re-read only when its mtime moves."""

    __slots__ = ("path", "mtime", "names", "last_read")

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, "containers.json")
        self.mtime: int | None = None
        self.names: dict[str, str] = {}
        self.last_read = float("-inf")

    def lookup(self, cid: str, now: float) -> tuple[str | None, bool]:
        """(name, settled); not settled when the file changed less than a
        second after the last read."""
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError:
            return None, True
        if mtime != self.mtime:
            if now - self.last_read < PODMAN_MIN_REREAD_S:
                name = self.names.get(cid)
                return name, name is not None
            self.last_read, self.mtime = now, mtime
            self.names = _podman_names(_read_json(self.path))
        return self.names.get(cid), True


def _podman_names(data: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in data if isinstance(data, list) else ():
        if isinstance(item, dict):
            cid, names = item.get("id"), item.get("names")
            if (isinstance(cid, str) and isinstance(names, list) and names
                    and isinstance(names[0], str)):
                out[cid] = names[0]
    return out


class ContainerNames:
    """Human names for containers, from local files readable without privileges.

    Cached per (runtime, id) for the life of the object, misses included: a
    name never changes for an id, and a GPU process list repeats the same few
    containers every tick.  Docker's per-container config is usually root-only,
    so for normal users docker names are mostly None.  Use from one thread.
    """

    def __init__(
        self,
        docker_root: str = "/var/lib/docker/containers",
        podman_roots: Sequence[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._docker_root = docker_root
        roots = _default_podman_roots() if podman_roots is None else podman_roots
        self._podman = [_PodmanStore(r) for r in roots]
        self._clock = clock
        self._cache: dict[tuple[str, str], str | None] = {}

    def name(self, container: Container) -> str | None:
        """The container's name, or None when no readable local source gives it."""
        if container.name is not None:
            return container.name
        key = (container.runtime, container.id)
        if key in self._cache:
            return self._cache[key]
        settled = True
        name: str | None = None
        if container.runtime == "docker":
            name = self._docker(container.id)
        elif container.runtime == "podman":
            now = self._clock()
            for store in self._podman:  # rootless first: the one a normal user can read
                name, fresh = store.lookup(container.id, now)
                if name is not None:
                    break
                settled = settled and fresh
        if settled or name is not None:
            self._cache[key] = name
        return name

    def _docker(self, cid: str) -> str | None:
        if not _HEX64.fullmatch(cid):  # the id becomes a path: only a real one
            return None
        data = _read_json(os.path.join(self._docker_root, cid, "config.v2.json"))
        name = data.get("Name") if isinstance(data, dict) else None
        if not isinstance(name, str):
            return None
        return name.lstrip("/") or None  # docker stores "/trainer"
