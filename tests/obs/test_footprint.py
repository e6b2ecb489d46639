"""Diff footprints (pure): counts, revs and digests, never the content."""

from __future__ import annotations

import json

import pytest

from vcm.obs import audit, footprint

SECRET = "my passport number is X1234567 and I live at 12 Elm Street"


def test_changed_span_measures_the_differing_middle() -> None:
    assert footprint.changed_span("hello world", "hello world!") == (0, 1)
    assert footprint.changed_span("hello world", "hello there world") == (0, 6)
    assert footprint.changed_span("abcdef", "abXYef") == (2, 2)
    assert footprint.changed_span("same", "same") == (0, 0)
    assert footprint.changed_span("", "new") == (0, 3)
    assert footprint.changed_span("old", "") == (3, 0)
    big = "x" * 200_000
    assert footprint.changed_span(big + "a" + big, big + "bb" + big) == (1, 2)


def test_block_footprints_for_create_edit_delete() -> None:
    created = footprint.block(None, "abc", before_rev=None, after_rev="1", tokens_before=0, tokens_after=5)
    edited = footprint.block("abc", "abcd", before_rev="1", after_rev="2", tokens_before=5, tokens_after=6)
    deleted = footprint.block("abcd", None, before_rev="2", after_rev=None, tokens_before=6, tokens_after=0)

    assert created["op"] == "block_create" and created["sha_before"] is None
    assert (created["chars_added"], created["chars_removed"], created["tokens"]) == (3, 0, 5)
    assert edited["op"] == "block_edit" and (edited["before_rev"], edited["after_rev"]) == ("1", "2")
    assert (edited["chars_added"], edited["chars_removed"], edited["tokens"]) == (1, 0, 1)
    assert edited["sha_before"] == footprint.sha256("abc") and edited["sha_after"] == footprint.sha256("abcd")
    assert deleted["op"] == "block_delete" and deleted["sha_after"] is None and deleted["chars_removed"] == 4


def test_append_and_eviction_footprints() -> None:
    fp = footprint.append("hi there", 7, role="user")
    assert fp == {
        "op": "append",
        "role": "user",
        "tokens": 7,
        "fifo_len": 1,
        "pinned": False,
        "chars": 8,
        "content_sha256": footprint.sha256("hi there"),
    }
    assert footprint.eviction_begun(3, 90, 400) == {
        "op": "evict_begin",
        "fifo_len": -3,
        "tokens": -90,
        "messages": 3,
        "total_after": 400,
    }
    committed = footprint.eviction_committed(
        [10, 20], summary_rev_before="4", summary_tokens_after=33, summary_chars=120
    )
    assert (committed["messages"], committed["tokens_moved"], committed["summary_rev_before"]) == (2, 30, "4")


@pytest.mark.parametrize(
    "fp",
    [
        footprint.append(SECRET, 20, role="user"),
        footprint.recall_note(SECRET, 20, role="assistant"),
        footprint.block(SECRET, SECRET + " and a dog", before_rev="1", after_rev="2", tokens_before=1, tokens_after=2),
        footprint.ingest(SECRET, {"chunks": 1, "written": 1, "doc_id": SECRET, "note": SECRET}),
    ],
)
def test_footprints_never_hold_the_content(fp: dict[str, object]) -> None:
    text = json.dumps(fp)
    for piece in ("passport", "X1234567", "Elm Street", "dog"):
        assert piece not in text


def test_audit_event_attaches_actor_key_and_footprint() -> None:
    fp = footprint.append("x", 1, role="user")
    e = audit.event(
        "a1",
        "append",
        fp,
        actor=audit.tool(audit.api_agent("a1"), "append_fifo"),
        event_id="e",
        idempotency_key="k",
        details={"message_id": "m1"},
    )
    assert e.actor == "api:agent:a1/tool:append_fifo" and e.idempotency_key == "k"
    assert e.payload == {"message_id": "m1", "footprint": fp}
    assert audit.event("a1", "x", None, actor="", event_id="e").actor == "system"
