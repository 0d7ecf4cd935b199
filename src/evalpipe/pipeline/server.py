"""The Prefect server a run uses when no PREFECT_API_URL is set: Prefect's own ``prefect server
start`` (API and UI), one per PREFECT_HOME, started by the first run that needs it and kept for the
next (docs/operations.md, "The embedded server", says what a user sees).

Prefect's: the server, its UI and its pid file (``$PREFECT_HOME/server.pid``, so ``prefect server
stop`` stops it too). Ours, because Prefect does not do them, kept in
``$PREFECT_HOME/evalpipe-server/``: ``server.json`` (where it listens and which Prefect version and
database it serves: Prefect's pid file holds no port), the version check, the idle stop (every run
holds a shared ``flock`` on ``clients.lock``, which the kernel drops for a killed run; the watcher,
this file run as a script, stops the server once none has held one for its idle timeout) and the
migrated database template a fresh home starts from (it saves Prefect's migrations, 6-10 s on two
cores). Not ``prefect server start --background`` (3.9): its server writes to a pipe nobody reads
once the command returns (no log), gets the command's whole environment (its secrets) and may not
answer yet; nor ``prefect server stop``, a SIGTERM that neither waits nor asks whether a run uses
the server; nor ``SubprocessASGIServer``, a process's own ephemeral API (no UI, gone at its exit).

This module imports neither Prefect nor httpx at import time (it runs as the watcher's script).
POSIX only (``fcntl``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "Acquired",
    "ServerBusyError",
    "ServerError",
    "ServerInfo",
    "ServerStatus",
    "ensure_server",
    "lease",
    "prefect_api",
    "running_server",
    "server_status",
    "state_dir",
    "stop_server",
]

DEFAULT_IDLE_TIMEOUT = 600.0
"""Seconds a kept server waits for its next run before it stops."""

DEFAULT_UNANSWERED = 30.0
"""Seconds a live server may fail its health check before a run replaces it
(``EVALPIPE_SERVER_UNANSWERED_TIMEOUT``)."""

STATE_DIRNAME = "evalpipe-server"
PID_FILE = "server.pid"
"""Prefect's own pid file of a background server, in PREFECT_HOME (``prefect server stop``)."""
_POLL = 0.1
_LOG_LIMIT = 4 * 1024 * 1024
# What the server process gets of the environment of the run that starts it: it outlives that run,
# so it gets no API keys or other secrets of it (Prefect's settings are passed explicitly).
_ENV_KEEP = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
_ENV_KEEP_PREFIXES = ("PREFECT_", "LC_", "XDG_")


class ServerError(RuntimeError):
    """The embedded server could not be started, found or stopped; the message says why (and where
    its log is)."""


class ServerBusyError(ServerError):
    """The server is in use by a run and was not stopped (``force`` stops it anyway)."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """A kept server, as its ``server.json`` describes it."""

    pid: int
    api_url: str
    started_at: str
    idle_timeout: float
    prefect: str
    """The Prefect version that serves."""
    database: str
    """A digest of the database connection URL (the URL itself may hold a password)."""
    home: str

    @property
    def ui_url(self) -> str:
        """The Prefect UI's address: the API URL without ``/api``."""
        return self.api_url.rstrip("/").removesuffix("/api")

    @classmethod
    def read(cls, path: Path) -> ServerInfo | None:
        kinds = {"pid": int, "idle_timeout": float}  # the others are text
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**{f.name: kinds.get(f.name, str)(data[f.name]) for f in fields(cls)})
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, path: Path) -> None:
        part = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        part.write_text(json.dumps(asdict(self)), "utf-8")
        os.replace(part, path)


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """What ``evalpipe server status`` shows."""

    home: Path
    log: Path
    info: ServerInfo | None
    """None when no kept server runs for this home."""
    healthy: bool
    in_use: bool
    """A run holds a lease now."""


@dataclass(frozen=True, slots=True)
class _Config:
    home: Path
    database_url: str
    database_file: Path | None
    startup_timeout: float
    host: str
    port: int

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.database_url.encode()).hexdigest()[:16]


def _config() -> _Config:
    """What the current Prefect settings say about the server to use."""
    from prefect.settings import get_current_settings  # lazy: prefect, ~1 s to import

    settings = get_current_settings()
    url = settings.server.database.connection_url
    database_url = url.get_secret_value() if url is not None else ""
    database_file = None
    for prefix in ("sqlite+aiosqlite:///", "sqlite:///"):
        if database_url.startswith(prefix) and ":memory:" not in database_url:
            database_file = Path(database_url[len(prefix) :].split("?", 1)[0])
    host = settings.server.api.host
    return _Config(
        home=Path(settings.home),
        database_url=database_url,
        database_file=database_file,
        startup_timeout=max(float(settings.server.ephemeral.startup_timeout_seconds), 60.0),
        host="127.0.0.1" if host in ("0.0.0.0", "::", "") else host,
        port=int(settings.server.api.port),
    )


def state_dir(home: str | Path | None = None) -> Path:
    """Where the kept server of a PREFECT_HOME (default: the current one) keeps its state."""
    return (Path(home) if home is not None else _config().home) / STATE_DIRNAME


def _env_seconds(name: str, default: float, *, what: str, positive: bool = False) -> float:
    """Seconds from the environment variable ``name``, else ``default``; a value that is not a
    number of seconds (or not above 0 when ``positive``) is refused, naming the variable."""
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if not (value > 0 if positive else value >= 0):
        raise ServerError(f"{name}={raw!r}: give the seconds {what}")
    return value


def idle_timeout() -> float:
    """``EVALPIPE_SERVER_IDLE_TIMEOUT`` (seconds), else :data:`DEFAULT_IDLE_TIMEOUT`."""
    return _env_seconds(
        "EVALPIPE_SERVER_IDLE_TIMEOUT",
        DEFAULT_IDLE_TIMEOUT,
        what="a kept Prefect server waits for its next run (0: stop with the last run)",
    )


def unanswered_timeout() -> float:
    """``EVALPIPE_SERVER_UNANSWERED_TIMEOUT`` (seconds), else :data:`DEFAULT_UNANSWERED`."""
    return _env_seconds(
        "EVALPIPE_SERVER_UNANSWERED_TIMEOUT",
        DEFAULT_UNANSWERED,
        what="a live Prefect server may not answer before a run replaces it (above 0)",
        positive=True,
    )


def _template(config: _Config) -> Path | None:
    """The migrated database a new SQLite database starts from, or None."""
    if config.database_file is None:
        return None
    where = os.environ.get("EVALPIPE_SERVER_DB_TEMPLATES", "").strip()
    if where.lower() == "off":
        return None
    if not where:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        where = str(Path(cache) / "evalpipe" / "prefect-db")
    return Path(where) / f"prefect-{version('prefect')}.db"


def _copy_database(source: Path, target: Path) -> bool:
    """A consistent copy of SQLite database ``source`` at ``target`` (sqlite3's online backup,
    written beside it and renamed into place); False when it cannot be made."""
    part = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with (
            contextlib.closing(sqlite3.connect(source)) as src,
            contextlib.closing(sqlite3.connect(part)) as dst,
        ):
            src.backup(dst)
        os.replace(part, target)
    except (OSError, sqlite3.Error):
        with contextlib.suppress(OSError):
            part.unlink()
        return False
    return True


def _say(directory: Path, text: str) -> None:
    """A line of evalpipe's in the server's log (what it did to the server, and why)."""
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    with contextlib.suppress(OSError), (directory / "server.log").open("a") as log:
        log.write(f"{stamp} evalpipe: {text}\n")


def _flock(fd: int, how: int) -> bool:
    """Take the flock ``how`` on ``fd`` if nobody holds a conflicting one (never waits)."""
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _clients(directory: Path) -> int:
    return os.open(directory / "clients.lock", os.O_RDWR | os.O_CREAT, 0o600)


@contextlib.contextmanager
def _exclusive(directory: Path) -> Iterator[bool]:
    """Try to take ``clients.lock`` exclusively (held while the block runs): yields False when a
    run holds a lease."""
    fd = _clients(directory)
    try:
        yield _flock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


_PROC = Path("/proc/self").exists()
"""Linux: a process's command line and state are read from /proc."""


def _pid_exists(pid: int) -> bool:
    """Whether process ``pid`` exists at all (without /proc)."""
    try:
        with contextlib.suppress(PermissionError):
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _alive(pid: int) -> bool:
    """Process ``pid`` runs and is a Prefect server (its command line says so): a pid reused
    since is not taken for the server."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return not _PROC and _pid_exists(pid)
    if argv == [b""]:  # no command line yet (just spawned: its exec is under way) or any more
        return not _exited(pid)
    return b"server" in argv and any(b"prefect" in arg for arg in argv)


def _serves(api_url: str, home: str | Path, timeout: float = 5.0) -> bool:
    """The server at ``api_url`` answers (a GET on this machine, no proxy) and is the one of
    PREFECT_HOME ``home`` (its settings say so): a port can change hands between the check that it
    is free and the bind."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{api_url}/admin/settings", timeout=timeout) as response:
            settings = json.loads(response.read())
    except (OSError, ValueError):
        return False
    served = settings.get("home") if isinstance(settings, dict) else None
    return isinstance(served, str) and _same(served, home)


def _answers(info: ServerInfo, home: Path, within: float) -> bool:
    """The server ``info`` answers (:func:`_serves`) within ``within`` seconds, and does not exit
    meanwhile."""
    deadline = time.monotonic() + within
    while not _serves(info.api_url, home, timeout=min(10.0, within)):
        if not _alive(info.pid) or time.monotonic() > deadline:
            return False
        time.sleep(_POLL)
    return True


def _log_tail(directory: Path, lines: int = 20) -> str:
    try:
        text = (directory / "server.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    tail = "\n".join(text.splitlines()[-lines:])
    return f"; the end of its log ({directory / 'server.log'}):\n{tail}" if tail else ""


@contextlib.contextmanager
def lease(directory: Path, timeout: float = 30.0) -> Iterator[None]:
    """A run's hold on the kept server of a state directory while the block runs: while any lease
    is held, the server does not count as idle. Released when the block ends or the process does
    (even killed: the kernel drops the flock)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = _clients(directory)
    try:
        deadline = time.monotonic() + timeout
        while not _flock(fd, fcntl.LOCK_SH):  # a server stopping holds it, for seconds
            if time.monotonic() > deadline:
                raise ServerError(
                    f"{directory}: the kept Prefect server is stopping and did not finish "
                    f"within {timeout:g} s; run `evalpipe server stop` and try again"
                )
            time.sleep(_POLL)
        os.utime(fd)  # the watcher's clock starts again, and again when the lease ends
        yield
    finally:
        with contextlib.suppress(OSError):
            os.utime(fd)
        os.close(fd)


def _environment(config: _Config) -> dict[str, str]:
    from prefect.settings import get_current_settings  # lazy: prefect

    env = {
        k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)
    }
    env.update(get_current_settings().to_environment_variables(exclude_unset=True))
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_API_KEY", None)  # a client's credential (Prefect Cloud); a server needs none
    env.pop("PREFECT_SERVER_EPHEMERAL_ENABLED", None)  # it is a server, not a run's ephemeral one
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
    env["PREFECT_HOME"] = str(config.home)
    return env


def _port(config: _Config, *, configured: bool = True) -> int:
    """The configured port (Prefect's 4200 unless PREFECT_SERVER_API_PORT says otherwise) when it is
    free (and ``configured``), else one the system gives: a server of another PREFECT_HOME may
    have the first."""
    with socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET) as probe:
        if configured:
            with contextlib.suppress(OSError):  # taken: one the system gives, on the same probe
                probe.bind((config.host, config.port))
                return config.port
        probe.bind((config.host, 0))
        return int(probe.getsockname()[1])


def _spawn(
    directory: Path, config: _Config, idle: float, *, configured_port: bool = True
) -> ServerInfo:
    """Start ``prefect server start`` for this home (its output to ``server.log``), its pid in
    Prefect's pid file, then the watcher; the server's :class:`ServerInfo` (not yet answering)."""
    log = directory / "server.log"
    with contextlib.suppress(OSError):
        if log.stat().st_size > _LOG_LIMIT:
            log.unlink()
    template, database = _template(config), config.database_file
    fresh = template and database and template.exists() and not database.exists()
    if fresh and template and database and _copy_database(template, database):
        _say(directory, f"the database was created from the template {template}")
    port = _port(config, configured=configured_port)
    command = [sys.executable, "-m", "prefect", "server", "start"]
    command += ["--host", config.host, "--port", str(port)]
    with log.open("ab") as out:
        process = subprocess.Popen(
            command,
            cwd=directory,
            env=_environment(config),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not in the run's process group: a Ctrl-C of it is the run's
        )
    (config.home / PID_FILE).write_text(str(process.pid), encoding="ascii")
    host = f"[{config.host}]" if ":" in config.host else config.host
    info = ServerInfo(
        pid=process.pid,
        api_url=f"http://{host}:{port}/api",
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        idle_timeout=idle,
        prefect=version("prefect"),
        database=config.digest,
        home=str(config.home),
    )
    info.write(directory / "server.json")
    subprocess.Popen(
        [sys.executable, "-P", str(Path(__file__).resolve()), "watch", str(directory)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return info


def _terminate(pid: int, timeout: float) -> None:
    """SIGTERM the server ``pid`` (a pid reused since is left alone), SIGKILL after ``timeout``;
    returns once it has exited."""
    if not _alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while not _exited(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
            return
        time.sleep(_POLL)


def _exited(pid: int) -> bool:
    """Process ``pid`` has exited: gone, or a zombie. (Its command line empties while it exits,
    before it is a zombie, so ``_alive`` says no too early.)"""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return _PROC or not _pid_exists(pid)
    return state in ("Z", "X")


def _stop(directory: Path, info: ServerInfo, timeout: float) -> None:
    """Forget the server ``info`` first (no run finds a server that is stopping), then stop it."""
    _forget(directory, info)
    _terminate(info.pid, timeout)


def _forget(directory: Path, info: ServerInfo | None) -> None:
    """Remove the state of a server that is gone (ours and Prefect's pid file, if it names it)."""
    with contextlib.suppress(FileNotFoundError):
        (directory / "server.json").unlink()
    if info is not None:
        pid_file = Path(info.home) / PID_FILE
        with contextlib.suppress(OSError, ValueError):
            if int(pid_file.read_text(encoding="ascii").strip()) == info.pid:
                pid_file.unlink()


@dataclass(frozen=True, slots=True)
class Acquired:
    """The server :func:`ensure_server` found or started."""

    info: ServerInfo
    started: bool
    """This call started it (else an earlier run or `evalpipe server start` had)."""
    replaced: str | None = None
    """Why an earlier server of this home was replaced (it had died, did not answer, or ran
    another Prefect version)."""

    def note(self) -> str:
        """One line for the operator: which server the run used, and where its UI is."""
        info = self.info
        if not self.started:
            return f"reused the Prefect server of {info.home} (UI: {info.ui_url}, pid {info.pid})"
        idle = (
            "stops when its last run ends"
            if info.idle_timeout == 0
            else f"stops after {info.idle_timeout:g} s without a run"
        )
        why = f"{self.replaced}; " if self.replaced else ""
        return (
            f"{why}started a Prefect server for {info.home} (UI: {info.ui_url}, pid {info.pid}); "
            f"later runs reuse it; it {idle} (`evalpipe server stop` stops it now)"
        )


def ensure_server() -> Acquired:
    """The kept server of the current PREFECT_HOME: the one running if it answers, else a new one
    (a dead server's state is cleared; one of another Prefect version or database, or a live one
    that does not answer for :func:`unanswered_timeout` seconds, is stopped first).

    Call it holding a :func:`lease` of that home, or the server may go idle before it is used
    (:func:`prefect_api` does).

    Raises:
        ServerError: when no server answers within Prefect's start-up timeout (the message ends
            with the server's log).
    """
    config = _config()
    directory = config.home / STATE_DIRNAME
    directory.mkdir(parents=True, exist_ok=True)
    unanswered = unanswered_timeout()
    idle = idle_timeout()
    # One run at a time decides whether to start a server (two runs on one home share one).
    starting = os.open(directory / "start.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(starting, fcntl.LOCK_EX)
        replaced: str | None = None
        info = ServerInfo.read(directory / "server.json")
        if info is not None:  # kept if alive, of this Prefect version and database, answering
            if not _alive(info.pid):
                why = f"of {config.home} had died"
            elif (info.prefect, info.database) != (version("prefect"), config.digest):
                why = f"of {config.home} ran Prefect {info.prefect} or another database and was stopped"
            elif _answers(info, config.home, unanswered):
                return Acquired(info, started=False)
            else:
                why = f"({info.api_url}) did not answer for {unanswered:g} s and was stopped"
            _stop(directory, info, 10.0)
            replaced = f"the Prefect server pid {info.pid} {why}"
        for attempt in (1, 2):
            info = _spawn(directory, config, idle, configured_port=attempt == 1)
            if _answers(info, config.home, config.startup_timeout):
                break
            gone = not _alive(info.pid)
            _stop(directory, info, 5.0)
            if gone and attempt == 1:  # the port may have been taken before it bound: once more
                _say(directory, f"the server pid {info.pid} exited before answering; again")
                continue
            why = f"did not answer within {config.startup_timeout:g} s"
            why = "exited before answering" if gone else why
            raise ServerError(f"the Prefect server for {config.home} {why}{_log_tail(directory)}")
        # Migrated now: the next new home's start. Saved once per Prefect version.
        template, database = _template(config), config.database_file
        if template and database and not template.exists():
            _copy_database(database, template)
            _say(directory, f"saved the migrated database as the template {template}")
        assert info is not None  # the loop above broke out with one that answers
        return Acquired(info, started=True, replaced=replaced)
    finally:
        os.close(starting)


def stop_server(
    home: str | Path | None = None, *, force: bool = False, timeout: float = 30.0
) -> ServerInfo | None:
    """Stop the kept server of ``home`` (default: the current PREFECT_HOME); the one stopped, or
    None when none ran. A server a run uses is not stopped unless ``force`` (that run then fails,
    resumable).

    Raises:
        ServerBusyError: a run uses it and ``force`` is not set.
    """
    directory = state_dir(home)
    info = ServerInfo.read(directory / "server.json")
    if info is None:
        return None
    if not _alive(info.pid):
        _forget(directory, info)
        return None
    with _exclusive(directory) as free:
        if not free and not force:
            raise ServerBusyError(
                f"the Prefect server of {directory.parent} (pid {info.pid}) is in use by a "
                "run; wait for it, or stop it anyway with --force"
            )
        _stop(directory, info, timeout)
    return info


def server_status(home: str | Path | None = None) -> ServerStatus:
    """Whether the kept server of ``home`` (default: the current PREFECT_HOME) runs, answers and
    is in use."""
    directory = state_dir(home)
    path, log = directory.parent, directory / "server.log"
    info = ServerInfo.read(directory / "server.json")
    if info is None or not _alive(info.pid):
        return ServerStatus(path, log, None, healthy=False, in_use=False)
    with _exclusive(directory) as free:
        in_use = not free
    return ServerStatus(path, log, info, _serves(info.api_url, path), in_use)


def _same(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError):
        return False


def running_server() -> str | None:
    """The API URL of a Prefect server someone runs on this PREFECT_HOME (so on its database) at
    the configured host and port (``prefect server start``; 127.0.0.1:4200 unless
    PREFECT_SERVER_API_HOST/PORT say otherwise), or None when none answers there."""
    config = _config()
    kept = ServerInfo.read(config.home / STATE_DIRNAME / "server.json")
    url = f"http://{config.host}:{config.port}"
    if kept is not None and kept.ui_url == url:
        return None  # ours
    # Nothing listening refuses at once; a fresh server's first answer took ~5 s on a loaded
    # machine, and one missed here would get a second server on the same database.
    return f"{url}/api" if _serves(f"{url}/api", config.home, timeout=10.0) else None


@contextlib.asynccontextmanager
async def prefect_api(notes: list[str] | None = None) -> AsyncIterator[str | None]:
    """The Prefect API for a run: the configured one (yields None); else a server someone runs on
    this PREFECT_HOME (:func:`running_server`); else the kept server of the PREFECT_HOME, started
    if none answers and leased while the block runs (yields its URL). ``notes`` gets a line
    saying which server the run used.

    Raises:
        ServerError: the server could not be started.
    """
    import asyncio

    from prefect.settings import (  # lazy: prefect
        PREFECT_API_URL,
        PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED,
        temporary_settings,
    )

    if PREFECT_API_URL.value():
        yield None
        return
    with contextlib.ExitStack() as stack:
        url = await asyncio.to_thread(running_server)
        if url is not None:
            updates: dict[Any, Any] = {PREFECT_API_URL: url}
            note = (
                f"using the Prefect server at {url}: it runs on this PREFECT_HOME; set "
                "PREFECT_API_URL to choose the server yourself"
            )
        else:
            await asyncio.to_thread(stack.enter_context, lease(await asyncio.to_thread(state_dir)))
            acquired = await asyncio.to_thread(ensure_server)
            note, url = acquired.note(), acquired.info.api_url
            # No API version check for its clients (a round trip per client): ensure_server uses
            # only a server of this version.
            updates = {PREFECT_API_URL: url, PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED: False}
        if notes is not None:
            notes.append(note)
        with temporary_settings(updates=updates):
            try:
                yield url
            finally:
                await _flush()


async def _flush() -> None:
    """Send the logs and events still queued (the flow run's last state line, the gate event)
    while the server is up: queued at exit, they failed with "Error logging to API"."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (APILogWorker, EventsWorker):
        pending = service.drain_all(timeout=5)
        if inspect.isawaitable(pending):
            await pending


def watch(directory: Path, poll: float = 0.5) -> int:
    """The watcher of the server of ``directory`` (started with it; standard library only): stops
    the server once no run has held a lease for its idle timeout (the lease file's modification
    time is when the last run took or left one), or when ``server.json`` or the home goes; ends
    when the server does."""
    info = ServerInfo.read(directory / "server.json")
    if info is None:
        return 0
    clients = directory / "clients.lock"
    started = time.time()
    while _alive(info.pid):
        time.sleep(poll)
        now = ServerInfo.read(directory / "server.json")
        if now is None or now.pid != info.pid:  # removed (`stop`, the home deleted) or replaced
            if now is None:
                _say(directory, f"stopping the server pid {info.pid}: server.json was removed")
                _terminate(info.pid, timeout=10.0)
            return 0
        try:
            last = max(clients.stat().st_mtime, started)
        except FileNotFoundError:
            last = started
        if time.time() - last < info.idle_timeout:
            continue
        with _exclusive(directory) as free:
            if not free:
                continue  # a run uses it
            _say(directory, f"stopping the server pid {info.pid}: idle for {info.idle_timeout:g} s")
            _stop(directory, info, 10.0)
            return 0
    if ServerInfo.read(directory / "server.json") == info:  # it exited by itself
        _say(directory, f"the server pid {info.pid} exited")
        _forget(directory, info)
    return 0


if __name__ == "__main__":  # the watcher: python -P server.py watch DIRECTORY
    if len(sys.argv) == 3 and sys.argv[1] == "watch":
        sys.exit(watch(Path(sys.argv[2])))
    sys.exit(f"usage: {sys.argv[0]} watch DIRECTORY")
