"""What provision remembers about the fleet, in SQLite (an embedded default; path in config).

One row per host with the lock hash last applied and the last verification, plus a history of
runs (each with the lock hash it applied or verified), the content of every lock group ever applied
or verified (``locks``, keyed by its hash: what ``provision rollback`` re-applies), and each host's
last health (`provision health`). ``up`` uses it for the fast converge path (skip the apply when the
probed versions equal the lock and the last verification with this lock passed); ``status`` lists
it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from provision.errors import BadInput

DEFAULT_PATH = Path(".provision") / "state.db"


def state_path(override: Path | None, configured: str | None) -> Path:
    """Where the state DB is: ``--state FILE``, else the config's ``state.path``, else the default.

    `up` and `status` both decide it here, so they always read and write the same file.
    """
    if override is not None:
        return override
    if configured:
        return Path(configured).expanduser()
    return DEFAULT_PATH


_SCHEMA = """
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY,
    lock_hash TEXT,            -- hash of the lock group last applied to the host
    applied_at REAL,
    verdict TEXT,              -- last verification verdict: pass, fail, no-gpu
    verified_lock_hash TEXT,   -- the lock hash that verification ran against
    verified_at REAL,
    last_run TEXT
);
CREATE TABLE IF NOT EXISTS runs (
    run TEXT NOT NULL,
    host TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    changed INTEGER,
    verdict TEXT,
    failed_task TEXT,
    lock_hash TEXT,            -- the lock group the run applied or verified on the host
    rolled_back_from TEXT,     -- `provision rollback`: the lock the host ran before this run
    PRIMARY KEY (run, host)
);
-- every lock group applied or verified, by its hash (health_spec.group_hash): a one-group
-- provision.lock document, so that an earlier lock can be applied again (`provision rollback`)
CREATE TABLE IF NOT EXISTS locks (
    lock_hash TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    stored_at REAL NOT NULL
);
-- the last `provision health` answer per host (a table of its own: a state DB made before it
-- gains it by CREATE TABLE IF NOT EXISTS, with no change to the hosts table)
CREATE TABLE IF NOT EXISTS health (
    host TEXT PRIMARY KEY,
    checked_at REAL NOT NULL,
    status TEXT NOT NULL,      -- healthy, unhealthy, unknown, unreachable, not-installed
    problems TEXT NOT NULL,    -- JSON list of the program's problems (or the controller's error)
    lock_hash TEXT             -- the lock hash the host's spec names
);
"""


@dataclass(frozen=True)
class HostState:
    host: str
    lock_hash: str | None
    applied_at: float | None
    verdict: str | None
    verified_lock_hash: str | None
    verified_at: float | None
    last_run: str | None

    def converged(self, lock_hash: str) -> bool:
        """Applied with this lock and last verified, passing, with this lock."""
        return self.lock_hash == lock_hash and self.verified_lock_hash == lock_hash and self.verdict == "pass"


# Columns added to a table after its first release: a state DB made before gains them on open
# (CREATE TABLE IF NOT EXISTS leaves an existing table as it was). Their rows read NULL there.
_ADDED_COLUMNS = {"runs": {"lock_hash": "TEXT", "rolled_back_from": "TEXT"}}


def _add_columns(db: sqlite3.Connection) -> None:
    for table, columns in _ADDED_COLUMNS.items():
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for name, kind in columns.items():
            if name not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


@dataclass(frozen=True)
class RunRecord:
    """One run on one host, as the state DB remembers it (newest first in :func:`read_history`)."""

    run: str
    host: str
    started_at: float
    finished_at: float | None
    lock_hash: str | None  # None: a run recorded before the state DB kept it, or a failed probe
    verdict: str | None
    failed_task: str | None
    rolled_back_from: str | None = None  # a `provision rollback` run: the lock it went back from

    def to_json(self) -> dict[str, object]:
        return {
            "run": self.run,
            "lock_hash": self.lock_hash,
            "verdict": self.verdict,
            "failed_task": self.failed_task,
            "rolled_back_from": self.rolled_back_from,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


_RUN_COLUMNS = "run, host, started_at, finished_at, lock_hash, verdict, failed_task, rolled_back_from"
# newest first; runs in the same second keep the order they were written in (rowid)
_RUN_ORDER = "ORDER BY host, COALESCE(finished_at, started_at) DESC, rowid DESC"


# the same columns from a DB whose runs do not keep their lock yet (made before, opened read-only)
_RUN_COLUMNS_BEFORE_LOCKS = "run, host, started_at, finished_at, NULL, verdict, failed_task, NULL"


def _history(db: sqlite3.Connection, columns: str = _RUN_COLUMNS) -> dict[str, list[RunRecord]]:
    out: dict[str, list[RunRecord]] = {}
    for row in db.execute(f"SELECT {columns} FROM runs {_RUN_ORDER}"):
        out.setdefault(row[1], []).append(RunRecord(*row))
    return out


def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=30)


def read_history(path: Path) -> tuple[dict[str, list[RunRecord]], set[str]]:
    """Each host's runs, newest first, and the hashes of the locks whose content is kept; read-only
    like :func:`read_fleet` (a DB made before runs kept their lock: those runs' lock_hash is None)."""
    if not path.exists():
        return {}, set()
    try:
        db = _ro(path)
    except sqlite3.Error:
        return {}, set()
    try:
        return _history_of(db)
    finally:
        db.close()


def _history_of(db: sqlite3.Connection) -> tuple[dict[str, list[RunRecord]], set[str]]:
    try:
        have = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
        if "lock_hash" not in have:  # not opened by this version yet (a read-only open adds nothing)
            return _history(db, _RUN_COLUMNS_BEFORE_LOCKS), set()
        kept = {str(r[0]) for r in db.execute("SELECT lock_hash FROM locks")}
        return _history(db), kept
    except sqlite3.Error:
        return {}, set()


_HOST_COLUMNS = "host, lock_hash, applied_at, verdict, verified_lock_hash, verified_at, last_run"


@dataclass(frozen=True)
class HealthState:
    """A host's last `provision health` answer."""

    host: str
    checked_at: float
    status: str
    problems: list[str]
    lock_hash: str | None


def _health(rows: list[tuple[str, float, str, str, str | None]]) -> dict[str, HealthState]:
    return {r[0]: HealthState(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows}


_HEALTH_COLUMNS = "host, checked_at, status, problems, lock_hash"


def _health_of(db: sqlite3.Connection) -> dict[str, HealthState]:
    try:
        return _health(db.execute(f"SELECT {_HEALTH_COLUMNS} FROM health").fetchall())
    except sqlite3.Error:  # no health table yet (no `provision health` since this DB was made)
        return {}


@dataclass(frozen=True)
class FleetRecords:
    """What a state DB remembers of the fleet, as `provision status` shows it."""

    hosts: list[HostState]
    health: dict[str, HealthState]  # each host's last health (none: never checked)
    history: dict[str, list[RunRecord]]  # each host's runs, newest first
    kept: set[str]  # the hashes of the locks whose content is kept (what a rollback can go back to)


def read_fleet(path: Path) -> FleetRecords | None:
    """The hosts a state DB remembers, with their health and history, read without writing
    anything and through one connection (``provision status``).

    None when there is no file: no ``up`` has run with this state yet, and a read-only command
    must not create one (:class:`State` would). SQLite opens the file read-only (``mode=ro``),
    so a file that is no state DB is refused as bad input and left as it was, byte for byte.
    """
    if not path.exists():
        return None
    try:
        db = _ro(path)
    except sqlite3.Error as exc:
        raise BadInput(f"cannot open the state database {path}: {exc}", "check the file's permissions") from None
    try:
        try:
            rows = db.execute(f"SELECT {_HOST_COLUMNS} FROM hosts ORDER BY host").fetchall()
        except sqlite3.DatabaseError as exc:  # not SQLite, or SQLite without provision's tables
            raise BadInput(
                f"{path} is not a provision state database ({exc})",
                "give --state the file `provision up` keeps (default .provision/state.db), or fix state.path",
            ) from None
        return FleetRecords([HostState(*row) for row in rows], _health_of(db), *_history_of(db))
    finally:
        db.close()


class State:
    def __init__(self, path: Path = DEFAULT_PATH) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=30)
            self._db.executescript(_SCHEMA)
            with self._db:
                _add_columns(self._db)
        except (OSError, sqlite3.DatabaseError) as exc:
            raise BadInput(
                f"cannot use the state database {path}: {exc}",
                "give --state FILE or set state.path in provision.yaml to a writable file",
            ) from exc

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._db:  # commits, or rolls back on an exception
            yield self._db

    def host(self, name: str) -> HostState | None:
        row = self._db.execute(f"SELECT {_HOST_COLUMNS} FROM hosts WHERE host = ?", (name,)).fetchone()
        return HostState(*row) if row else None

    def hosts(self) -> list[HostState]:
        rows = self._db.execute(f"SELECT {_HOST_COLUMNS} FROM hosts ORDER BY host").fetchall()
        return [HostState(*row) for row in rows]

    def keep_lock(self, lock_hash: str, content: str) -> None:
        """Keep a lock group's content under its hash (the first copy stays: the hash names it)."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO locks (lock_hash, content, stored_at) VALUES (?, ?, ?) ON CONFLICT(lock_hash) DO NOTHING",
                (lock_hash, content, time.time()),
            )

    def lock_content(self, lock_hash: str) -> str | None:
        row = self._db.execute("SELECT content FROM locks WHERE lock_hash = ?", (lock_hash,)).fetchone()
        return str(row[0]) if row else None

    def kept_locks(self) -> set[str]:
        """The hashes of the locks whose content is kept."""
        return {str(r[0]) for r in self._db.execute("SELECT lock_hash FROM locks")}

    def history(self) -> dict[str, list[RunRecord]]:
        """Each host's runs, newest first."""
        return _history(self._db)

    def record_applied(
        self, run: str, host: str, lock_hash: str, changed: int, *, rolled_back_from: str | None = None
    ) -> None:
        """The host was applied ``lock_hash`` (``rolled_back_from``: by `provision rollback`, from that lock)."""
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO hosts (host, lock_hash, applied_at, last_run) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(host) DO UPDATE SET lock_hash = excluded.lock_hash,"
                " applied_at = excluded.applied_at, last_run = excluded.last_run",
                (host, lock_hash, now, run),
            )
            db.execute(
                "INSERT INTO runs (run, host, started_at, changed, lock_hash, rolled_back_from)"
                " VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(run, host) DO UPDATE SET changed = excluded.changed, lock_hash = excluded.lock_hash,"
                " rolled_back_from = excluded.rolled_back_from",
                (run, host, now, changed, lock_hash, rolled_back_from),
            )

    def record_failed(self, run: str, host: str, failed_task: str | None, lock_hash: str | None = None) -> None:
        """A run that failed on the host (``lock_hash``: the lock it was applying; None before a lock)."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO runs (run, host, started_at, failed_task, finished_at, lock_hash)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(run, host) DO UPDATE SET"
                " failed_task = excluded.failed_task, finished_at = excluded.finished_at,"
                " lock_hash = COALESCE(excluded.lock_hash, runs.lock_hash)",
                (run, host, time.time(), failed_task, time.time(), lock_hash),
            )

    def record_health(self, host: str, status: str, problems: list[str], lock_hash: str | None) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO health (host, checked_at, status, problems, lock_hash) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT(host) DO UPDATE SET checked_at = excluded.checked_at, status = excluded.status,"
                " problems = excluded.problems, lock_hash = excluded.lock_hash",
                (host, time.time(), status, json.dumps(problems), lock_hash),
            )

    def health(self) -> dict[str, HealthState]:
        return _health(self._db.execute(f"SELECT {_HEALTH_COLUMNS} FROM health").fetchall())

    def record_verdict(self, run: str, host: str, lock_hash: str | None, verdict: str) -> None:
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO hosts (host, verdict, verified_lock_hash, verified_at, last_run)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT(host) DO UPDATE SET verdict = excluded.verdict,"
                " verified_lock_hash = excluded.verified_lock_hash,"
                " verified_at = excluded.verified_at, last_run = excluded.last_run",
                (host, verdict, lock_hash, now, run),
            )
            db.execute(
                "INSERT INTO runs (run, host, started_at, verdict, finished_at, lock_hash) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(run, host) DO UPDATE SET verdict = excluded.verdict,"
                " finished_at = excluded.finished_at, lock_hash = COALESCE(excluded.lock_hash, runs.lock_hash)",
                (run, host, now, verdict, now, lock_hash),
            )


def previous_lock(runs: list[RunRecord], current: str | None) -> str | None:
    """The lock the host ran before ``current``: the newest other lock in its history (newest first)
    that a run put there (a run that failed before the host ran its lock does not count)."""
    return next((r.lock_hash for r in runs if r.lock_hash and r.lock_hash != current and not r.failed_task), None)


def rollback_target(runs: list[RunRecord], current: str | None, kept: set[str]) -> RunRecord | None:
    """The newest run that passed verification on the host with a lock other than ``current`` whose
    content the state DB keeps: what ``provision rollback`` re-applies; None when there is none."""
    return next(
        (r for r in runs if r.verdict == "pass" and r.lock_hash not in (None, current) and r.lock_hash in kept), None
    )


def rolled_back_from(runs: list[RunRecord], current: str | None) -> str | None:
    """When the host came to ``current`` by `provision rollback`: the lock it went back from (the
    runs since, with the same lock, keep saying so); None when it came to it by `up`."""
    for r in runs:
        if r.lock_hash is None or r.failed_task:  # a failed run left the host on its lock
            continue
        if r.lock_hash != current:
            return None
        if r.rolled_back_from:
            return r.rolled_back_from
    return None
