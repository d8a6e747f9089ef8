"""Keep the C heap of a long-lived operator small (glibc only; a no-op elsewhere).

Python hands objects over 512 bytes (the cached pods, every watch event's JSON) to malloc. glibc gives
each thread that allocates its own arena, up to 8 per core, and keeps what is freed in them for reuse:
after the burst of a fleet starting, an idle operator holds tens of MiB it no longer uses. Two arenas
are enough for an operator whose threads mostly wait on sockets, and trimming now and then hands the
free pages back to the kernel.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Final

log = logging.getLogger(__name__)

M_ARENA_MAX: Final = -8  # mallopt's parameter number, from glibc's malloc.h
ARENAS: Final = 2
TRIM_EVERY_SECONDS: Final = 60.0


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC: Final = _libc()


def limit_arenas() -> None:
    """Before the operator starts its threads: arenas made before this stay."""
    if _LIBC is not None and not _LIBC.mallopt(M_ARENA_MAX, ARENAS):
        log.warning("mallopt(M_ARENA_MAX, %d) failed; the heap may keep more freed memory", ARENAS)


def trim() -> None:
    """Return the heap's free pages to the kernel (a few milliseconds on a heap of hundreds of MiB)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
