"""The history database's tables, its identity and its health checks.

One row per (tier, GPU, second) in ``sample``: the GPU's used, total and SM
utilisation, and every process's bytes packed in one blob (``packing``), so
a tick on 8 GPUs with 64 processes each is 8 rows, not 520.  Times are whole
epoch seconds: the start of the row's second (fine tier) or bucket (coarse).
Unknown figures are NULL, never 0.

``PRAGMA application_id`` marks the file as ours and ``PRAGMA user_version``
is the schema version: a file without them is foreign.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path
from urllib.request import pathname2url

from app.agent.paths import open_private_file

APPLICATION_ID = 0x56524D53  # "VRMS"
SCHEMA_VERSION = 1
SQLITE_HEADER = b"SQLite format 3\x00"
#: The files SQLite keeps beside the database.
SIDE_FILES = ("-wal", "-shm", "-journal")

FINE = 0  # tier numbers in ``sample.tier``
COARSE = 1

_TABLES = """
CREATE TABLE IF NOT EXISTS gpu (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    idx INTEGER,
    name TEXT,
    display_id TEXT
);
CREATE TABLE IF NOT EXISTS process (
    id INTEGER PRIMARY KEY,
    pid INTEGER NOT NULL,
    create_time REAL,
    name TEXT,
    command TEXT,
    user TEXT,
    last_t INTEGER
);
CREATE INDEX IF NOT EXISTS process_pid ON process (pid);
CREATE TABLE IF NOT EXISTS sample (
    tier INTEGER NOT NULL,
    gpu INTEGER NOT NULL,
    t INTEGER NOT NULL,
    used INTEGER,
    total INTEGER,
    util REAL,
    procs BLOB,
    PRIMARY KEY (tier, gpu, t)
) WITHOUT ROWID;
"""


class ForeignDatabase(Exception):
    """The file is not a history database of this app, or is damaged."""


def open_writer(path: str) -> sqlite3.Connection:
    """Open (creating if needed) the database for writing; raises
    :class:`ForeignDatabase` for a file that is not ours or fails its check,
    OSError when it or its ``-wal``/``-shm`` is a link or not a file of ours."""
    _private_files(path)
    _check_header(path)
    try:
        conn = sqlite3.connect(path, timeout=5.0, isolation_level=None,
                               check_same_thread=False)
    except sqlite3.Error as exc:
        raise ForeignDatabase(str(exc)) from exc
    try:
        _prepare(conn)
    except (sqlite3.Error, ForeignDatabase) as exc:
        conn.close()
        if isinstance(exc, ForeignDatabase) or out_of_space(exc):
            raise  # a full disk says nothing about the file: it is not moved aside
        raise ForeignDatabase(str(exc)) from exc
    return conn


def out_of_space(exc: BaseException) -> bool:
    """A full disk (or quota) or a failing write: the file may be fine, and
    writing can work again once there is room."""
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", "") or ""
        return name == "SQLITE_FULL" or name.startswith("SQLITE_IOERR")
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _private_files(path: str) -> None:
    """The database file created 0600 before SQLite opens it (``O_EXCL |
    O_NOFOLLOW``; SQLite gives its ``-wal`` and ``-shm`` the database's mode),
    or an existing one checked: a regular file of ours, never a link; the
    same for an existing ``-wal``, ``-shm`` or ``-journal``."""
    for name in (path, *(path + suffix for suffix in SIDE_FILES)):
        if name == path or os.path.lexists(name):
            os.close(open_private_file(name, os.O_RDWR))


def _check_header(path: str) -> None:
    file = Path(path)
    if not file.exists() or file.stat().st_size == 0:
        return
    with file.open("rb") as fh:
        head = fh.read(len(SQLITE_HEADER))
    if head != SQLITE_HEADER:
        raise ForeignDatabase("not an SQLite database")


def _prepare(conn: sqlite3.Connection) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if app_id == 0 and version == 0 and tables == 0:  # new, empty file
        conn.execute("PRAGMA journal_mode=WAL")
        # One transaction: a file is either empty or complete and marked ours.
        conn.executescript(f"BEGIN; {_TABLES} PRAGMA application_id={APPLICATION_ID}; "
                           f"PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
    elif app_id != APPLICATION_ID:
        raise ForeignDatabase("not a VRAM Steward history database")
    elif version != SCHEMA_VERSION:
        raise ForeignDatabase(f"history schema version {version}, expected {SCHEMA_VERSION}")
    else:
        check = conn.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise ForeignDatabase(f"integrity check failed: {check}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")


def open_reader(path: str) -> sqlite3.Connection:
    """A read-only connection (``mode=ro``); raises sqlite3.Error or
    :class:`ForeignDatabase`."""
    _check_header(path)
    uri = f"file:{pathname2url(str(Path(path).resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=5.0, check_same_thread=False)
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error:
        conn.close()
        raise
    if app_id != APPLICATION_ID or version != SCHEMA_VERSION:
        conn.close()
        raise ForeignDatabase("not a VRAM Steward history database")
    return conn
