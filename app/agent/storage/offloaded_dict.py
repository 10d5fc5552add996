"""A module's weight dicts while its model is offloaded: any read brings the
model back first, exactly as a forward would; the agent reads them with
``dict.values(d)`` and never triggers a reload."""

from __future__ import annotations

import copy as _copy
import weakref
from collections import OrderedDict
from typing import Any

from .. import figures as _fig
from .. import log as _log
from ..model_guard import RESIDENT
from .planning import Offload

PARAM_DICTS = ("_parameters", "_buffers")


class OffloadedDict(dict):
    """A module's ``_parameters`` / ``_buffers`` while its model is offloaded.

    ``home`` is the module's own dict, put back on reload (so the module keeps
    the same dict object across unloads).  Any read of a value brings the
    model back first (``guard.make_resident``), on the reading thread, then
    answers from ``home``; keys, ``in`` and ``len`` need no weights.  Every
    change is made to both, so a reference to either taken before a reload
    stays right.  ``__iter__`` is overridden so that CPython's dict copies
    (``dict(d)``, ``{**d}``) go through ``keys`` and ``__getitem__`` instead
    of reading the table directly.  Copies, pickles and deep copies are plain
    dicts.
    """

    __slots__ = ("guard", "home", "__weakref__")

    def __init__(self, home: dict, guard: Any) -> None:
        dict.__init__(self, home)
        self.home = home
        # strong: a part the user keeps after its model is gone still reloads
        # (the offload record holds us weakly, so there is no cycle)
        self.guard = guard

    def _home(self) -> dict:
        g = self.guard
        if g is not None and g.state is not RESIDENT:
            g.make_resident("access")
        return self.home

    # -- reads: the model comes back first (names need no weights)
    def __getitem__(self, key: Any) -> Any:
        return self._home()[key]

    def __iter__(self) -> Any:
        return iter(self.home)

    def __contains__(self, key: Any) -> bool:
        return key in self.home

    def __len__(self) -> int:
        return len(self.home)

    def keys(self) -> Any:
        return self.home.keys()

    def get(self, key: Any, default: Any = None) -> Any:
        return self._home().get(key, default)

    def items(self) -> Any:
        return self._home().items()

    def values(self) -> Any:
        return self._home().values()

    def copy(self) -> dict:
        return self._home().copy()

    __copy__ = copy

    def __eq__(self, other: Any) -> bool:
        return self._home() == other

    def __ne__(self, other: Any) -> bool:
        return self._home() != other

    __hash__ = None

    def __or__(self, other: Any) -> Any:
        return self.copy() | other

    def __deepcopy__(self, memo: dict) -> dict:
        result = _copy.deepcopy(self.copy(), memo)
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, protocol_: Any) -> Any:
        return (dict, (self.copy(),))

    def __repr__(self) -> str:
        return repr(self.copy())

    # -- changes: made to both
    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self.home[key] = value

    def __delitem__(self, key: Any) -> None:
        del self.home[key]  # the module's own dict says what is there
        dict.pop(self, key, None)

    def pop(self, key: Any, *default: Any) -> Any:
        home = self._home()
        dict.pop(self, key, None)
        return home.pop(key, *default)

    def popitem(self) -> Any:
        key, value = self._home().popitem()
        dict.pop(self, key, None)
        return key, value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = self._home().setdefault(key, default)
        dict.setdefault(self, key, value)
        return value

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.home.update(*args, **kwargs)
        dict.clear(self)
        dict.update(self, self.home)

    def __ior__(self, other: Any) -> OffloadedDict:
        self.update(other)
        return self

    def clear(self) -> None:
        dict.clear(self)
        self.home.clear()


_fig.WATCHABLE_DICTS.add(OffloadedDict)


def swap_in_dicts(modules: list, guard: Any, rec: Offload) -> None:
    """Give each module an ``OffloadedDict`` per weight dict (right after the
    model's calls have left it, before anything is copied: from then on a
    read waits for the unload, then brings the model back)."""
    for m in modules:
        d = m.__dict__
        ref = weakref.ref(m)  # never strong: the guard (in a dict keyed by the model) holds rec
        for attr in PARAM_DICTS:
            plain = d.get(attr)
            if type(plain) in (dict, OrderedDict) and plain:
                off = OffloadedDict(plain, guard)
                d[attr] = off
                rec.dicts.append((ref, attr, weakref.ref(off)))


def restore_dicts(rec: Offload) -> None:
    """The modules' own dicts again, with whatever was registered meanwhile."""
    for ref, attr, off_ref in rec.dicts:
        m, off = ref(), off_ref()
        if m is None or off is None:
            continue
        try:
            if m.__dict__.get(attr) is off:
                m.__dict__[attr] = off.home
        except Exception:
            _log.log_exc("restoring a module's %s failed" % attr)
    rec.dicts = []
