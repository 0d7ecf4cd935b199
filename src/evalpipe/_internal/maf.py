"""Telling Microsoft Agent Framework (MAF) objects by their type, never by their module's name.

An object can be an instance of a MAF class only once ``agent_framework`` has been imported to
define that class, so the classes are looked up in ``sys.modules``: when MAF is not loaded the
answer is "no" at no cost, evalpipe never imports MAF itself, and subclasses defined anywhere
(``class MyAgent(agent_framework.Agent)``) are recognised by ``isinstance``.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["is_maf_instance", "maf_class"]

_FOUND: dict[str, type] = {}


def maf_class(name: str) -> type | None:
    """The class ``agent_framework.<name>`` when agent_framework is loaded, else None."""
    cls = _FOUND.get(name)
    if cls is not None:
        return cls
    module = sys.modules.get("agent_framework")
    if module is None:
        return None
    # agent_framework exports its names lazily; reading one loads (once) the submodule it lives in.
    found = getattr(module, name, None)
    if not isinstance(found, type):
        return None
    _FOUND[name] = found
    return found


def is_maf_instance(obj: Any, name: str) -> bool:
    """Whether ``obj`` is an instance of ``agent_framework.<name>`` or of a subclass of it."""
    cls = maf_class(name)
    return cls is not None and isinstance(obj, cls)
