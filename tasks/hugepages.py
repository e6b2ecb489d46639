"""The model's weights in transparent huge pages (Linux), where the kernel leaves them to be asked
for (``/sys/kernel/mm/transparent_hugepage/enabled`` = ``madvise``, the usual default).

Why: a query embedding reads every weight of the model once (MiniLM: ~90 MB as ONNX Runtime
holds it). In 4 KiB pages that is ~22 000 address translations per run, each a page walk when it
misses the TLB, and in a virtual machine a nested walk through the host's tables too. In 2 MiB
pages it is ~45. Measured in ``bench_context.py``'s replay on 2 cores of a KVM guest, each build's
query run again on two spinning sessions, one in huge pages, in alternating order: a single text
0.19-0.42 ms faster (p50 of ~4-5 ms, four runs), a pair unchanged (docs/benchmarks.md).

ONNX Runtime allocates the weights through malloc, which exposes no such choice, so the session is
opened first and the memory it brought in is then found by difference: the private anonymous
regions of ``/proc/self/smaps`` that are new (or grown) since a snapshot taken before, in whole
2 MiB pieces, are advised where densely resident (``mincore``: the weights, not a reserved thread
stack or arena, which the kernel may have merged into one region with them) ``MADV_HUGEPAGE``
(later faults there take huge pages) and collapsed now with ``MADV_COLLAPSE`` (Linux 6.1: a synchronous
copy into huge pages; MiniLM's session, ~130 MiB, ~0.3 s). Memory other threads brought in
meanwhile may be advised too, which is harmless: a dense region in huge pages holds the same
bytes. Anything failing (another OS, an older kernel, THP ``never``) leaves the pages as they
were and the session as good.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import mmap
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

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
    runs: list[tuple[int, int]] = []
    for i in range((hi - lo) // HUGE_PAGE):
        chunk = resident[i * per : (i + 1) * per]
        if sum(b & 1 for b in chunk) < DENSITY * per:
            continue
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
    would not ask, so the administrator's choice is kept here)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        mode = thp_mode(sysfs.read_text(encoding="ascii"))
    except OSError:
        return None
    if mode in (None, "never"):
        return None
    try:
        with open("/proc/self/maps", encoding="ascii") as f:
            return anonymous_spans(f.read())
    except OSError:
        return None


def advise_since(before: Mapping[int, int] | None, nice: int = 0) -> int:
    """Advise and collapse into huge pages the dense memory this process brought in since
    ``before``; the bytes advised (0 when nothing could be). ``nice``: run the calling thread at
    that much lower a priority first (a thread of its own: the collapse's copying is its work)."""
    if before is None:
        return 0
    if nice:
        with contextlib.suppress(OSError, AttributeError):  # Linux: a thread's own nice value
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + nice)
    madvise = _madvise()
    if madvise is None:
        return 0
    try:
        with open("/proc/self/smaps", encoding="ascii") as f:
            candidates = new_ranges(before, regions(f.read()))
    except OSError:
        return 0
    ranges = [run for lo, hi in candidates for run in dense_runs(lo, hi, _resident(lo, hi), mmap.PAGESIZE)]
    t0 = time.perf_counter()
    advised = collapsed = 0
    for lo, hi in ranges:
        if madvise(lo, hi - lo, MADV_HUGEPAGE) != 0:
            continue  # THP "never", or the range changed meanwhile
        advised += hi - lo
        if madvise(lo, hi - lo, MADV_COLLAPSE) == 0:
            collapsed += hi - lo
    log.debug(
        "huge pages: %d MiB advised, %d MiB collapsed in %.0f ms",
        advised >> 20, collapsed >> 20, (time.perf_counter() - t0) * 1e3,
    )  # fmt: skip
    return advised


def _resident(lo: int, hi: int) -> bytes:
    """``mincore``'s vector of ``[lo, hi)``; all zero (nothing dense) where it cannot be read."""
    pages = (hi - lo) // mmap.PAGESIZE
    vector = (ctypes.c_ubyte * pages)()
    libc = _libc()
    if libc is None or libc.mincore(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), vector) != 0:
        return bytes(pages)
    return bytes(vector)


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None


def _madvise() -> Callable[[int, int, int], int] | None:
    libc = _libc()
    fn = getattr(libc, "madvise", None)
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast(Callable[[int, int, int], int], fn)
