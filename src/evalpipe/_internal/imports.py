"""Loading user objects from ``module:attr`` import paths, with errors that say what to fix."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

__all__ = ["load_object"]


def load_object(path: str, *, what: str = "object", search_path: Path | None = None) -> Any:
    """Import ``package.module:attr`` (or ``package.module.attr``) and return the attribute.

    ``search_path`` (default: the current directory) is put on ``sys.path`` first, so a project's own
    modules import the way they do in its tests.

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
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"{what} {path!r}: cannot import module {module_name!r} ({exc}); check the spelling "
            "and that the module is installed or under the current directory"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(
                f"{what} {path!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return obj
