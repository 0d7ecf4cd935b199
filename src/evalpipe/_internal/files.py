"""Files evalpipe reads and writes whole: UTF-8 text read with errors that name the line, and
atomic writes that never leave a temporary file behind."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "decode_utf8", "read_utf8"]


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text.

    Raises:
        ValueError: naming ``where:line:column`` and the byte that is not UTF-8, and the fix.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(
            f"{where}:{line}:{column}: not UTF-8 (byte 0x{data[exc.start]:02x}); save the file as "
            "UTF-8"
        ) from None


def read_utf8(path: Path) -> str:
    """The file's text (see :func:`decode_utf8`)."""
    return decode_utf8(path.read_bytes(), str(path))


@contextlib.contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """A temporary path beside ``final`` to write; it replaces ``final`` when the block succeeds
    and is removed when it fails (whatever it raised: a full disk included)."""
    tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        yield tmp
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
