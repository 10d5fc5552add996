"""Rows into the database: one transaction per commit, pruning by tier.

Used only on the recorder's writer thread.  Ids of GPUs and processes are
cached, so a commit costs one ``INSERT`` per row plus a ``last_t`` update
per process seen.  A transaction that fails (a full disk) takes the rows it
inserted with it, so every cached id is dropped then and looked up again in
the next one: a cached id of a rolled-back row would later name whichever
GPU or process the database gives that id next.
"""

from __future__ import annotations

import sqlite3

from app.core.store.aggregate import Batch, GpuInfo, ProcessInfo, ProcessKey
from app.core.store.packing import pack
from app.core.store.schema import COARSE, FINE
from app.core.store.tiers import Retention


class HistoryWriter:
    def __init__(self, conn: sqlite3.Connection, retention: Retention) -> None:
        self.conn = conn
        self.retention = retention
        self._gpu_ids: dict[str, int] = {}
        self._gpu_info: dict[str, GpuInfo] = {}
        self._process_ids: dict[ProcessKey, int] = {}

    def write(self, batch: Batch) -> None:
        rows, gpus, processes = batch.rows, batch.gpus, batch.processes
        if not rows:
            return
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            values = []
            seen: dict[int, int] = {}
            for row in rows:
                gpu_id = self._gpu_id(gpus[row.gpu])
                packed: dict[int, int | None] = {}
                for key, value in row.procs.items():
                    process = self._process_id(key, processes.get(key))
                    packed[process] = value
                    seen[process] = max(seen.get(process, 0), row.t)
                values.append((row.tier, gpu_id, row.t, row.used, row.total, row.util,
                               pack(packed) if packed else None))
            conn.executemany("INSERT OR REPLACE INTO sample VALUES (?, ?, ?, ?, ?, ?, ?)", values)
            conn.executemany("UPDATE process SET last_t = ? WHERE id = ? AND last_t < ?",
                             [(t, process, t) for process, t in seen.items()])
            conn.execute("COMMIT")
        except BaseException:
            self._roll_back()
            raise

    def prune(self, now: float) -> None:
        """Drop what each tier no longer keeps, and processes with no samples left."""
        fine = int(now - self.retention.fine_s)
        coarse = int(now - self.retention.coarse_s)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DELETE FROM sample WHERE tier = ? AND t < ?", (FINE, fine))
            conn.execute("DELETE FROM sample WHERE tier = ? AND t < ?", (COARSE, coarse))
            conn.execute("DELETE FROM process WHERE last_t < ?", (coarse,))
            kept = {row[0] for row in conn.execute("SELECT id FROM process")}
            conn.execute("COMMIT")
        except BaseException:
            self._roll_back()
            raise
        self._process_ids = {key: process for key, process in self._process_ids.items()
                             if process in kept}

    def _roll_back(self) -> None:
        """Undo the open transaction (SQLite may have done so already) and forget
        every cached id: the database, not the cache, says which rows exist."""
        self._gpu_ids.clear()
        self._gpu_info.clear()
        self._process_ids.clear()
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def _gpu_id(self, info: GpuInfo) -> int:
        gpu_id = self._gpu_ids.get(info.uuid)
        if gpu_id is not None and self._gpu_info.get(info.uuid) == info:
            return gpu_id
        self.conn.execute(
            "INSERT INTO gpu (uuid, idx, name, display_id) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (uuid) DO UPDATE SET idx = excluded.idx, name = excluded.name, "
            "display_id = excluded.display_id",
            (info.uuid, info.index, info.name, info.display_id))
        gpu_id = self.conn.execute("SELECT id FROM gpu WHERE uuid = ?",
                                   (info.uuid,)).fetchone()[0]
        self._gpu_ids[info.uuid] = gpu_id
        self._gpu_info[info.uuid] = info
        return gpu_id

    def _process_id(self, key: ProcessKey, info: ProcessInfo | None) -> int:
        process = self._process_ids.get(key)
        if process is not None:
            return process
        pid, create_time = key
        found = self.conn.execute("SELECT id FROM process WHERE pid = ? AND create_time IS ?",
                                  (pid, create_time)).fetchone()
        if found is not None:
            process = int(found[0])
        else:
            info = info or ProcessInfo(None, None, None)
            cursor = self.conn.execute(
                "INSERT INTO process (pid, create_time, name, command, user, last_t) "
                "VALUES (?, ?, ?, ?, ?, 0)", (pid, create_time, info.name, info.command,
                                              info.user))
            process = int(cursor.lastrowid or 0)
        self._process_ids[key] = process
        return process
