"""The model's weights in transparent huge pages (vcm.tasks.hugepages): which regions are advised
(pure, over /proc texts), and on Linux a real region of this process advised and collapsed."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import pytest

from vcm.settings.memory import EmbeddingSettings
from vcm.tasks import hugepages
from vcm.tasks.hugepages import HUGE_PAGE, Region, anonymous_spans, dense_runs, new_ranges, regions

MB = 1 << 20

SMAPS = """\
55b3e8200000-55b3ee600000 rw-p 00000000 00:00 0                          [heap]
Size:              102400 kB
Anonymous:         101000 kB
VmFlags: rd wr mr mw me ac sd
7f0000000000-7f0000800000 rw-p 00000000 00:00 0
Size:               8192 kB
Anonymous:            64 kB
VmFlags: rd wr mr mw me ac sd
7f1000000000-7f1000a00000 rw-p 00000000 fd:01 1234                       /usr/lib/libonnxruntime.so
Size:              10240 kB
Anonymous:         10240 kB
VmFlags: rd wr mr mw me ac sd
7f2000100000-7f2002d00000 rw-p 00000000 00:00 0
Size:              45056 kB
Anonymous:         45056 kB
VmFlags: rd wr mr mw me ac sd
7f3000000000-7f3000800000 rw-s 00000000 00:01 77                         /dev/zero (deleted)
Size:               8192 kB
Anonymous:             0 kB
VmFlags: rd wr sh mr mw me ms sd
7ffc00000000-7ffc00800000 rw-p 00000000 00:00 0                          [stack]
Size:               8192 kB
Anonymous:          8192 kB
VmFlags: rd wr mr mw me gd ac
"""


def test_regions_are_the_private_anonymous_writable_ones() -> None:
    found = regions(SMAPS)
    assert [(r.start, r.end, r.anonymous >> 10) for r in found] == [
        (0x55B3E8200000, 0x55B3EE600000, 101000),  # the heap
        (0x7F0000000000, 0x7F0000800000, 64),  # a thread's stack: reserved, barely touched
        (0x7F2000100000, 0x7F2002D00000, 45056),
    ]  # a library's data, a shared mapping and the main stack ([stack]) are not among them
    assert found[0].flags == frozenset({"rd", "wr", "mr", "mw", "me", "ac", "sd"})
    assert anonymous_spans(SMAPS) == {r.start: r.end for r in found}


def test_new_memory_is_taken_in_whole_huge_pages() -> None:
    heap, stack, weights = regions(SMAPS)
    before = {heap.start: heap.start + 9 * MB}  # the heap grew by the session's weights
    ranges = new_ranges(before, [heap, stack, weights])
    grown_from = -(-(heap.start + 9 * MB) // HUGE_PAGE) * HUGE_PAGE
    assert ranges == [(grown_from, heap.end), (stack.start, stack.end), (0x7F2000200000, 0x7F2002C00000)]
    assert all(lo % HUGE_PAGE == 0 and hi % HUGE_PAGE == 0 for lo, hi in ranges)  # inward to 2 MiB
    assert new_ranges({weights.start: weights.end, heap.start: heap.end}, [heap, weights]) == []
    stack_below = Region(weights.start, weights.end, weights.anonymous, weights.flags | {"gd"})
    never = Region(weights.start, weights.end, weights.anonymous, weights.flags | {"nh"})
    assert new_ranges({}, [stack_below, never]) == []  # a stack, or refused by its owner
    assert new_ranges({}, [Region(0x7F4000100000, 0x7F4000300000, 2 * MB, frozenset())]) == []


def test_only_densely_resident_huge_pages_are_advised() -> None:
    """A reservation the kernel merged with the weights into one region (a thread's stack, an
    arena) is told apart page by page: mincore's vector, a byte per 4 KiB page."""
    per = HUGE_PAGE // 4096
    full, empty = b"\x01" * per, b"\x00" * per
    nearly = b"\x01" * int(per * 0.95) + b"\x00" * (per - int(per * 0.95))
    half = b"\x01" * (per // 2) + b"\x00" * (per - per // 2)
    lo = 0x7F2000000000
    vector = full + nearly + empty + half + full + b"\x03" * per  # bit 0 counts, not the others
    runs = dense_runs(lo, lo + 6 * HUGE_PAGE, vector, 4096)
    assert runs == [(lo, lo + 2 * HUGE_PAGE), (lo + 4 * HUGE_PAGE, lo + 6 * HUGE_PAGE)]
    assert dense_runs(lo, lo + HUGE_PAGE, empty, 4096) == []


def _thp_mode() -> str | None:
    try:
        return hugepages.thp_mode(Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text())
    except OSError:
        return None


def _flags_of(address: int) -> frozenset[str]:
    found = [r for r in regions(Path("/proc/self/smaps").read_text()) if r.start <= address < r.end]
    assert found, "the mapping is not among this process's anonymous regions"
    return found[0].flags


@pytest.mark.skipif(_thp_mode() in (None, "never"), reason="needs Linux with transparent huge pages")
def test_memory_brought_in_since_a_snapshot_is_advised_and_a_sparse_reservation_is_not() -> None:
    before = hugepages.snapshot()
    assert before is not None
    dense = mmap.mmap(-1, 8 * MB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    sparse = mmap.mmap(-1, 16 * MB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        dense.write(b"\x01" * (8 * MB))  # every page resident, as loaded weights are
        sparse.write(b"\x01" * 4096)  # one page of a reservation, as a thread's stack
        address = _address(dense)
        advised = hugepages.advise_since(before)
        assert advised >= 6 * MB  # at least the dense mapping's whole huge pages
        assert "hg" in _flags_of(address)
        assert "hg" not in _flags_of(_address(sparse))
        assert dense[: 8 * MB] == b"\x01" * (8 * MB)  # the same bytes, wherever they now live
    finally:
        dense.close()
        sparse.close()


def _address(m: mmap.mmap) -> int:
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(m))


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads Linux's /proc/self/maps")
def test_a_mapped_file_whose_path_is_not_ascii_is_read_past(tmp_path: Path) -> None:
    """A library or model under /home/jürgen/ is mapped by name: reading the maps never fails a
    session's open for it (it raised UnicodeDecodeError before)."""
    path = Path(os.fsdecode(os.fsencode(tmp_path) + b"/mod\xe8le-\xff"))
    path.write_bytes(b"\0" * 8192)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert mapped[:1] == b"\0"
        before = hugepages.snapshot()
        if _thp_mode() not in (None, "never"):
            assert before is not None
        assert hugepages.advise_since(before) >= 0


def test_nothing_to_advise_without_a_snapshot() -> None:
    assert hugepages.advise_since(None) == 0


@pytest.mark.parametrize(
    ("text", "mode"),
    [("always [madvise] never\n", "madvise"), ("[always] madvise never", "always"),
     ("always madvise [never]\n", "never"), ("", None)],
)  # fmt: skip
def test_the_kernels_mode_is_read_from_sysfs(text: str, mode: str | None) -> None:
    assert hugepages.thp_mode(text) == mode


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads Linux's /proc/self/maps")
def test_huge_pages_turned_off_by_the_administrator_are_not_asked_for(tmp_path: Path) -> None:
    """MADV_COLLAPSE ignores the system-wide setting: under "never" vcm does not call it."""
    sysfs = tmp_path / "enabled"
    sysfs.write_text("always madvise [never]\n")
    assert hugepages.snapshot(sysfs) is None
    assert hugepages.snapshot(tmp_path / "missing") is None
    sysfs.write_text("always [madvise] never\n")
    assert hugepages.snapshot(sysfs)


def test_sessions_ask_for_huge_pages_as_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The setting reaches the session: on by default; off leaves the pages alone."""
    from vcm.tasks import embedding_onnx

    asked: list[Any] = []
    monkeypatch.setattr(embedding_onnx, "open_session", lambda *a, **k: asked.append(k.get("huge_pages")) or object())
    monkeypatch.setattr(embedding_onnx, "_tokenizer", lambda folder, plain: object())
    meta = {"pooling": ["mean"], "normalize": True, "max_seq_length": 256}
    embedding_onnx.OnnxRunner.open(tmp_path / "m.onnx", tmp_path, meta, threads=1, huge_pages=True)
    embedding_onnx.OnnxRunner.open(tmp_path / "m.onnx", tmp_path, meta, threads=1, huge_pages=False)
    assert asked == ["background", ""]
    assert EmbeddingSettings().huge_pages is True
