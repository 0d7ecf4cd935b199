"""The flow's process's C allocator: large freed blocks are given back (glibc), nothing elsewhere."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from evalpipe._internal import malloc

PROBE = """
import ctypes, sys
from evalpipe._internal.malloc import give_back_large_blocks
libc = ctypes.CDLL(None)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
if sys.argv[1] == "set":
    assert give_back_large_blocks()
size = 4 << 20
libc.free(libc.malloc(size))  # glibc raises its bound to 4 MiB here, unless it is fixed
before = libc.mallinfo2().hblkhd
block = libc.malloc(size)
print(libc.mallinfo2().hblkhd - before >= size)
libc.free(block)
"""


def _mapped(mode: str) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return out.stdout.strip() == "True"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_large_block_freed_once_is_still_mapped_on_its_own() -> None:
    """After the fix a second 4 MiB block gets its own mapping again; without it, the heap's."""
    try:
        ctypes.CDLL(None).gnu_get_libc_version  # noqa: B018
    except AttributeError:
        pytest.skip("not glibc")
    assert _mapped("set") is True
    if _mapped("unset"):
        # Seen once in the full suite, not alone: glibc mapped the block without the fix too (its
        # heap could not grow in place), so the contrast is not there to check.
        pytest.skip("glibc mapped the block without the fix as well: no contrast to check")


def test_elsewhere_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a platform without glibc the call returns False and changes nothing."""
    monkeypatch.setattr(malloc.sys, "platform", "darwin")
    malloc.give_back_large_blocks.cache_clear()
    assert malloc.give_back_large_blocks() is False
    malloc.give_back_large_blocks.cache_clear()
