"""Loading user objects from ``module:attr`` import paths, with errors that say what to fix."""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

__all__ = ["import_root", "load_object"]

_ROOT: ContextVar[Path | None] = ContextVar("evalpipe_import_root", default=None)
"""The folder ``module:attr`` paths resolve from first while :func:`import_root` is active."""


@contextmanager
def import_root(folder: str | Path | None) -> Iterator[None]:
    """Within the block, :func:`load_object` puts ``folder`` first on ``sys.path`` (before the
    current directory): a suite's ``module:attr`` paths resolve from the suite's folder."""
    token = _ROOT.set(None if folder is None else Path(folder))
    try:
        yield
    finally:
        _ROOT.reset(token)


def _where(exc: BaseException) -> str:
    """`` (at file:line)``: the innermost frame of a traceback that is not evalpipe's or Python's."""
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if "importlib" not in f.filename and "/evalpipe/" not in f.filename]
    return f" (at {user[-1].filename}:{user[-1].lineno})" if user else ""


def load_object(path: str, *, what: str = "object", search_path: Path | None = None) -> Any:
    """Import ``package.module:attr`` (or ``package.module.attr``) and return the attribute.

    ``search_path`` (default: the current directory) is put on ``sys.path``, so a project's own
    modules import the way they do in its tests; within :func:`import_root`, its folder goes
    before it (first on ``sys.path``).

    Raises:
        ValueError: naming the path and what is wrong with it.
    """
    if ":" in path:
        module_name, _, attr = path.partition(":")
    else:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(
            f"{what} {path!r} is not an import path; write it as 'package.module:attribute'"
        )
    root = str((search_path or Path.cwd()).resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    folder = _ROOT.get()
    if folder is not None and sys.path[:1] != [first := str(folder.resolve())]:
        if first in sys.path:
            sys.path.remove(first)
        sys.path.insert(0, first)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        beside = "" if folder is None else f"in the suite's folder ({folder}), "
        raise ValueError(
            f"{what} {path!r}: cannot import module {module_name!r} ({exc}); check the spelling "
            f"and that the module is installed, {beside}or under the current directory"
        ) from exc
    except SyntaxError as exc:
        raise ValueError(
            f"{what} {path!r}: {exc.filename}:{exc.lineno}: the module has a syntax error "
            f"({exc.msg}); fix it and run again"
        ) from None
    except Exception as exc:
        raise ValueError(
            f"{what} {path!r}: importing module {module_name!r} raised {type(exc).__name__}: "
            f"{exc}{_where(exc)}; fix the module (it runs when it is imported)"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(
                f"{what} {path!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return obj
