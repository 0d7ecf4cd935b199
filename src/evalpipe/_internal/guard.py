"""Run a Python module as ``python -m`` would, and end it when the parent process dies.

Started as a script (``python .../guard.py PARENT_PID MODULE ARGS...``), so it imports nothing of
evalpipe: the embedded Prefect server runs under it and stops within a second of its parent's
death, even a ``kill -9`` that left no chance to stop it.
"""

import os
import runpy
import signal
import sys
import threading
import time


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)  # let the server shut down cleanly...
    time.sleep(5)
    os._exit(1)  # ...or not at all


def main() -> None:
    parent, module, *args = sys.argv[1:]
    threading.Thread(target=_watch, args=(int(parent),), daemon=True).start()
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
