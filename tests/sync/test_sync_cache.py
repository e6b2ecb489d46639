"""The client's local cache and sync rules without a server (vcm.sync): the LRU cache with its
lifetimes and races, the conflict strategies, the event-stream parser, and the replica's flows
driven against an in-memory stand-in for the state routes."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from tests.doubles.clock import Clock
from vcm.errors import NotFound, RevConflict, StoreUnavailable
from vcm.sync import CacheConfig
from vcm.sync.cache import LocalCache
from vcm.sync.conflicts import Version, resolve
from vcm.sync.flows import drive
from vcm.sync.replica import Replica
from vcm.sync.sse import Lines, Parser
from vcm.wire import Call


# --- the cache ---------------------------------------------------------------------------------------
def test_the_cache_evicts_the_least_recently_used_and_counts_hits_and_misses() -> None:
    cache = LocalCache(2, 60.0)
    cache.put(("a", "state", "x"), {"v": 1}, "1")
    cache.put(("a", "state", "y"), {"v": 2}, "2")
    assert cache.get(("a", "state", "x")) == {"v": 1}  # x is now the most recent
    cache.put(("a", "state", "z"), {"v": 3}, "3")  # over the cap: y goes
    assert cache.get(("a", "state", "y")) is None and cache.version(("a", "state", "y")) is None
    assert cache.get(("a", "state", "x")) == {"v": 1}
    counts = cache.counts()
    assert (counts.entries, counts.hits, counts.misses, counts.evictions) == (2, 2, 1, 1)
    assert counts.hit_ratio == pytest.approx(2 / 3)


def test_an_expired_or_invalidated_value_is_a_miss_but_its_version_stays_the_base() -> None:
    clock = Clock(now=0.0)
    cache = LocalCache(10, 5.0, clock=clock)
    key = ("a", "state", "k")
    cache.put(key, {"value": 1}, "1")
    clock.now = 5.0
    assert cache.get(key) is None and cache.version(key) == "1"  # expired, version kept
    cache.put(key, {"value": 1}, "1")
    assert not cache.invalidate(key, "1")  # its own write coming back: nothing to drop
    assert cache.get(key) == {"value": 1}
    assert cache.invalidate(key, "2")  # another instance's write
    assert cache.get(key) is None and cache.version(key) == "1"
    assert cache.clear("a") == 1 and cache.version(key) is None  # a gap: nothing can be trusted


def test_a_read_that_races_a_change_is_not_served_afterwards_unless_it_is_the_new_version() -> None:
    cache = LocalCache(10, 60.0)
    key = ("a", "state", "k")
    cache.reading(key)
    cache.invalidate(key, "2")  # the feed announces version 2 while the read is on the wire
    cache.read_done(key, {"value": "old"}, "1")  # the read returned what was there before
    assert cache.get(key) is None and cache.version(key) == "1"
    cache.reading(key)
    cache.invalidate(key, "3")
    cache.read_done(key, {"value": "new"}, "3")  # the read saw the announced version: fresh
    assert cache.get(key) == {"value": "new"}


# --- conflict strategies -------------------------------------------------------------------------------
LOCAL = Version(["x", "local"], "1", 10.0)
REMOTE = Version(["x", "remote"], "2", 11.0)


def test_each_strategy_decides_as_documented() -> None:
    assert resolve("reject", LOCAL, REMOTE).resolution == "rejected"
    lww = resolve("last_write_wins", LOCAL, REMOTE)
    assert (lww.resolution, lww.write, lww.value, lww.losing) == ("local_won", True, LOCAL.value, (REMOTE.value,))
    union = resolve("merge", LOCAL, REMOTE, lambda a, b: sorted({*a, *b}))
    assert (union.resolution, union.write, union.value) == ("merged", True, ["local", "remote", "x"])
    keep = resolve("merge", LOCAL, REMOTE, lambda a, b: b)
    assert (keep.resolution, keep.write, keep.losing) == ("remote_won", False, (LOCAL.value,))
    gone = Version(None, None, None, deleted=True)
    assert resolve("reject", Version(None, "1", 1.0, deleted=True), gone).resolution == "agreed"
    assert resolve("reject", Version(REMOTE.value, "1", 1.0), REMOTE).resolution == "agreed"
    undelete = resolve("last_write_wins", LOCAL, gone)
    assert undelete.write and undelete.losing == ()
    with pytest.raises(ValueError):
        resolve("merge", LOCAL, REMOTE)
    with pytest.raises(ValueError):
        CacheConfig(conflict="merge")


def test_the_event_stream_parser_reads_ids_comments_and_multiline_data() -> None:
    parser = Parser()
    lines = ["id: 1-0", "event: ready", 'data: {"head":"1-0"}', "", ": keepalive", "", "id: 2-0", "event: change",
             "data: a", "data: b", ""]  # fmt: skip
    events = [e for e in map(parser.line, lines) if e is not None]
    assert [(e.event, e.data, e.id) for e in events] == [("ready", '{"head":"1-0"}', "1-0"), ("change", "a\nb", "2-0")]


@pytest.mark.parametrize("cut", [1, 2, 3, 7])
def test_a_streamed_body_is_cut_into_lines_at_line_ends_only(cut: int) -> None:
    body = 'data: {"t":"a\u2028b\x85c"}\r\n\r\nid: 2\rdata: x\n\nlast'
    lines, out = Lines(), []
    for start in range(0, len(body), cut):  # chunks that split \r\n and the separators anywhere
        out += lines.feed(body[start : start + cut])
    assert out + lines.end() == ['data: {"t":"a\u2028b\x85c"}', "", "id: 2", "data: x", "", "last"]


# --- the replica's flows ---------------------------------------------------------------------------------
class FakeServer:
    """The state routes of one agent, the feed's head, conflict and status reports, in memory."""

    def __init__(self) -> None:
        self.state: dict[str, tuple[Any, str]] = {}
        self.rev = 0
        self.calls: list[Call] = []
        self.conflicts: list[dict[str, Any]] = []
        self.reports: list[dict[str, Any]] = []
        self.down = False
        self.during: Any = None  # run once before the next PUT (another instance's write)

    def write(self, key: str, value: Any) -> dict[str, Any]:
        self.rev += 1
        self.state[key] = (value, str(self.rev))
        return {"key": key, "value": value, "_rev": str(self.rev), "updated_at": float(self.rev), "expires_at": None}

    def __call__(self, call: Call) -> Any:
        if self.down:
            raise httpx.ConnectError("down")
        self.calls.append(call)
        path = unquote(call.path)
        if path.endswith("/changes"):
            return {"changes": [], "next_after": "1-0", "head": "1-0", "gap": False}
        if path.endswith("/conflicts"):
            self.conflicts.append(dict(call.json))
            return {"event_id": call.json["conflict_id"]}
        if "/instances/" in path:
            self.reports.append(dict(call.json))
            return call.json
        key = path.rsplit("/", 1)[1]
        current = self.state.get(key)
        if call.method == "GET":
            if current is None:
                raise NotFound(f"no {key}")
            return {"key": key, "value": current[0], "_rev": current[1], "updated_at": float(current[1])}
        if call.method == "PUT" and self.during is not None:
            during, self.during = self.during, None
            during()
        expected = (call.json or {}).get("_rev") if call.method == "PUT" else (call.params or {}).get("_rev")
        if expected is not None and (current is None or current[1] != expected):
            raise RevConflict("stale", current_rev=current[1] if current else None)
        if call.method == "DELETE":
            self.state.pop(key, None)
            return {"agent_id": "a", "removed": {"state": 1}}
        return self.write(key, call.json["value"])


def _replica(**config: Any) -> Replica:
    return Replica(CacheConfig(instance_id="i1", sync_interval_s=0, **config))


@pytest.mark.parametrize(
    ("strategy", "final", "written"),
    [("reject", "theirs", False), ("last_write_wins", "mine", True), ("merge", "mine+theirs", True)],
)
def test_a_write_through_on_a_stale_version_is_resolved_and_reported_first(
    strategy: str, final: str, written: bool
) -> None:
    server = FakeServer()
    server.write("k", "base")
    replica = _replica(conflict=strategy, merge=lambda mine, theirs: f"{mine}+{theirs}")
    assert drive(replica.read("a", "state", "k"), server)["value"] == "base"
    assert drive(replica.read("a", "state", "k"), server)["value"] == "base"  # a hit: no request
    assert [c.method for c in server.calls] == ["GET", "GET"]  # the feed's head, then the key
    server.write("k", "theirs")  # another instance, unseen here
    change = replica.change("a", "state", "k", "mine", None)
    assert change.base == "1"
    if written:
        assert drive(replica.write(change), server)["value"] == final
    else:
        with pytest.raises(RevConflict) as exc:
            drive(replica.write(change), server)
        assert exc.value.details["local"]["value"] == "mine" and exc.value.details["remote"]["version"] == "2"
    assert server.state["k"][0] == final
    (report,) = server.conflicts
    assert report["local"]["base_version"] == "1" and report["remote"]["version"] == "2"
    # The report went before anything was written over.
    methods = [(c.method, c.path.rsplit("/", 1)[1]) for c in server.calls]
    assert methods.index(("POST", "conflicts")) < len(methods) - (1 if written else 0)
    assert replica.metrics()["conflicts"] == 1
    assert drive(replica.read("a", "state", "k"), server)["value"] == final  # the cache knows the outcome


def test_write_back_keeps_changes_until_sync_and_rebases_one_made_during_the_push() -> None:
    server = FakeServer()
    replica = _replica(write="back")
    staged = drive(replica.submit(replica.change("a", "state", "k", 1, None)), server)
    assert staged["pending"] and "k" not in server.state
    assert drive(replica.read("a", "state", "k"), server)["value"] == 1  # reads see it at once
    # While the push is on the wire, the application changes the key again, on top of it.
    server.during = lambda: replica.stage(replica.change("a", "state", "k", 2, None))
    result = drive(replica.sync(), server)
    assert result.pushed == 1 and server.state["k"] == (1, "1")
    assert replica.pending[("a", "state", "k")].base == "1"  # based on what the push produced
    assert replica.status == "syncing" and server.reports[-1]["pending"] == 1
    drive(replica.sync(), server)
    assert server.state["k"] == (2, "2") and not replica.pending and server.conflicts == []
    assert replica.status == "synced" and server.reports[-1]["status"] == "synced"


def test_a_failed_sync_keeps_pending_changes_and_says_error_a_rejected_one_is_dropped() -> None:
    server = FakeServer()
    server.write("k", "base")
    replica = _replica(write="back")
    drive(replica.read("a", "state", "k"), server)
    drive(replica.submit(replica.change("a", "state", "k", "mine", None)), server)
    server.down = True
    for _ in range(3):
        with pytest.raises(httpx.ConnectError):
            drive(replica.sync(), server)
    m = replica.metrics()
    assert (m["status"], m["failures"], m["consecutive_failures"], m["pending"]) == ("error", 3, 3, 1)
    server.down = False
    server.write("k", "theirs")  # meanwhile, elsewhere
    result = drive(replica.sync(), server)
    assert len(result.rejected) == 1 and isinstance(result.rejected[0], RevConflict)
    assert server.state["k"][0] == "theirs" and not replica.pending
    assert replica.status == "conflict" and server.reports[-1]["consecutive_failures"] == 0
    assert server.conflicts[0]["losing_value"] == "mine"  # the dropped local value, in the audit row
    assert drive(replica.read("a", "state", "k"), server)["value"] == "theirs"


def test_a_server_error_leaves_the_change_queued() -> None:
    server = FakeServer()
    replica = _replica(write="back")
    drive(replica.submit(replica.change("a", "state", "k", 1, None)), server)
    server.during = lambda: (_ for _ in ()).throw(StoreUnavailable("the store is down"))
    with pytest.raises(StoreUnavailable):
        drive(replica.sync(), server)
    assert replica.pending and replica.status == "error"
