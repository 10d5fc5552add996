"""Peer credentials: only a peer of our own uid may talk to an AF_UNIX agent."""

from __future__ import annotations

import os
import socket
import struct
import sys
from typing import Any


def peer_allowed(peer: int | None, own_uid: int) -> bool:
    """Only a peer of our own uid may talk to us (unknown peer: refused)."""
    return isinstance(peer, int) and not isinstance(peer, bool) and peer == own_uid


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


def peer_uid(sock: socket.socket) -> int | None:
    """The connected peer's uid (SO_PEERCRED / getpeereid), None if unknown."""
    try:
        if hasattr(socket, "SO_PEERCRED"):
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", raw)
            return uid
        if _getpeereid is not None:
            import ctypes
            uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
            if _getpeereid(sock.fileno(), ctypes.byref(uid), ctypes.byref(gid)) == 0:
                return int(uid.value)
    except Exception:
        return None
    return None


def own_uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else -1
