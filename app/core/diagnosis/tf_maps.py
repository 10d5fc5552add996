"""Whether a process is TensorFlow: its library mapped in ``/proc/<pid>/maps``.

Read on the sampler thread only for processes that hold nearly a whole card,
once per process (cached by pid and start time), bounded, and never for the
demo's simulated pids.  Another user's process answers "unknown" (None).
"""

from __future__ import annotations

import collections

#: Shared objects only TensorFlow maps.
TF_LIBRARIES = (b"libtensorflow_framework", b"_pywrap_tensorflow")
#: Read at most this much of a maps file (a big process maps a few MB of lines).
MAX_MAPS_BYTES = 16 * 1024 * 1024


def maps_mention(pid: int, needles: tuple[bytes, ...] = TF_LIBRARIES,
                 proc_root: str = "/proc") -> bool | None:
    """Whether any of ``needles`` appears in the process's maps; None: unreadable."""
    try:
        with open(f"{proc_root}/{int(pid)}/maps", "rb") as fh:
            read = 0
            tail = b""
            while read < MAX_MAPS_BYTES:
                chunk = fh.read(min(1 << 20, MAX_MAPS_BYTES - read))
                if not chunk:
                    return False
                read += len(chunk)
                text = tail + chunk
                if any(n in text for n in needles):
                    return True
                tail = text[-256:]
            return None  # too big to tell
    except (PermissionError, FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return None


class TfDetector:
    """Cached answers per (pid, create_time); bounded."""

    def __init__(self, max_entries: int = 1024, proc_root: str = "/proc") -> None:
        self._cache: collections.OrderedDict[tuple[int, float | None], bool | None] = \
            collections.OrderedDict()
        self._max = max_entries
        self._root = proc_root

    def is_tensorflow(self, pid: int, create_time: float | None) -> bool | None:
        key = (pid, create_time)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        found = maps_mention(pid, proc_root=self._root)
        self._cache[key] = found
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return found
