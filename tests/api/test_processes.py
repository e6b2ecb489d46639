"""Two real ``vcm serve`` processes on one hot state (a private redis-server, or the private
three-master Redis Cluster) and one store: one agent's requests alternate between them, another
agent sends the same requests to one process only, and every answer must be the same.

What could differ if an API process kept per-agent state in its memory: message ids and seqs,
idempotent replays and mismatches, block revisions and conflicts, recall cursors (MAC key shared
through Redis), the heartbeat chain (depth, rate limit, state in Redis), the context. Each process
runs its own in-process cold path (``memory://``) over the shared Redis and SQLite file; message
vectors are off, so no model loads.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.rediscluster import ClusterUnavailable, RedisServerProcess

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(240)]

VCM = str(Path(sys.executable).with_name("vcm"))
ADMIN = "two-process-admin-token-0123456789"
WORD = "harbour"  # in every appended message: one text query finds them all


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def single_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = RedisServerProcess(Path(tmp_path_factory.mktemp("redis-single")))
    try:
        try:
            yield server.start()
        except ClusterUnavailable as exc:
            pytest.skip(f"no private redis-server ({exc})")
    finally:
        server.stop()


@pytest.fixture(params=["redis", "cluster"])
def hot_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("redis_cluster_url" if request.param == "cluster" else "single_redis"))


@pytest.fixture
def apis(hot_url: str, tmp_path: Path) -> Iterator[list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    env |= {
        "VCM_REDIS_URL": hot_url,
        "VCM_BROKER_URL": "memory://",
        "VCM_STORE_URL": f"sqlite:///{tmp_path / 'vcm.db'}",
        "VCM_API__ADMIN_TOKEN": ADMIN,
        "VCM_RECALL__VECTORS": "false",
        "VCM_WORKER__PRELOAD_EMBEDDER": "false",
        "VCM_LOG_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
    }
    procs: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        for i in range(2):
            port = _free_port()
            log = (tmp_path / f"api-{i}.log").open("wb")
            argv = [VCM, "serve", "--host", "127.0.0.1", "--port", str(port)]
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
            urls.append(f"http://127.0.0.1:{port}")
        for url, proc in zip(urls, procs, strict=True):
            _wait(lambda u=url, p=proc: _healthy(u) or p.poll() is not None, 90, f"{url} up (logs in {tmp_path})")
            assert proc.poll() is None, (tmp_path / "api-0.log").read_text()[-3000:]
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _wait(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting until {what}")
        time.sleep(0.1)


# Values that differ between any two runs however correct they are: times, the issued token,
# opaque cursors (they carry a time and store row ids; following them is compared instead), and
# BM25 scores (their statistics span every agent in the store; the order of hits does not move).
VOLATILE = re.compile(r"(_at|^at|^ts|^time|^token|^created|^updated|^started|^ended|^duration(_ms)?|^score|cursor)$")
# A recall note's id is derived from the agent and its idempotency key; a chain id is random.
NOTE_ID = re.compile(r"\br[0-9a-f]{20}\b")
CHAIN_ID = re.compile(r"\b[0-9a-f]{16}\b")
DURATION = re.compile(r'"duration(_ms)?":[0-9.e-]+')


def _normal(value: Any, agent: str) -> Any:
    if isinstance(value, dict):
        return {k: _normal(v, agent) for k, v in value.items() if not VOLATILE.search(k)}
    if isinstance(value, list):
        return [_normal(v, agent) for v in value]
    if isinstance(value, str):
        value = DURATION.sub(r'"duration\1":0', value.replace(agent, "<agent>"))
        return CHAIN_ID.sub("<chain>", NOTE_ID.sub("<note>", value))
    return value


def _text(i: int) -> str:
    # Lengths all differ, so BM25 ranks the hits in one order (ties would fall to index layout).
    return f"{WORD} note {i}: the ferry leaves from pier {i}" + " and then stops" * i


class Conversation:
    """One agent's requests, each sent to the next process of ``urls`` in turn."""

    def __init__(self, urls: list[str], agent: str) -> None:
        self.urls, self.agent, self.n = urls, agent, 0
        self.log: list[tuple[str, int, Any]] = []
        self.raw: dict[str, Any] = {}
        self.headers: dict[str, str] = {}

    def send(self, what: str, method: str, path: str, **kwargs: Any) -> Any:
        url = self.urls[self.n % len(self.urls)]
        self.n += 1
        headers = {**self.headers, **kwargs.pop("headers", {})}
        r = httpx.request(method, f"{url}/v1{path}", headers=headers, timeout=30, **kwargs)
        body = r.json()
        self.raw[what] = body
        self.log.append((what, r.status_code, _normal(body, self.agent)))
        return body

    def run(self) -> list[tuple[str, int, Any]]:
        a = self.agent
        created = self.send(
            "create", "POST", "/agents", headers={"Authorization": f"Bearer {ADMIN}"},
            json={"agent_id": a, "system_prompt": "You keep notes about the harbour."},
        )  # fmt: skip
        self.headers = {"Authorization": f"Bearer {created['token']}"}
        for i in range(8):
            self.send(f"append {i}", "POST", f"/agents/{a}/messages", json={"role": "user", "content": _text(i)},
                      headers={"Idempotency-Key": f"k{i}"})  # fmt: skip
        again = {"role": "user", "content": _text(3)}
        self.send("replay", "POST", f"/agents/{a}/messages", json=again, headers={"Idempotency-Key": "k3"})
        other = {"role": "user", "content": "something else"}
        self.send("mismatch", "POST", f"/agents/{a}/messages", json=other, headers={"Idempotency-Key": "k3"})
        block = self.send("block", "PUT", f"/agents/{a}/blocks/plan", json={"content": "sail at six"})
        rev = block.get("rev") or block.get("_rev")
        self.send("block edit", "PUT", f"/agents/{a}/blocks/plan", json={"content": "sail at seven"},
                  headers={"If-Match": str(rev)})  # fmt: skip
        self.send("stale edit", "PUT", f"/agents/{a}/blocks/plan", json={"content": "sail at eight"},
                  headers={"If-Match": str(rev)})  # fmt: skip
        self.send("block read", "GET", f"/agents/{a}/blocks/plan")
        note = {"content": f"{WORD} timetable changes in winter", "role": "user"}
        self.send("note", "POST", f"/agents/{a}/recall", json=note, headers={"Idempotency-Key": "n1"})
        self.send("note again", "POST", f"/agents/{a}/recall", json=note, headers={"Idempotency-Key": "n1"})

        def searchable() -> bool:  # the write-behind has spooled all nine, seen from both processes
            return all(
                len(httpx.get(f"{u}/v1/agents/{a}/recall", params={"query": WORD, "mode": "text", "limit": 50},
                              headers=self.headers, timeout=30).json()["items"]) == 9
                for u in self.urls
            )  # fmt: skip

        _wait(searchable, 60, f"{a}'s messages searchable")
        page = self.send("recall 1", "GET", f"/agents/{a}/recall", params={"query": WORD, "mode": "text", "limit": 4})
        pages = 1
        while page.get("next_cursor") and pages < 5:
            params = {"query": WORD, "mode": "text", "limit": 4, "cursor": page["next_cursor"]}
            page = self.send(f"recall {pages + 1}", "GET", f"/agents/{a}/recall", params=params)
            pages += 1
        assert pages == 3, "nine hits, four a page"
        for i in range(9):  # a chain to its depth limit (8); spaced under the 3/s rate limit
            time.sleep(0.4)
            args = {"arguments": {"note": f"step {i}", "request_heartbeat": True}, "tool_call_id": f"c{i}"}
            self.send(f"heartbeat {i}", "POST", f"/agents/{a}/tools/record_heartbeat", json=args)
        self.send("context", "GET", f"/agents/{a}/context")
        return self.log


def test_one_agent_across_two_api_processes_gets_the_answers_of_one(apis: list[str]) -> None:
    alone = Conversation(apis[:1], "solo").run()
    conversation = Conversation(apis, "shared")
    shared = conversation.run()
    assert [step for step, _, _ in shared] == [step for step, _, _ in alone]
    for (step, status_a, body_a), (_, status_b, body_b) in zip(alone, shared, strict=True):
        if step.startswith("recall "):
            # The order of near-equal BM25 scores can move while the text index catches up with
            # the newest messages (they are scored apart meanwhile): compare what the pages hold.
            body_a, body_b = ([*sorted(map(str, b["items"])), b["mode"]] for b in (body_a, body_b))
        if step.startswith("heartbeat "):
            # The result's token count includes its random chain id, which tokenizes unevenly.
            body_a, body_b = ({k: v for k, v in b.items() if k != "tokens"} for b in (body_a, body_b))
        assert (status_b, body_b) == (status_a, body_a), f"{step} differs: {(status_a, body_a)} != {(status_b, body_b)}"
    assert _hits(alone) == _hits(shared)
    by_step = {step: (status, body) for step, status, body in shared}
    # The comparison means something only if the requests did what they are for.
    assert by_step["replay"][1]["replayed"] is True
    assert by_step["replay"][1]["message_id"] == by_step["append 3"][1]["message_id"]
    assert by_step["mismatch"][0] == 422 and by_step["mismatch"][1]["error"]["code"] == "IDEMPOTENCY_MISMATCH"
    assert by_step["stale edit"][0] in (409, 412)
    assert by_step["note again"][1] == by_step["note"][1]
    hits = _hits(shared)
    assert len(hits) == len(set(hits)) == 9  # the cursors of one process paged on the other
    beats = [conversation.raw[f"heartbeat {i}"]["heartbeat"] for i in range(9)]
    # one chain, its depth counted across both processes, and stopped at the limit
    assert len({b["chain_id"] for b in beats[:8]}) == 1 and [b["depth"] for b in beats[:8]] == list(range(1, 9))
    assert not beats[8]["run"], beats[8]


def _hits(log: list[tuple[str, int, Any]]) -> list[str]:
    pages = [body for step, _, body in log if step.startswith("recall ")]
    return sorted(h["message"]["message_id"] for page in pages for h in page["items"])
