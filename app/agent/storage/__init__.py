"""Where an unloaded model's bytes go, and how they come back.

Planning: a model's parameters, buffers and gradients are grouped by the
storage they view (``plan``): one copy per storage, so tied / shared tensors
and views of one storage stay shared after a reload; dtypes never change
(bytes are copied).  Split models are fine: each storage keeps its device.

Targets:
* ``cpu``: a pinned host buffer per storage (pageable where pinning fails),
  made before the model is held (``devices.HostBuffers``: page-locking takes
  as long as the copy), filled with ``copy_(non_blocking=True)`` and the
  devices synchronised;
* ``disk``: one file per storage in ``$XDG_CACHE_HOME/vram-steward/offload``
  (dir 0700, files 0600), checked for room first (``room``), its blocks
  reserved and filled with plain writes (a full disk is an OSError that
  rolls the unload back, never SIGBUS), nameless so that it dies with the
  process (``files``; what a killed process left where a name was needed is
  removed by the next agent, ``leftovers``).  The offloaded tensors then
  view a private (copy-on-write) mapping of their file: nothing is resident
  until read.

Storages shared with other processes are never moved (``..sharing``).

A reload recreates every storage as it was (``Group``): same size, same
offsets, same alignment, on its own device.

While a model is offloaded each of its modules' ``_parameters`` and
``_buffers`` dicts is an ``OffloadedDict``: any read of a weight by the
user's code (``state_dict``, ``.to()``, ``.half()``, ``deepcopy``, pickling,
a deeper submodule's forward, ``model.device``) brings the model back first,
exactly as a forward would.  Only a reference to a tensor taken before the
unload reaches the offloaded copy directly.  The agent reads the dicts with
``dict.values(d)`` and never triggers a reload.

Modules: ``planning`` (what moves, as ``Group``s in an ``Offload`` record),
``devices`` (device and host-memory primitives, the tests' seams),
``files`` (the disk target), ``room`` (space on the disk), ``leftovers``
(whose a file is; the sweep), ``copies`` (the copy and swap phases),
``offloaded_dict`` (the weight dicts of an offloaded model).  A seam is
called through its module (``devices.copy_bytes``), so replacing it there
replaces it for every phase.
"""

from __future__ import annotations

from . import copies, devices, files, leftovers, offloaded_dict, planning, room
from .offloaded_dict import PARAM_DICTS, OffloadedDict
from .planning import ALIGN, SLACK_BYTES, Group, Offload, View

__all__ = ["ALIGN", "PARAM_DICTS", "SLACK_BYTES", "Group", "Offload", "OffloadedDict", "View",
           "copies", "devices", "files", "leftovers", "offloaded_dict", "planning", "room"]
