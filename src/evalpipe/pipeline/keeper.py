"""The keeper of an embedded Prefect server: Prefect's API app under uvicorn, in this process, with a
lifetime of its own (not its parent's).

Started as a script by ``evalpipe.pipeline.server`` (``python -P .../keeper.py STATE_DIR ...``: ``-P``
keeps this file's directory, whose modules' names are not unique, off ``sys.path``), in a
session of its own, so it imports nothing of evalpipe and a Ctrl-C in the terminal of the run that
started it does not reach it. The protocol, all in ``STATE_DIR`` (``$PREFECT_HOME/evalpipe-server``):

- ``server.lock``: the keeper holds an exclusive ``flock`` on it for its whole life. A second keeper
  of the same directory exits at once (one server per PREFECT_HOME), and a client that can lock it
  knows no keeper lives (the kernel drops the lock of a killed process).
- ``server.json``: written (atomically) once the API answers: pid, URL, versions. Clients find the
  server there; removing it asks the keeper to stop (``evalpipe server stop``, or a deleted
  PREFECT_HOME).
- ``clients.lock``: every run using the server holds a shared ``flock`` on it (its lease) from before
  it looks the server up until its flow has ended. The keeper counts as idle while it can take the
  lock exclusively, and stops after ``--idle`` seconds of idleness, holding the exclusive lock (so
  no run can take a lease on a server that is stopping) and removing ``server.json`` first.
- ``server.log``: this process's output.

It stops, cleanly (uvicorn's shutdown; a hard exit 10 s later), when it has been idle for ``--idle``
seconds, when ``server.json`` or the directory disappears, when the server has not started within
``--startup-timeout`` seconds, or on SIGTERM/SIGINT. It is one process (the server runs in it), so
ending it ends the server.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import hashlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

APP = "prefect.server.api.server:create_app"
POLL = 0.25
HARD_EXIT_AFTER = 10.0


def _log(message: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"{stamp} keeper {os.getpid()}: {message}", file=sys.stderr, flush=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def _names_me(path: Path) -> bool:
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["pid"]) == os.getpid()
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _seed_database(database: Path, template: Path) -> bool:
    """Copy the migrated template into a database that does not exist yet; True if copied."""
    if database.exists() or not template.is_file():
        return False
    database.parent.mkdir(parents=True, exist_ok=True)
    tmp = database.with_name(f".{database.name}.{os.getpid()}.tmp")
    shutil.copyfile(template, tmp)
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{database}{suffix}")
    os.replace(tmp, database)
    return True


def _collections_key() -> int:
    """A digest (a positive 31-bit integer) of the installed Prefect collections: the entry points
    of ``prefect.collections`` and their distributions' versions. With Prefect's version (in the
    template's name) they decide which block types a server registers at start-up."""
    from importlib.metadata import entry_points

    found = sorted(
        (ep.name, ep.value, ep.dist.name if ep.dist else "", ep.dist.version if ep.dist else "")
        for ep in entry_points(group="prefect.collections")
    )
    digest = hashlib.sha256(json.dumps(found).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF or 1


def _template_key(template: Path) -> int:
    """The collections key a template was saved with (its SQLite ``user_version``; 0: none, or
    an earlier evalpipe's template, saved in WAL mode)."""
    if any(Path(f"{template}{suffix}").exists() for suffix in ("-wal", "-shm")):
        return 0  # written to, or still in WAL mode: not known to be the copy it was saved as
    try:
        conn = sqlite3.connect(f"file:{template}?mode=ro", uri=True)
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def _save_template(database: Path, template: Path, key: int) -> None:
    """A consistent copy of a database just migrated, with its block types registered (SQLite's
    backup API), for the next home; ``key`` (:func:`_collections_key`) goes in its
    ``user_version``, which Prefect does not use."""
    template.parent.mkdir(parents=True, exist_ok=True)
    tmp = template.with_name(f".{template.name}.{os.getpid()}.tmp")
    source = sqlite3.connect(database)
    try:
        target = sqlite3.connect(tmp)
        try:
            source.backup(target)
            # Out of WAL mode (Prefect sets WAL again on every connection of the home it seeds):
            # reading the key then leaves no -wal/-shm beside the template, and a WAL file of an
            # earlier template there would not be read as this one's.
            target.execute("PRAGMA journal_mode = DELETE")
            target.execute(f"PRAGMA user_version = {int(key)}")
            target.commit()
        finally:
            target.close()
    finally:
        source.close()
    os.replace(tmp, template)
    for suffix in ("-wal", "-shm"):  # an earlier template's, read in WAL mode
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{template}{suffix}")


_SKIP_ON_START = {
    "migrations": (
        "PREFECT_SERVER_DATABASE_MIGRATE_ON_START",
        "PREFECT_API_DATABASE_MIGRATE_ON_START",
    ),
    "block registration": (
        "PREFECT_SERVER_REGISTER_BLOCKS_ON_START",
        "PREFECT_API_BLOCKS_REGISTER_ON_START",
    ),
    "block registration memo": (
        "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION",
        "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION",
    ),
}
"""Prefect's start-up steps a database just copied from a complete template does not need, and
the settings that turn them off (any of which, set by the user, is left as it is)."""


def _skip_on_start(steps: tuple[str, ...]) -> list[str]:
    """Turn off Prefect's start-up ``steps`` (keys of :data:`_SKIP_ON_START`) in this process's
    environment, before the app reads its settings; the steps turned off."""
    skipped = []
    for step in steps:
        names = _SKIP_ON_START[step]
        if not any(name in os.environ for name in names):
            os.environ[names[0]] = "false"
            skipped.append(step)
    return skipped


def _settle_gc() -> None:
    """The end of the start-up: the collector runs again (:func:`main` turned it off before the
    import; Prefect's app collects once itself when it is built). Nothing is frozen: the garbage
    of a start that migrated the database is collected as usual."""
    gc.enable()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


WARM_UP_PATH = "/api/evalpipe-keeper/warm-up"
"""A path that no route of Prefect's API matches. FastAPI builds the routes of an included router
the first time a request is matched against them, and a request that matches nothing is matched
against every router's: one request here builds them all (1.2-2.5 s, on two cores at a load of
6-9) before the run's own first requests would. It reads and writes nothing (404)."""


def _warm_up(port: int) -> bool:
    """Ask :data:`WARM_UP_PATH` once; whether the API answered it with the 404 it should."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{WARM_UP_PATH}", timeout=30):
            return False
    except urllib.error.HTTPError as exc:
        return exc.code == 404
    except OSError:
        return False


class Keeper:
    """The watch over one server: start-up, idleness, the state file."""

    def __init__(
        self, args: argparse.Namespace, server: Any, port: int, save_template: int | None
    ) -> None:
        self.args = args
        self.server = server
        self.port = port
        self.save_template = save_template
        self.state = Path(args.state_dir)
        self.info = self.state / "server.json"
        self.clients = os.open(self.state / "clients.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self.stopping = False
        self.announced = False

    def stop(self, why: str) -> None:
        if self.stopping:
            return
        self.stopping = True
        _log(f"stopping: {why}")
        self.server.should_exit = True
        timer = threading.Timer(HARD_EXIT_AFTER, os._exit, args=(1,))
        timer.daemon = True
        timer.start()

    def _idle(self) -> bool:
        """No lease is held; if so, the exclusive lock is held until :meth:`_release`."""
        try:
            fcntl.flock(self.clients, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _release(self) -> None:
        fcntl.flock(self.clients, fcntl.LOCK_UN)

    def _announce(self) -> None:
        if self.save_template is not None and self.args.database and self.args.template:
            try:
                _save_template(
                    Path(self.args.database), Path(self.args.template), self.save_template
                )
                _log(f"saved the migrated database as a template: {self.args.template}")
            except (OSError, sqlite3.Error) as exc:
                _log(f"could not save the database template ({type(exc).__name__}: {exc})")
        meta = json.loads(self.args.meta) if self.args.meta else {}
        _write_json(
            self.info,
            {
                **meta,
                "pid": os.getpid(),
                "api_url": f"http://127.0.0.1:{self.port}/api",
                "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "idle_timeout": self.args.idle,
            },
        )
        self.announced = True
        _log(f"serving http://127.0.0.1:{self.port}/api (idle timeout {self.args.idle:g} s)")

    def watch(self) -> None:
        began = time.monotonic()
        while not self.server.started:
            if self.server.should_exit:
                return
            if time.monotonic() - began > self.args.startup_timeout:
                self.stop(f"not started within {self.args.startup_timeout:g} s")
                return
            time.sleep(POLL / 2)
        while not _healthy(self.port):
            if self.server.should_exit or time.monotonic() - began > self.args.startup_timeout:
                self.stop("the API does not answer")
                return
            time.sleep(POLL / 5)
        try:
            self._announce()
        except OSError as exc:  # the directory went (PREFECT_HOME deleted) while starting
            self.stop(f"could not write {self.info} ({type(exc).__name__}: {exc})")
            return
        # After server.json: the run that waits for it reads it, checks the health and gets its
        # clients ready meanwhile, and its first requests find the routes built.
        if not _warm_up(self.port):
            _log(f"the warm-up request {WARM_UP_PATH} did not get the 404 it expects")
        _settle_gc()
        idle_since: float | None = None
        while not self.server.should_exit:
            if not self.info.exists() or not _names_me(self.info):
                self.stop(f"{self.info} was removed (a stop request, or PREFECT_HOME is gone)")
                return
            now = time.monotonic()
            if self._idle():
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= self.args.idle:
                    # The exclusive lock stays held until this process ends: no run can take a
                    # lease and find a server that is going away.
                    with contextlib.suppress(FileNotFoundError):
                        self.info.unlink()
                    self.stop(f"idle for {self.args.idle:g} s")
                    return
                self._release()
            else:
                idle_since = None
            time.sleep(POLL)


def main() -> int:
    parser = argparse.ArgumentParser(prog="keeper.py")
    parser.add_argument("state_dir")
    parser.add_argument("--idle", type=float, required=True, help="seconds idle before stopping")
    parser.add_argument("--startup-timeout", type=float, default=300.0)
    parser.add_argument("--database", default="", help="the SQLite database file, if SQLite")
    parser.add_argument("--template", default="", help="a migrated database to start from")
    parser.add_argument("--meta", default="", help="JSON fields for server.json")
    args = parser.parse_args()
    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    lock = os.open(state / "server.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        _log("another keeper serves this directory; exiting")
        return 0
    with contextlib.suppress(FileNotFoundError):
        (state / "server.json").unlink()  # a killed keeper's: it names a dead server
    # A new database is a copy of the template when there is one: at the head of this Prefect's
    # migrations (the template is per version), so none run; and when the template was saved with
    # the Prefect collections installed now, its block types are those this server would register,
    # so that is skipped too (1-3 s with a collection such as prefect-dask, whose import it needs).
    # Else the database is migrated (or the template's block types are registered) and the result
    # saved as the template for the next new home.
    save_template: int | None = None
    if args.database:
        database = Path(args.database)
        fresh = not database.exists()
        if fresh and args.template:
            key = _collections_key()
            template = Path(args.template)
            if _seed_database(database, template):
                steps: tuple[str, ...] = ("migrations",)
                if _template_key(template) == key:
                    steps += ("block registration", "block registration memo")
                else:
                    save_template = key  # the template's block types, brought up to date
                skipped = _skip_on_start(steps)
                _log(
                    f"database {database} created from the template {args.template}"
                    + (f"; skipped at start-up: {', '.join(skipped)}" if skipped else "")
                )
            else:
                save_template = key
    # The import of Prefect's server makes many objects that live as long as it does: the
    # collector's passes over them are ~10% of the start's CPU. Off until the server is up.
    gc.disable()
    import uvicorn  # after the lock: a second keeper exits without loading the server

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        APP,
        factory=True,
        host="127.0.0.1",
        port=port,
        log_level="error",
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    # uvicorn re-raises SIGTERM/SIGINT after its clean shutdown; with these (restored after it)
    # that returns here instead of ending the process before server.json is removed.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: None)
    keeper = Keeper(args, server, port, save_template)
    watcher = threading.Thread(target=keeper.watch, name="keeper", daemon=True)
    watcher.start()
    try:
        server.run(sockets=[sock])
    finally:
        if _names_me(state / "server.json"):
            with contextlib.suppress(FileNotFoundError):
                (state / "server.json").unlink()
        _log("stopped" if keeper.announced else "stopped without having served")
    return 0 if keeper.announced else 1


if __name__ == "__main__":
    sys.exit(main())
