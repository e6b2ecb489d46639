"""Pure pieces: the shared cursor codec and filters, the embedded adapter's IVF sizing and BM25."""

from __future__ import annotations

import math

import pytest

from tests.store.factories import chunk
from vcm.errors import ValidationError
from vcm.store import bm25
from vcm.store.cursor import decode_cursor, encode_cursor, fingerprint
from vcm.store.embedded import sizing
from vcm.store.filters import parse_filters

SECRET = b"s" * 32


def test_cursor_round_trip_is_opaque_url_safe_text() -> None:
    cursor = encode_cursor({"k": "recall", "s": "abc", "o": 10}, SECRET)

    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
    assert decode_cursor(cursor, SECRET, kind="recall") == {"v": 1, "k": "recall", "s": "abc", "o": 10}


@pytest.mark.parametrize(
    "mangle",
    [
        lambda c: c.replace(".", ""),
        lambda c: c[:-1] + ("A" if c[-1] != "A" else "B"),
        lambda c: ("B" if c[0] != "B" else "C") + c[1:],
        lambda c: c + "!!",
        lambda c: "",
        lambda c: "x" * 5000,
    ],
)
def test_cursor_rejects_damaged_text(mangle: object) -> None:
    cursor = encode_cursor({"k": "recall", "o": 1}, SECRET)
    with pytest.raises(ValidationError):
        decode_cursor(mangle(cursor), SECRET, kind="recall")  # type: ignore[operator]


def test_cursor_rejects_other_secret_kind_and_version() -> None:
    cursor = encode_cursor({"k": "recall", "o": 1}, SECRET)
    with pytest.raises(ValidationError, match="not issued by this store"):
        decode_cursor(cursor, b"t" * 32, kind="recall")
    with pytest.raises(ValidationError, match="different operation"):
        decode_cursor(cursor, SECRET, kind="events")
    with pytest.raises(ValidationError, match="version"):
        decode_cursor(encode_cursor({"k": "recall", "v": 0}, SECRET), SECRET, kind="recall")


def test_fingerprint_is_stable_and_sensitive() -> None:
    assert fingerprint("a", 1, None, {"x": [1, 2]}) == fingerprint("a", 1, None, {"x": [1, 2]})
    assert fingerprint("a", 1) != fingerprint("a", 2)


def test_auto_n_lists_follows_sqrt_n_capped_by_39_per_list() -> None:
    assert sizing.auto_n_lists(1_000_000) == 1000
    assert sizing.auto_n_lists(5_000_000) == round(math.sqrt(5_000_000))
    assert sizing.auto_n_lists(1_000) == 1_000 // 39  # 32 would leave < 39 points per list
    assert sizing.auto_n_lists(10) == sizing.MIN_LISTS


def test_default_n_probe_follows_the_lists_and_training_samples_are_bounded() -> None:
    assert sizing.default_n_probe(4) == 4  # never more than there are lists
    assert sizing.default_n_probe(1000) == 16
    assert sizing.default_n_probe(2236) == 35  # 1/64 of the lists, rounded up
    assert sizing.training_sample_size(5_000_000, 2236) == 2236 * 256
    assert sizing.training_sample_size(10_000, 100) == 10_000


def test_train_threshold_and_retraining() -> None:
    assert sizing.train_threshold(100, n_lists=8) == 312
    assert sizing.train_threshold(10_000, n_lists=None) == 10_000
    assert sizing.train_threshold(10, n_lists=100) == 3900
    assert not sizing.should_retrain(100, 39_000, None)
    assert sizing.should_retrain(100, 40_000, None)  # 200 lists now fit
    assert not sizing.should_retrain(8, 1_000_000, fixed_lists=8)


def test_overfetch_sizes_grow_until_the_whole_index() -> None:
    assert sizing.overfetch_sizes(10, 1000) == [40, 160, 640, 1000]
    assert sizing.overfetch_sizes(10, 30) == [30]
    assert sizing.overfetch_sizes(0, 30) == []


def test_filters_split_chunk_fields_metadata_and_staleness() -> None:
    flt = parse_filters({"doc_id": "d", "lang": "en", "include_stale": True})
    fresh = chunk("a", "d", 0, [1.0], metadata={"lang": "en"}, valid_until=None)
    stale = chunk("a", "d", 1, [1.0], metadata={"lang": "en"}, valid_until=5.0)

    assert dict(flt.fields) == {"doc_id": "d"} and dict(flt.metadata) == {"lang": "en"}
    assert flt.matches(fresh, now=10.0) and flt.matches(stale, now=10.0)
    assert not parse_filters({"lang": "en"}).matches(stale, now=10.0)
    assert parse_filters({"lang": "en"}).matches(stale, now=4.0)
    assert not parse_filters({"lang": "de"}).matches(fresh, now=0.0)
    assert not parse_filters({"missing": None}).matches(fresh, now=0.0)
    assert not parse_filters({"source": "elsewhere"}).matches(fresh, now=0.0)


@pytest.mark.parametrize("bad", [{"": 1}, {"x": math.nan}, {"x": object()}, {"include_stale": 1}, ["x"]])
def test_filters_reject_bad_input(bad: object) -> None:
    with pytest.raises(ValidationError):
        parse_filters(bad)  # type: ignore[arg-type]


def test_bm25_matches_the_textbook_formula() -> None:
    got = bm25.score(["cat"], ["cat", "dog"], doc_freq={"cat": 1}, num_docs=10, avg_doc_len=4.0)

    idf = math.log(1 + (10 - 1 + 0.5) / (1 + 0.5))
    expected = idf * 2.2 * 1 / (1 + 1.2 * (0.25 + 0.75 * 2 / 4))
    assert got == pytest.approx(expected)
    assert bm25.score(["cow"], ["cat"], doc_freq={}, num_docs=1, avg_doc_len=1.0) == 0.0
