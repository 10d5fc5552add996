"""Peer credentials: only a peer of our own uid (or root) may talk to an AF_UNIX agent,
and the app talks only to an agent of its own uid, in the process its
registry entry names (``peer_credentials``)."""

from __future__ import annotations

import os
import socket
import struct
import sys
from typing import Any


def peer_allowed(peer: int | None, own_uid: int) -> bool:
    """Only a peer of our own uid, or root (a system-wide server; root can
    read our memory anyway), may talk to us (unknown peer: refused)."""
    return isinstance(peer, int) and not isinstance(peer, bool) and peer in (own_uid, 0)


_getpeereid: Any = None
if sys.platform == "darwin" or "bsd" in sys.platform:
    try:
        import ctypes
        import ctypes.util
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        _getpeereid = _libc.getpeereid
        _getpeereid.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint32),
                                ctypes.POINTER(ctypes.c_uint32)]
    except Exception:
        _getpeereid = None

PEERCRED_SUPPORTED = hasattr(socket, "SO_PEERCRED") or _getpeereid is not None


#: getsockopt level and option of the peer's pid on macOS (<sys/un.h>: SOL_LOCAL, LOCAL_PEERPID).
_SOL_LOCAL, _LOCAL_PEERPID = 0, 2


def peer_credentials(sock: socket.socket) -> tuple[int | None, int | None]:
    """(pid, uid) of the connected peer (SO_PEERCRED; getpeereid on macOS
    and the BSDs, with LOCAL_PEERPID on macOS); None where unknown."""
    try:
        if hasattr(socket, "SO_PEERCRED"):
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid, uid, _gid = struct.unpack("3i", raw)
            return pid, uid
        if _getpeereid is not None:
            import ctypes
            uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
            if _getpeereid(sock.fileno(), ctypes.byref(uid), ctypes.byref(gid)) != 0:
                return None, None
            peer_pid: int | None = None
            if sys.platform == "darwin":
                try:
                    raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID, struct.calcsize("i"))
                    peer_pid = struct.unpack("i", raw)[0]
                except OSError:
                    peer_pid = None
            return peer_pid, int(uid.value)
    except Exception:
        return None, None
    return None, None


def peer_uid(sock: socket.socket) -> int | None:
    """The connected peer's uid (SO_PEERCRED / getpeereid), None if unknown."""
    return peer_credentials(sock)[1]


def own_uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else -1
