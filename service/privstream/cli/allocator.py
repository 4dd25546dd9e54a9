"""Fixed glibc allocator thresholds for the commands that process records in batches.

Every batch allocates and frees numpy arrays and byte strings of a few
megabytes. glibc sizes two thresholds dynamically: blocks above the mmap
threshold are mapped and unmapped one by one (fresh zeroed pages, a page
fault per 4 KiB), and free memory above the trim threshold at the top of
the heap goes back to the kernel, to be faulted in again by the next batch.
Both start low (128 KiB) and only grow after a large mapped block is freed,
so whether a process runs fast depends on what it happened to free first:
`privstream sanitize` of 60,000 128-d vectors took 2.4-3.1 s or 1.9-2.2 s
with the same code (docs/benchmarks.md). Fixing them at 8 MiB and 32 MiB
(what the dynamic scheme reaches anyway after one large block) makes it
predictable; the process keeps at most the trim threshold of free heap.

Only glibc is tuned; elsewhere (musl, macOS) this does nothing. The
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` environment
variables and their ``GLIBC_TUNABLES`` spellings (``glibc.malloc.mmap_threshold``,
``glibc.malloc.trim_threshold``), if set, win: the operator's choice stands
(``mallopt`` would override them).
"""

from __future__ import annotations

import ctypes
import os

#: mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 8 * 2**20
TRIM_THRESHOLD_BYTES = 32 * 2**20
#: the operator's settings of either threshold, as environment variables and as tunables
_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_TUNABLES = ("glibc.malloc.mmap_threshold=", "glibc.malloc.trim_threshold=")


def libc_name() -> str:
    """``glibc``, or ``""`` for another C library.

    ``os.confstr`` asks the C library itself (``platform.libc_ver`` reads the Python
    executable's bytes, and importing ``platform`` costs 9 regular expressions).
    """
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):  # no such name outside glibc
        return ""
    return version.split(" ", 1)[0]


def tune_allocator() -> bool:
    """Fix the thresholds on glibc; True if they were set here."""
    if libc_name() != "glibc":
        return False
    tunables = os.environ.get("GLIBC_TUNABLES", "").split(":")
    if any(v in os.environ for v in _VARIABLES) or any(t.startswith(_TUNABLES) for t in tunables):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
