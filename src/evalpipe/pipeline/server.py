"""The embedded Prefect server a run uses when no PREFECT_API_URL is set: one per PREFECT_HOME,
shared by every run on that home and kept for the next one.

The first run that needs it starts it (Prefect's API app under uvicorn, the UI off, on a free port
of 127.0.0.1, in a process of its own: ``keeper.py``); later runs find it through
``$PREFECT_HOME/evalpipe-server/server.json``, check its health, and use it. Its lifetime is its
own, and bounded (docs/operations.md, "The embedded server"):

- every run holds a lease (a shared ``flock`` on ``clients.lock``) while it uses the server; the
  kernel drops the lease of a killed run, so ``kill -9`` of a run counts as its end;
- the server stops once no run has held a lease for ``EVALPIPE_SERVER_IDLE_TIMEOUT`` seconds
  (default 600; ``0``: as soon as the last run using it ends, the behaviour of a per-run server);
- it stops within a second when ``server.json`` or PREFECT_HOME is removed, and on
  ``evalpipe server stop`` (:func:`stop_server`);
- a server that died or does not answer is replaced by the next run (the keeper's lock tells a
  live keeper from a dead one: no pid is trusted).

A server already running on the PREFECT_HOME (``prefect server start``: :func:`running_server`)
comes first: the run uses it (an embedded server beside it would share its SQLite file) and a kept
server of that home is stopped. ``evalpipe run`` calls :func:`start_early` first of all, before its
own imports (``evalpipe.cli._early``; this module imports neither Prefect nor httpx until it is
used), so that a server it is sure to need starts while the run imports Prefect and prepares its
plan; :func:`drop_early` stops it when the suite proves invalid.

A fresh PREFECT_HOME's database is a copy of a migrated template (kept per Prefect version under
``~/.cache/evalpipe/prefect-db``, made by the first server on the machine), which saves Prefect's
migrations (10 s on two cores); ``EVALPIPE_SERVER_DB_TEMPLATES=off`` migrates every new database,
``EVALPIPE_SERVER_DB_TEMPLATES=DIR`` keeps the templates in DIR.

POSIX only (``fcntl``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "Acquired",
    "Lease",
    "ServerBusyError",
    "ServerError",
    "ServerInfo",
    "ServerOnThisHomeError",
    "ServerStatus",
    "drop_early",
    "ensure_server",
    "prefect_api",
    "running_server",
    "server_status",
    "start_early",
    "state_dir",
    "stop_server",
]

DEFAULT_IDLE_TIMEOUT = 600.0
"""Seconds a shared server waits for its next run before it stops."""

STATE_DIRNAME = "evalpipe-server"
_KEEPER = Path(__file__).resolve().with_name("keeper.py")
_POLL = 0.05
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
    """A running shared server, as its ``server.json`` describes it."""

    pid: int
    api_url: str
    started_at: str
    idle_timeout: float
    prefect: str
    """The Prefect version that serves."""
    database: str
    """A digest of the database connection URL (the URL itself may hold a password)."""
    home: str

    @classmethod
    def read(cls, path: Path) -> ServerInfo | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(
                pid=int(data["pid"]),
                api_url=str(data["api_url"]),
                started_at=str(data["started_at"]),
                idle_timeout=float(data["idle_timeout"]),
                prefect=str(data.get("prefect", "")),
                database=str(data.get("database", "")),
                home=str(data.get("home", "")),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """What ``evalpipe server status`` shows."""

    home: Path
    state_dir: Path
    info: ServerInfo | None
    """None when no server runs for this home."""
    healthy: bool
    in_use: bool
    """A run holds a lease now."""

    @property
    def log(self) -> Path:
        return self.state_dir / "server.log"


@dataclass(frozen=True, slots=True)
class _Config:
    home: Path
    database_url: str
    database_file: Path | None
    startup_timeout: float
    environment: dict[str, str] | None
    """The Prefect settings set for this run, as variables for the server's environment (None:
    the current settings', computed when a server is spawned: 30-50 ms)."""

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
    return _Config(
        home=Path(settings.home),
        database_url=database_url,
        database_file=database_file,
        startup_timeout=float(settings.server.ephemeral.startup_timeout_seconds),
        environment=None,
    )


def _home(home: str | Path | None) -> Path:
    return Path(home) if home is not None else _config().home


def state_dir(home: str | Path | None = None) -> Path:
    """Where the shared server of a PREFECT_HOME (default: the current one) keeps its state."""
    return _home(home) / STATE_DIRNAME


def _env_seconds(name: str, default: float, *, what: str, positive: bool = False) -> float:
    """Seconds from the environment variable ``name``, else ``default``; a value that is not a
    number of seconds (or not above 0 when ``positive``) is refused, naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
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
        what="a shared Prefect server waits for its next run (0: stop with the last run)",
    )


def unanswered_timeout() -> float:
    """``EVALPIPE_SERVER_UNANSWERED_TIMEOUT`` (seconds), else :data:`DEFAULT_UNANSWERED`: how long
    a live server may fail its health check before a run replaces it."""
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


def _locked_by_someone(path: Path, *, exclusive_only: bool = False) -> bool:
    """Whether another process holds a lock on ``path`` (shared or exclusive; with
    ``exclusive_only``, an exclusive one)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if exclusive_only else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _keeper_alive(directory: Path) -> bool:
    """A keeper holds the directory's server lock (the kernel drops a dead one's)."""
    return _locked_by_someone(directory / "server.lock", exclusive_only=True)


@cache
def _local() -> Any:
    """The opener of requests to a server of this machine: no proxy; urllib, not httpx, whose
    every ``httpx.get`` builds a TLS context (certifi's bundle: 50-200 ms) even for ``http://``.
    Made on first use: :func:`start_early` spawns the server before the command line's imports,
    and urllib (with http.client, email and ssl) is not among what that needs."""
    import urllib.request

    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_errors(*more: type[Exception]) -> tuple[type[Exception], ...]:
    """What a request to a local server raises when it gets no usable answer (and ``more``)."""
    import http.client

    return (OSError, ValueError, http.client.HTTPException, *more)


def _get_json(url: str, timeout: float) -> Any:
    """``GET url``'s JSON body (None when empty), or ``OSError`` (HTTP errors included) /
    ``ValueError`` (not JSON)."""
    with _local().open(url, timeout=timeout) as response:
        body = response.read()
    return json.loads(body) if body.strip() else None


def _healthy(api_url: str, timeout: float = 5.0) -> bool:
    try:
        with _local().open(f"{api_url}/health", timeout=timeout) as response:
            return bool(response.status == 200)
    except _http_errors():
        return False


def _log_tail(directory: Path, lines: int = 20) -> str:
    try:
        text = (directory / "server.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    tail = "\n".join(text.splitlines()[-lines:])
    return f"; the end of its log ({directory / 'server.log'}):\n{tail}" if tail else ""


class Lease:
    """A run's hold on the shared server of a state directory: while any lease is held, the server
    does not count as idle. Released by :meth:`release` or when the process ends (even killed)."""

    def __init__(self, directory: Path, timeout: float = 30.0) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(directory / "clients.lock", os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:  # a server stopping holds it exclusively, for seconds
                if time.monotonic() > deadline:
                    self.release()
                    raise ServerError(
                        f"{directory}: the shared Prefect server is stopping and did not finish "
                        f"within {timeout:g} s; run `evalpipe server stop` and try again"
                    ) from None
                time.sleep(_POLL)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _environment(config: _Config) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)
    }
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # as `evalpipe run` has it
    if config.environment is None:
        from prefect.settings import get_current_settings  # lazy: prefect, ~1 s to import

        env.update(get_current_settings().to_environment_variables(exclude_unset=True))
    else:
        env.update(config.environment)
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_API_KEY", None)  # a client's credential (Prefect Cloud); a server needs none
    env.update(
        {
            "PREFECT_HOME": str(config.home),
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
        }
    )
    return env


def _spawn(directory: Path, config: _Config, idle: float) -> subprocess.Popen[bytes]:
    log = directory / "server.log"
    with contextlib.suppress(OSError):
        if log.stat().st_size > _LOG_LIMIT:
            log.unlink()
    template = _template(config)
    meta = {
        "prefect": version("prefect"),
        "database": config.digest,
        "home": str(config.home),
    }
    args = [
        sys.executable,
        "-P",  # not this package's directory first on sys.path (its limits.py, run.py, ...)
        str(_KEEPER),
        str(directory),
        "--idle",
        repr(idle),
        "--startup-timeout",
        repr(max(config.startup_timeout, 30.0) * 2),
        "--meta",
        json.dumps(meta),
    ]
    if config.database_file is not None:
        args += ["--database", str(config.database_file)]
        if template is not None:
            args += ["--template", str(template)]
    with log.open("ab") as out:
        return subprocess.Popen(
            args,
            cwd=directory,
            env=_environment(config),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _compatible(info: ServerInfo, config: _Config) -> bool:
    return info.prefect == version("prefect") and info.database == config.digest


def _retire_incompatible(directory: Path, config: _Config) -> None:
    """Stop a shared server started by another Prefect version or for another database, unless a
    run uses it (then say so)."""
    info = ServerInfo.read(directory / "server.json")
    if info is None or _compatible(info, config) or not _keeper_alive(directory):
        return
    try:
        stop_server(config.home)
    except ServerBusyError:
        raise ServerBusyError(
            f"the shared Prefect server of {config.home} (pid {info.pid}) was started by Prefect "
            f"{info.prefect} or for another database, and a run uses it; wait for that run, or "
            "stop it with `evalpipe server stop --force`"
        ) from None


@dataclass(slots=True)
class _Early:
    """The keeper :func:`start_early` spawned in this process, and the lease held for it."""

    proc: subprocess.Popen[bytes] | None = None
    directory: Path | None = None
    lease: Lease | None = None
    replaced: str | None = None

    def drop(self) -> None:
        """It is not needed after all (the run uses another API): stop it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        self.proc = None
        self.release()

    def release(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None


_early = _Early()

_SETTINGS_FILES = {"prefect.toml": "", ".env": "PREFECT_", "pyproject.toml": "tool.prefect"}
"""Files of the working directory that can hold Prefect settings (with the text that tells)."""
_PROFILE_KEYS = ("PREFECT_API_URL", "PREFECT_HOME", "DATABASE", "PREFECT_PROFILE")


def _early_config() -> _Config | None:
    """The configuration Prefect will compute, read without importing Prefect, when nothing but
    the environment's PREFECT_HOME can change it (else None: no early start)."""
    if "PREFECT_API_URL" in os.environ or any(
        "DATABASE" in key or key == "PREFECT_PROFILE"
        for key in os.environ
        if key.startswith("PREFECT_")
    ):
        return None
    for name, tell in _SETTINGS_FILES.items():
        path = Path(name)
        if path.exists():
            try:
                if tell in path.read_text(encoding="utf-8", errors="replace"):
                    return None
            except OSError:
                return None
    raw = os.environ.get("PREFECT_HOME", "")
    home = Path(raw).expanduser() if raw else Path.home() / ".prefect"
    if not home.is_absolute():
        return None
    profiles = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml")
    try:
        text = profiles.read_text(encoding="utf-8") if profiles.exists() else ""
    except OSError:
        return None
    if any(key in text for key in _PROFILE_KEYS):
        return None
    try:
        startup = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "20"))
    except ValueError:
        return None
    database = home / "prefect.db"
    return _Config(home, f"sqlite+aiosqlite:///{database}", database, startup, {})


def start_early() -> bool:
    """Start the embedded server of this PREFECT_HOME now, so that it starts while the run imports
    Prefect and prepares its plan, when that server is sure to be the one the run will use: no
    PREFECT_API_URL or other Prefect setting beyond PREFECT_HOME (environment, profile, settings
    files), no server of this home running (kept or `prefect server start`). Whether it started
    one; never raises (the run then starts it as usual). :func:`prefect_api` takes it over."""
    if _early.proc is not None:
        return False
    try:
        config = _early_config()
        if config is None:
            return False
        directory = config.home / STATE_DIRNAME
        if directory.is_dir() and _keeper_alive(directory):
            return False
        if Path("/proc/self").exists() and _servers_on(config.home):
            return False
        directory.mkdir(parents=True, exist_ok=True)
        left = ServerInfo.read(directory / "server.json")
        lease = Lease(directory, timeout=0.0)
        try:
            proc = _spawn(directory, config, idle_timeout())
        except BaseException:
            lease.release()
            raise
    except (OSError, ServerError, subprocess.SubprocessError):
        return False
    _early.proc, _early.directory, _early.lease = proc, directory, lease
    if left is not None:
        _early.replaced = f"the embedded Prefect server pid {left.pid} of {config.home} had died"
    return True


def drop_early() -> None:
    """The run :func:`start_early` started a server for will not run (its suite is invalid): stop
    that server, unless another run took a lease on it meanwhile (it then idles out as usual)."""
    proc, directory = _early.proc, _early.directory
    _early.release()
    _early.proc = None
    if proc is None or directory is None or proc.poll() is not None:
        return
    clients = os.open(directory / "clients.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(clients, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # in use by another run
        proc.terminate()  # not waited for: it stops cleanly in the background
    finally:
        os.close(clients)


@dataclass(frozen=True, slots=True)
class Acquired:
    """The server :func:`ensure_server` found or started."""

    info: ServerInfo
    started: bool
    """This call started it (else an earlier run or `evalpipe server start` had)."""
    replaced: str | None = None
    """Why an earlier server of this home was replaced (it had died, or did not answer)."""

    def note(self) -> str:
        """One line for the operator: which server the run used."""
        info = self.info
        if not self.started:
            return (
                f"reused the embedded Prefect server {info.api_url} (pid {info.pid}, since "
                f"{info.started_at}) of {info.home}; `evalpipe server stop` stops it"
            )
        idle = (
            "stops when its last run ends"
            if info.idle_timeout == 0
            else f"stops after {info.idle_timeout:g} s without a run"
        )
        why = f"{self.replaced}; " if self.replaced else ""
        return (
            f"{why}started the embedded Prefect server {info.api_url} (pid {info.pid}) for "
            f"{info.home}; later runs reuse it; it {idle} (`evalpipe server stop` stops it now)"
        )


DEFAULT_UNANSWERED = 30.0
"""Seconds a live server may fail its health check before it is replaced (the default of
``EVALPIPE_SERVER_UNANSWERED_TIMEOUT``)."""


def _terminate(pid: int, directory: Path, grace: float = 3.0) -> None:
    """End the keeper ``pid`` of ``directory`` (SIGTERM, then SIGKILL); a pid that is not one
    (reused since) is left alone."""
    if not _is_keeper(pid, directory):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _keeper_alive(directory) and time.monotonic() < deadline:
        time.sleep(_POLL)
    if _keeper_alive(directory) and _is_keeper(pid, directory):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while _keeper_alive(directory) and time.monotonic() < deadline + grace:
            time.sleep(_POLL)


def ensure_server() -> Acquired:
    """The shared server of the current PREFECT_HOME: the one running if it answers, else a new
    one (a dead server's state is cleared, a live one that does not answer for
    :func:`unanswered_timeout` seconds is ended first; :attr:`Acquired.replaced` says which).

    Call it holding a :class:`Lease` of that home, or the server may go idle before it is used
    (:func:`prefect_api` does; ``evalpipe server start`` does not need to).

    Raises:
        ServerError: when no server answers within Prefect's ephemeral start-up timeout (the message
            ends with the server's log).
    """
    config = _config()
    directory = config.home / STATE_DIRNAME
    directory.mkdir(parents=True, exist_ok=True)
    idle = idle_timeout()
    unanswered = unanswered_timeout()
    timeout = max(config.startup_timeout, 30.0)
    deadline = time.monotonic() + timeout
    spawned: subprocess.Popen[bytes] | None = None
    starts = 0
    replaced: str | None = None
    if _early.proc is not None and _early.directory == directory:
        spawned, replaced, starts = _early.proc, _early.replaced, 1
        _early.proc = None
    _early.drop()  # one for another home (a guess that proved wrong), if any
    left = ServerInfo.read(directory / "server.json")
    if left is not None and not _keeper_alive(directory):
        replaced = f"the embedded Prefect server pid {left.pid} of {config.home} had died"
    unanswered_since: float | None = None
    while True:
        alive = _keeper_alive(directory)
        info = ServerInfo.read(directory / "server.json") if alive else None
        if (
            info is not None
            and not _compatible(info, config)
            and spawned is not None
            and info.pid == spawned.pid
        ):  # started early on a guess that proved wrong: start again
            _terminate(info.pid, directory)
            spawned, starts = None, 0
            continue
        if info is not None and not _compatible(info, config):
            raise ServerError(
                f"the shared Prefect server of {config.home} (pid {info.pid}) runs Prefect "
                f"{info.prefect} or another database; stop it with `evalpipe server stop`"
            )
        if info is not None:
            # a busy server (a run's events) is slow to answer: up to 10 s a probe
            if _healthy(info.api_url, timeout=min(10.0, unanswered)):
                mine = spawned is not None and info.pid == spawned.pid
                return Acquired(info, started=mine, replaced=replaced if mine else None)
            now = time.monotonic()
            unanswered_since = now if unanswered_since is None else unanswered_since
            if now - unanswered_since >= unanswered:
                replaced = (
                    f"the embedded Prefect server pid {info.pid} ({info.api_url}) did not answer "
                    f"for {unanswered:g} s and was stopped"
                )
                _terminate(info.pid, directory)
                unanswered_since = None
                continue
        if not alive and (spawned is None or spawned.poll() is not None):
            if starts >= 2:
                raise ServerError(
                    f"the embedded Prefect server for {config.home} did not start (exit code "
                    f"{spawned.returncode if spawned else None})" + _log_tail(directory)
                )
            spawned = _spawn(directory, config, idle)
            starts += 1
        if time.monotonic() > deadline:
            raise ServerError(
                f"the embedded Prefect server for {config.home} did not answer within "
                f"{timeout:g} s (PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)"
                + _log_tail(directory)
            )
        time.sleep(_POLL)


def _is_keeper(pid: int, directory: Path) -> bool:
    """``pid`` is a keeper of ``directory`` (its command line says so)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(_KEEPER).encode() in argv and str(directory).encode() in argv


def stop_server(
    home: str | Path | None = None, *, force: bool = False, timeout: float = 30.0
) -> ServerInfo | None:
    """Stop the shared server of ``home`` (default: the current PREFECT_HOME); the one stopped, or
    None when none ran.

    A server a run uses is not stopped unless ``force`` (that run then fails, resumable).

    Raises:
        ServerBusyError: a run uses it and ``force`` is not set.
        ServerError: it did not stop within ``timeout`` seconds, even signalled.
    """
    directory = _home(home) / STATE_DIRNAME
    if not directory.is_dir():
        return None
    info_path = directory / "server.json"
    deadline = time.monotonic() + timeout
    info = None
    while _keeper_alive(directory):
        info = ServerInfo.read(info_path)
        if info is not None:
            break
        if time.monotonic() > deadline:  # still starting: it writes server.json once it answers
            raise ServerError(f"{directory}: the server is still starting; try again")
        time.sleep(_POLL)
    else:
        with contextlib.suppress(FileNotFoundError):
            info_path.unlink()  # a dead keeper's
        return None
    assert info is not None
    clients = os.open(directory / "clients.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(clients, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not force:
                raise ServerBusyError(
                    f"the shared Prefect server of {directory.parent} (pid {info.pid}) is in use "
                    "by a run; wait for it, or stop it anyway with --force"
                ) from None
        with contextlib.suppress(FileNotFoundError):
            info_path.unlink()  # the keeper's stop request
    finally:
        os.close(clients)
    while _keeper_alive(directory):
        if time.monotonic() > deadline:
            if _is_keeper(info.pid, directory):
                os.kill(info.pid, 9)
                time.sleep(0.5)
            if _keeper_alive(directory):
                raise ServerError(
                    f"the shared Prefect server of {directory.parent} (pid {info.pid}) did not stop"
                )
            break
        time.sleep(_POLL)
    return info


def server_status(home: str | Path | None = None) -> ServerStatus:
    """Whether the shared server of ``home`` (default: the current PREFECT_HOME) runs, answers and
    is in use."""
    path = _home(home)
    directory = path / STATE_DIRNAME
    info = None
    if directory.is_dir() and _keeper_alive(directory):
        info = ServerInfo.read(directory / "server.json")
    healthy = info is not None and _healthy(info.api_url)
    in_use = directory.is_dir() and _locked_by_someone(directory / "clients.lock")
    return ServerStatus(path, directory, info, healthy, in_use and info is not None)


class ServerOnThisHomeError(ServerError):
    """A Prefect server runs on this PREFECT_HOME's database but does not answer: an embedded
    server beside it would share its SQLite file (``database is locked``)."""


@dataclass(frozen=True, slots=True)
class _Candidate:
    url: str
    """The server's root URL (``http://host:port``)."""
    pid: int | None = None
    """The process found running ``prefect server start`` on this PREFECT_HOME (None: the
    configured host and port, probed)."""


def _same(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError):
        return False


def _option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _servers_on(home: Path) -> list[_Candidate]:
    """``prefect server start`` processes (of this user: /proc, Linux) whose PREFECT_HOME is
    ``home``, with the URL their command line and environment give."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if not ("server" in args and "start" in args and any("prefect" in a for a in args)):
                continue
            env = dict(
                line.split("=", 1)
                for line in (entry / "environ").read_bytes().decode(errors="replace").split("\0")
                if "=" in line
            )
        except OSError:  # gone, or another user's
            continue
        if int(entry.name) == os.getpid():
            continue
        if not _same(env.get("PREFECT_HOME", "~/.prefect"), home):
            continue
        host = _option(args, "--host") or env.get("PREFECT_SERVER_API_HOST") or "127.0.0.1"
        port = _option(args, "--port") or env.get("PREFECT_SERVER_API_PORT") or "4200"
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        found.append(_Candidate(f"http://{host}:{port}", int(entry.name)))
    return found


_PATIENCE = 10.0
"""Seconds a `prefect server start` of this home that does not answer gets before a run refuses."""


def _home_of(url: str, timeout: float = 2.0) -> str | None:
    """The PREFECT_HOME of the server at ``url`` (its settings), or None when it does not answer."""
    try:
        home = _get_json(f"{url}/api/admin/settings", timeout).get("home")
    except _http_errors(AttributeError):
        return None
    return str(home) if home else None


def running_server() -> str | None:
    """The API URL of a Prefect server already running on this PREFECT_HOME (so on its SQLite
    database), or None when there is none.

    Looked for at the configured server host and port (``PREFECT_SERVER_API_HOST``/``PORT``,
    127.0.0.1:4200 by default) and, on Linux, among this user's ``prefect server start``
    processes.

    Raises:
        ServerOnThisHomeError: when such a process runs but does not answer; the message says
            how to run on it or beside it.
    """
    from prefect.settings import get_current_settings  # lazy: prefect

    settings = get_current_settings()
    home = Path(settings.home)
    configured = _Candidate(f"http://{settings.server.api.host}:{settings.server.api.port}")
    processes = _servers_on(home) if Path("/proc/self").exists() else []
    for candidate in dict.fromkeys([configured, *processes]):
        served = _home_of(candidate.url)
        if served is not None and _same(served, home):
            return f"{candidate.url}/api"
    # A server process of this home that did not answer may be busy (or still starting): give it
    # _PATIENCE seconds before refusing.
    deadline = time.monotonic() + _PATIENCE
    while processes and time.monotonic() < deadline:
        time.sleep(0.5)
        for candidate in processes:
            served = _home_of(candidate.url, timeout=5.0)
            if served is not None and _same(served, home):
                return f"{candidate.url}/api"
    if processes:
        pid = processes[0].pid
        raise ServerOnThisHomeError(
            f"a Prefect server (process {pid}) runs on PREFECT_HOME={home} and does not answer at "
            f"{processes[0].url}; an embedded server would share its database ({home}/prefect.db: "
            "'database is locked'). Set PREFECT_API_URL to that server's API (e.g. "
            f"PREFECT_API_URL={processes[0].url}/api) to run on it, or set PREFECT_HOME to another "
            "directory to run on an embedded server"
        )
    return None


_NO_TLS_CA = """\
-----BEGIN CERTIFICATE-----
MIIBxDCCAWugAwIBAgIULTK0+qcsiTNzEvPjAe9oAqJ09zowCgYIKoZIzj0EAwIw
NzE1MDMGA1UEAwwsZXZhbHBpcGU6IG5vIFRMUyB0byB0aGUgbG9vcGJhY2sgUHJl
ZmVjdCBBUEkwIBcNMjYxMjAxMjAzMjExWhgPMjEyNjExMDcyMDMyMTFaMDcxNTAz
BgNVBAMMLGV2YWxwaXBlOiBubyBUTFMgdG8gdGhlIGxvb3BiYWNrIFByZWZlY3Qg
QVBJMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEweJZd1jRHeZqdXbzjxZ/vAm9
pO43ng2rraYVTCDlqy08nnGUJjH8of2HUFsYUw2Eb8Q0rxat3nBzSATrixhY1aNT
MFEwHQYDVR0OBBYEFG18DlP7AXTMb46R+hte0xR9Xj+tMB8GA1UdIwQYMBaAFG18
DlP7AXTMb46R+hte0xR9Xj+tMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwID
RwAwRAIgG6MDrrGaaTgrgNUi+SQ/0nwSrI6/NeHGNLfBg6l4fgoCIFlGoktfXNg4
M3/9tqp8Nz1Gp342a8KYi3EGvatZ7cPs
-----END CERTIFICATE-----
"""
"""A self-signed certificate made for this purpose, its private key discarded when it was made:
a CA file that vouches for no server. A run's Prefect clients build a TLS context from the CA file
of ``PREFECT_API_SSL_CERT_FILE`` (else certifi's bundle, 40-60 ms to load each time, five or more
times a run) even when the API is plain ``http://``, where it is never used; for the API URLs
:func:`prefect_api` sets itself (``http://`` on this machine) they get this one (a few ms)."""

_NO_TLS_CA_NAME = "no-tls-ca.pem"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _no_tls_ca(directory: Path) -> Path | None:
    """:data:`_NO_TLS_CA` as a file of ``directory`` (written when missing or different), or None
    when it cannot be written or loaded (the clients then load their usual bundle)."""
    import ssl

    path = directory / _NO_TLS_CA_NAME
    try:
        if path.read_text(encoding="ascii") == _NO_TLS_CA:
            return path
    except (OSError, ValueError):
        pass
    part = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        part.write_text(_NO_TLS_CA, encoding="ascii")
        ssl.create_default_context(cafile=str(part))  # a CA file OpenSSL loads
        os.replace(part, path)
    except (OSError, ssl.SSLError):
        with contextlib.suppress(OSError):
            part.unlink()
        return None
    return path


def _client_settings(api_url: str, directory: Path, *, embedded: bool) -> dict[Any, Any]:
    """The Prefect settings a run's clients get beside ``PREFECT_API_URL`` = ``api_url`` (a URL
    :func:`prefect_api` found or started): for ``http://`` on this machine, the CA file
    :data:`_NO_TLS_CA` (no TLS is spoken, so no CA is consulted; an ``https://`` URL, or one of
    another host, whose clients may run elsewhere, keeps the configured one); for the
    embedded server, no API version check (``PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED``: a
    round trip per client; :func:`ensure_server` uses only a server of this Prefect version)."""
    from prefect.settings import (  # lazy: prefect
        PREFECT_API_SSL_CERT_FILE,
        PREFECT_API_URL,
        PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED,
    )

    updates: dict[Any, Any] = {PREFECT_API_URL: api_url}
    where = urlsplit(api_url)
    if where.scheme == "http" and where.hostname in _LOOPBACK:
        ca = _no_tls_ca(directory)
        if ca is not None:
            updates[PREFECT_API_SSL_CERT_FILE] = str(ca)
    if embedded:
        updates[PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED] = False
    return updates


@contextlib.asynccontextmanager
async def prefect_api(notes: list[str] | None = None) -> AsyncIterator[str | None]:
    """The Prefect API for a run: the configured one (yields None); else a server already running
    on this PREFECT_HOME (:func:`running_server`, a `prefect server start`); else the shared
    embedded server of the PREFECT_HOME, started if none answers and leased while the block runs
    (yields its URL). ``notes`` gets a line saying which server the run used.

    Raises:
        ServerOnThisHomeError: see :func:`running_server`.
        ServerError: the embedded server could not be started.
    """
    import asyncio  # lazy, as every import here: see _local

    from prefect.settings import PREFECT_API_URL, temporary_settings  # lazy: prefect

    if PREFECT_API_URL.value():
        _early.drop()
        yield None
        return
    config = await asyncio.to_thread(_config)
    directory = config.home / STATE_DIRNAME
    found = await asyncio.to_thread(running_server)
    if found is not None:
        _early.drop()
        if notes is not None:
            notes.append(
                f"using the Prefect server at {found}: it runs on this PREFECT_HOME "
                f"({config.home}), whose database an embedded server would share; set "
                "PREFECT_API_URL to choose the server yourself"
            )
        if (directory / "server.json").exists():  # ours, from before that server: retire it
            with contextlib.suppress(ServerError):
                kept = await asyncio.to_thread(stop_server, config.home)
                if kept is not None and notes is not None:
                    notes.append(
                        f"stopped the embedded Prefect server pid {kept.pid} of this PREFECT_HOME "
                        "(the server above uses its database)"
                    )
        updates = await asyncio.to_thread(_client_settings, found, directory, embedded=False)
        with temporary_settings(updates=updates):
            try:
                yield found
            finally:
                await _flush()
        return
    if (directory / "server.json").exists():
        await asyncio.to_thread(_retire_incompatible, directory, config)
    lease = await asyncio.to_thread(Lease, directory)
    _early.release()
    try:
        acquired = await asyncio.to_thread(ensure_server)
        if notes is not None:
            notes.append(acquired.note())
        url = acquired.info.api_url
        updates = await asyncio.to_thread(_client_settings, url, directory, embedded=True)
        with temporary_settings(updates=updates):
            try:
                yield acquired.info.api_url
            finally:
                await _flush()
    finally:
        lease.release()


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
