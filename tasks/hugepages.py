"""The model's weights in transparent huge pages (Linux), where the kernel leaves them to be asked
for (``/sys/kernel/mm/transparent_hugepage/enabled`` = ``madvise``, the usual default).

Why: a query embedding reads every weight of the model's layers once (MiniLM: ~42 MB in fp32,
~10 000 pages of 4 KiB; ONNX Runtime holds ~90 MB with the token embedding table, of which a run
reads a few rows). Each page is an address translation, a page walk when it misses the TLB, and
in a virtual machine a nested walk through the host's tables too; in 2 MiB pages they are ~20.
Measured in ``bench_context.py``'s replay on 2 cores of a KVM guest, each build's query run again
on two spinning sessions, one in huge pages, in alternating order: a single text 0.19-0.42 ms
faster (p50 of ~4-5 ms, four runs), a pair unchanged (docs/benchmarks.md).

ONNX Runtime allocates the weights through malloc, which exposes no such choice, so the session is
opened first and the memory it brought in is then found by difference: the private anonymous
regions of ``/proc/self/smaps`` that are new since a snapshot taken before (or the part a region
grew by at its end), in whole 2 MiB pieces, are advised where densely resident (``mincore``: the
weights, not a reserved thread stack or arena, which the kernel may have merged into one region
with them) ``MADV_HUGEPAGE`` (later faults there take huge pages) and collapsed now with
``MADV_COLLAPSE`` (Linux 6.1: a synchronous copy into huge pages; MiniLM's session, ~130 MiB,
0.3-0.5 s). Memory other threads brought in meanwhile may be advised too, which is harmless: a
dense region in huge pages holds the same bytes. Nothing is asked where the mode is ``never``
(``MADV_COLLAPSE`` would ignore it). Anything failing (another OS, an older kernel, a ``/proc``
it cannot read) leaves the pages as they were, and never fails the session.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import mmap
import os
import re
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

HUGE_PAGE = 2 << 20
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
# The share of a huge page's worth of memory that must be resident for it to be advised: the
# weights are wholly resident; a thread's stack or a malloc arena reserves far more than it
# touches, and huge pages there would make resident what never was.
DENSITY = 0.9

_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ (\d+)\s*(.*)$")


@dataclass(frozen=True)
class Region:
    """A private anonymous read-write mapping of ``/proc/self/smaps``."""

    start: int
    end: int
    anonymous: int  # resident anonymous bytes
    flags: frozenset[str]  # VmFlags: "hg" advised huge, "nh" never huge, "gd" grows down (a stack)


def anonymous_spans(maps: str) -> dict[int, int]:
    """start -> end of the private anonymous read-write regions of a ``/proc/<pid>/maps`` text
    (the heap included), pure."""
    spans: dict[int, int] = {}
    for line in maps.splitlines():
        found = _HEADER.match(line)
        if found and _anonymous(found):
            spans[int(found[1], 16)] = int(found[2], 16)
    return spans


def regions(smaps: str) -> list[Region]:
    """The private anonymous read-write regions of a ``/proc/<pid>/smaps`` text, pure."""
    out: list[Region] = []
    current: tuple[int, int] | None = None
    anonymous = 0
    for line in smaps.splitlines():
        found = _HEADER.match(line)
        if found:
            current = (int(found[1], 16), int(found[2], 16)) if _anonymous(found) else None
            anonymous = 0
        elif current is not None and line.startswith("Anonymous:"):
            anonymous = int(line.split()[1]) * 1024
        elif current is not None and line.startswith("VmFlags:"):
            out.append(Region(current[0], current[1], anonymous, frozenset(line.split()[1:])))
            current = None
    return out


def _anonymous(header: re.Match[str]) -> bool:
    perms, inode, name = header[3], header[4], header[5].strip()
    return perms.startswith("rw") and perms.endswith("p") and inode == "0" and name in ("", "[heap]")


def new_ranges(before: Mapping[int, int], now: Sequence[Region]) -> list[tuple[int, int]]:
    """The whole huge pages of each region that is new since ``before`` (start -> end), or of the
    part a region grew by; stacks and regions their owner marked never huge are left out. Pure."""
    ranges: list[tuple[int, int]] = []
    for r in now:
        if r.flags & {"gd", "nh"}:
            continue
        old_end = before.get(r.start)
        start = r.start if old_end is None else old_end
        lo = -(-start // HUGE_PAGE) * HUGE_PAGE
        hi = r.end // HUGE_PAGE * HUGE_PAGE
        if hi - lo >= HUGE_PAGE:
            ranges.append((lo, hi))
    return ranges


def dense_runs(lo: int, hi: int, resident: bytes, page: int) -> list[tuple[int, int]]:
    """The huge pages of ``[lo, hi)`` (aligned) at least :data:`DENSITY` resident, adjacent ones
    joined; ``resident``: ``mincore``'s vector, a byte per ``page`` (bit 0: in memory). Pure."""
    per = HUGE_PAGE // page
    count = (hi - lo) // HUGE_PAGE
    if count <= 0:
        return []
    bits = np.frombuffer(resident, dtype=np.uint8, count=count * per) & 1
    dense = bits.reshape(count, per).sum(axis=1) >= DENSITY * per
    runs: list[tuple[int, int]] = []
    for i in np.flatnonzero(dense).tolist():
        start = lo + i * HUGE_PAGE
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], start + HUGE_PAGE)
        else:
            runs.append((start, start + HUGE_PAGE))
    return runs


def thp_mode(text: str) -> str | None:
    """The mode a ``/sys/kernel/mm/transparent_hugepage/enabled`` text selects (``always [madvise]
    never`` -> ``madvise``), None if none is (pure)."""
    found = re.search(r"\[(\w+)\]", text)
    return found[1] if found else None


def snapshot(sysfs: Path = Path("/sys/kernel/mm/transparent_hugepage/enabled")) -> dict[int, int] | None:
    """This process's anonymous regions now, to pass to :func:`advise_since`; None where there is
    no ``/proc`` (not Linux) or transparent huge pages are off (``never``: ``MADV_COLLAPSE``
    would not ask, so the administrator's choice is kept here). Never raises."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        mode = thp_mode(sysfs.read_text(encoding="ascii", errors="replace"))
        if mode in (None, "never"):
            return None
        return anonymous_spans(_proc_text("/proc/self/maps"))
    except Exception:  # an optimisation: whatever fails leaves the pages as they are
        log.debug("huge pages: no snapshot of this process's memory", exc_info=True)
        return None


def advise_since(before: Mapping[int, int] | None, nice: int = 0) -> int:
    """Advise and collapse into huge pages the dense memory this process brought in since
    ``before``; the bytes advised (0 when nothing could be). ``nice``: run the calling thread at
    that much lower a priority first (a thread of its own: the collapse's copying is its work).
    Never raises."""
    if before is None:
        return 0
    try:
        return _advise_since(before, nice)
    except Exception:  # as snapshot
        log.debug("huge pages: not advised", exc_info=True)
        return 0


def _advise_since(before: Mapping[int, int], nice: int) -> int:
    if nice:
        with contextlib.suppress(OSError, AttributeError):  # Linux: a thread's own nice value
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + nice)
    libc = _libc()
    if libc is None:
        return 0
    # A region with less resident than one dense huge page holds none: not read page by page.
    found = [r for r in regions(_proc_text("/proc/self/smaps")) if r.anonymous >= DENSITY * HUGE_PAGE]
    candidates = new_ranges(before, found)
    ranges = [run for lo, hi in candidates for run in dense_runs(lo, hi, _resident(libc, lo, hi), mmap.PAGESIZE)]
    t0 = time.perf_counter()
    advised = collapsed = 0
    for lo, hi in ranges:
        if libc.madvise(lo, hi - lo, MADV_HUGEPAGE) != 0:
            continue  # the range changed meanwhile, or a kernel without THP
        advised += hi - lo
        if libc.madvise(lo, hi - lo, MADV_COLLAPSE) == 0:  # before Linux 6.1: EINVAL, advised only
            collapsed += hi - lo
    log.debug(
        "huge pages: %d MiB advised, %d MiB collapsed in %.0f ms",
        advised >> 20, collapsed >> 20, (time.perf_counter() - t0) * 1e3,
    )  # fmt: skip
    return advised


def _proc_text(path: str) -> str:
    """A /proc file as text: the paths of mapped files may be in any encoding (bytes kept)."""
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="surrogateescape")


def _resident(libc: Any, lo: int, hi: int) -> bytes:
    """``mincore``'s vector of ``[lo, hi)``; all zero (nothing dense) where it cannot be read."""
    pages = (hi - lo) // mmap.PAGESIZE
    vector = (ctypes.c_ubyte * pages)()
    if libc.mincore(lo, hi - lo, vector) != 0:
        return bytes(pages)
    return bytes(vector)


@functools.cache
def _libc() -> Any:
    """The C library's ``madvise`` and ``mincore``, typed; None where it cannot be loaded."""
    name = ctypes.util.find_library("c")  # runs ldconfig: once per process
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise.restype = ctypes.c_int
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
        libc.mincore.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc
