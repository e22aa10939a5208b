"""The state store and its one seam between SQLite and PostgreSQL.

Everything that differs between the two databases lives in this module:

* SQLite: WAL journal, foreign keys on, and **one writer**. Every write transaction goes
  through a single connection (a pool of one) and starts with `BEGIN IMMEDIATE`, so two
  writers never race for the lock and "database is locked" cannot happen; readers use
  their own connections and see a consistent snapshot (WAL lets them run beside the
  writer).
* PostgreSQL (psycopg 3): an ordinary pool; concurrent writers are serialised by
  row locks and unique constraints.
* Errors: a database that cannot answer becomes `Unavailable` (503); a unique or foreign
  key violation that slipped past the services' own checks becomes `Conflict` (409); a
  value the database cannot hold (an integer beyond 64 bits, a NUL character in text on
  PostgreSQL) becomes `InvalidInput` (400) — SQLite says so with `OverflowError`,
  PostgreSQL with a `DataError`; an update whose row another transaction changed first (a
  versioned row, `StaleDataError`) becomes `Conflict` `concurrent_update` (409).
* Several server processes (replicas) on one PostgreSQL: `migrate` runs under an advisory
  lock, so replicas started together migrate one after the other; `try_leader_lock` picks
  the one replica that runs a background loop's round.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DataError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from gpufleet.domain.errors import Conflict, InvalidInput, Unavailable
from gpufleet.private_files import ensure_private_dir, ensure_private_file, make_private

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
log = logging.getLogger(__name__)


class StateStore:
    def __init__(self, url: str, *, sqlite_synchronous: str = "FULL", pool_size: int = 10):
        self.url = make_url(url)
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        if self.is_sqlite:
            self._prepare_sqlite_file()
            self._write_engine = self._sqlite_engine("BEGIN IMMEDIATE", sqlite_synchronous, 1)
            self._read_engine = self._sqlite_engine("BEGIN", sqlite_synchronous, pool_size)
        else:
            # Overflow connections are closed when returned: a burst beyond the pool is
            # served, but the pool itself is sized for the usual concurrency.
            self._write_engine = create_engine(self.url, pool_size=pool_size,
                                               max_overflow=max(pool_size // 4, 1),
                                               pool_pre_ping=True)
            self._read_engine = self._write_engine
        self._writes = sessionmaker(self._write_engine, expire_on_commit=False)
        self._reads = sessionmaker(self._read_engine, expire_on_commit=False)
        # One connection kept for the writer every other caller may be waiting on (the
        # granter): queued behind a busy shared pool, it would stall them all. SQLite has
        # one writer anyway.
        self._dedicated_engine = (self._write_engine if self.is_sqlite else create_engine(
            self.url, pool_size=1, max_overflow=0, pool_pre_ping=True))
        self._dedicated = sessionmaker(self._dedicated_engine, expire_on_commit=False)
        # The pool of one already serialises SQLite writers; the lock makes the wait explicit
        # and keeps a writer from holding a pooled connection while queueing.
        self._write_lock = threading.Lock() if self.is_sqlite else None

    # --- engines -------------------------------------------------------------------------
    def _prepare_sqlite_file(self) -> None:
        """The database file made owner-only before SQLite opens it: SQLite creates its
        -wal and -shm files with the database file's mode, so they stay private too.

        A path that cannot be prepared (a directory, a file of another user) is left as it
        is, with a warning: SQLite cannot use it either, and the store then answers 503
        `database_unavailable` at its first use, as for any database it cannot reach."""
        database = self.url.database
        if database and database != ":memory:" and not database.startswith("file:"):
            path = Path(database)
            try:
                ensure_private_dir(path.parent)
                ensure_private_file(path)
                make_private(Path(f"{database}-wal"), Path(f"{database}-shm"))
            except OSError as exc:
                log.warning("cannot make the state store %s owner-only: %s", path, exc)

    def _sqlite_engine(self, begin: str, synchronous: str, pool_size: int) -> Engine:
        engine = create_engine(self.url, pool_size=pool_size, max_overflow=0, pool_timeout=60,
                               connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection, _record):
            # Take transaction control from the driver so BEGIN is ours to issue.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA synchronous={synchronous}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(connection):
            connection.exec_driver_sql(begin)

        return engine

    # --- sessions ------------------------------------------------------------------------
    def write(self) -> AbstractContextManager[Session]:
        """One write transaction: committed on success, rolled back on any error."""
        return self._write(self._writes)

    def write_dedicated(self) -> AbstractContextManager[Session]:
        """As `write`, on the connection kept for one caller at a time (the granter, which
        holds its own lock); it never waits for the shared pool."""
        return self._write(self._dedicated)

    @contextmanager
    def _write(self, factory: sessionmaker) -> Iterator[Session]:
        if self._write_lock is not None:
            with self._write_lock, self._session(factory) as session:
                yield session
        else:
            with self._session(factory) as session:
                yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only snapshot; nothing written through it is kept."""
        with self._session(self._reads, commit=False) as session:
            yield session

    @contextmanager
    def _session(self, factory: sessionmaker, commit: bool = True) -> Iterator[Session]:
        session = factory()
        try:
            yield session
            if commit:
                session.commit()
            # A read session is simply closed: its snapshot ends, and loaded objects keep
            # their values for the caller (a rollback would expire them).
        except IntegrityError as exc:
            session.rollback()
            raise Conflict("the change conflicts with existing records",
                           code="integrity_conflict",
                           details={"database": _first_line(exc.orig)}) from exc
        except StaleDataError as exc:
            session.rollback()
            raise Conflict("the record changed in another transaction meanwhile; retry",
                           code="concurrent_update") from exc
        except (DataError, OverflowError) as exc:
            session.rollback()
            raise InvalidInput("a value is out of the range or form the state store accepts",
                               code="invalid_value",
                               details={"database": _first_line(getattr(exc, "orig", exc))}
                               ) from exc
        except (OperationalError, PoolTimeout) as exc:
            session.rollback()
            raise Unavailable("the state store cannot answer right now; retry shortly",
                              code="database_unavailable") from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def listen_to_writes(self, name: str, listener: Callable[..., Any]) -> None:
        """Install a SQLAlchemy session event listener (`before_flush`, `after_commit`, …)
        on every write session, so what it adds joins the writer's transaction. Read
        sessions write nothing and are left alone."""
        for factory in {id(f): f for f in (self._writes, self._dedicated)}.values():
            event.listen(factory, name, listener)

    # --- operations ----------------------------------------------------------------------
    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (idempotent)."""
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        with self._write_engine.begin() as connection:
            if not self.is_sqlite:  # replicas started together: one migrates, then the next
                connection.execute(text("SELECT pg_advisory_xact_lock(:k)"),
                                   {"k": _lock_key("migrate")})
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def ping(self) -> None:
        """Raise `Unavailable` unless the database answers a trivial query."""
        with self.read() as session:
            session.execute(text("SELECT 1"))

    def try_leader_lock(self, session: Session, name: str) -> bool:
        """Whether this process leads the background loop `name` for this transaction.

        SQLite means one server process, so it always leads. On PostgreSQL every replica runs
        the loops and a transaction-scoped advisory lock picks one; it is released with the
        transaction, so a paused former leader cannot act on a lease it no longer holds.
        """
        if self.is_sqlite:
            return True
        return bool(session.execute(text("SELECT pg_try_advisory_xact_lock(:k)"),
                                    {"k": _lock_key(name)}).scalar())

    def dispose(self) -> None:
        self._write_engine.dispose()
        if self._dedicated_engine is not self._write_engine:
            self._dedicated_engine.dispose()
        if self._read_engine is not self._write_engine:
            self._read_engine.dispose()


def _lock_key(name: str) -> int:
    """The advisory lock key of `name`: the whole name, hashed, so two names sharing a
    prefix never block each other (a key of the first 8 bytes made "reclamation" and
    "reclamat…" one). Advisory locks are per database: replicas share them."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big",
                          signed=True)


def _first_line(exc: BaseException) -> str:
    return next(iter(str(exc).splitlines()), type(exc).__name__)
