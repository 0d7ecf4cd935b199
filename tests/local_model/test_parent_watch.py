"""The server dies with the process that started it, even one killed by SIGKILL (no model needed:
the same parent watch runs a stand-in module)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from evalpipe.local_model import LocalModelServer

PARENT = """\
import subprocess, sys, time
from evalpipe.local_model import LocalModelServer
command = LocalModelServer().command("unused")
command[3:] = ["http.server", "0", "--bind", "127.0.0.1"]  # a stand-in server that never exits
child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet has exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_server_command_runs_the_llama_cpp_server_module() -> None:
    """The server runs llama-cpp-python's server module, under the parent watch, on its config."""
    command = LocalModelServer().command("config.json")
    assert command[0] == sys.executable
    assert command[3:] == ["llama_cpp.server", "--config_file", "config.json"]


def test_server_exits_when_its_parent_is_killed() -> None:
    """kill -9 of the process that started the server ends the server within 10 s."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(0.5)
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        parent.kill()
        parent.wait(timeout=10)
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)
