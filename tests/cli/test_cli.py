"""The `vcm` command line: serve (real HTTP), context, search, events, ingest, doctor."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.redis_legs import CLI_REDIS_URL
from vcm.cli.commands import render_context

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "test-admin-token-0123456789"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    env.update(HF_HUB_OFFLINE="1", VCM_STORE_URL=f"sqlite:///{tmp_path}/vcm.db", VCM_API__ADMIN_TOKEN=ADMIN)
    return env


def _vcm(tmp_path: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vcm.cli.main", *args],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vcm.cli.main", "serve", "--port", str(port)],
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.3)
        else:
            pytest.fail("vcm serve did not come up")
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
def test_serve_context_search_and_events_through_the_cli(tmp_path: Path, server: str) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    created = httpx.post(f"{server}/v1/agents", json={"agent_id": "cli1", "model": "vcm-demo-2k"}, headers=admin)
    assert created.status_code in (200, 201), created.text
    token = created.json()["token"]
    auth = {"Authorization": f"Bearer {token}"}
    for i in range(3):
        r = httpx.post(
            f"{server}/v1/agents/cli1/messages",
            headers=auth,
            json={"role": "user", "content": f"my locker code is 44{i}", "idempotency_key": f"k{i}"},
        )
        assert r.status_code in (200, 201), r.text
    ctx = _vcm(tmp_path, "context", "--agent", "cli1", "--api", server, "--token", token)
    assert ctx.returncode == 0, ctx.stderr
    assert "my locker code is 442" in ctx.stdout and "fifo" in ctx.stdout
    other = _vcm(tmp_path, "context", "--agent", "someone-else", "--api", server, "--token", token)
    assert other.returncode == 2 and "NOT_FOUND" in other.stderr
    # Spooling is write-behind: give the in-process worker a moment.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = _vcm(tmp_path, "search", "--agent", "cli1", "locker code", "--api", server, "--token", token)
        if "441" in found.stdout:
            break
        time.sleep(1)
    assert "441" in found.stdout
    events = _vcm(tmp_path, "events", "--agent", "cli1", "--api", server, "--token", token)
    assert events.returncode == 0 and "agent_created" in events.stdout
    # The appends' audit rows come from the real spool task (in-process Celery worker).
    args = ("events", "--agent", "cli1", "--kind", "append", "--actor", "api:agent:cli1", "--since", "1h")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = json.loads(_vcm(tmp_path, *args, "--api", server, "--token", token).stdout)["items"]
        if len(rows) == 3:
            break
        time.sleep(1)
    assert sorted(r["idempotency_key"] for r in rows) == ["k0", "k1", "k2"]
    assert all(r["payload"]["footprint"]["op"] == "append" for r in rows)
    assert "locker" not in json.dumps(rows)
    # Facts through the API: --limit is the server's limit too, and a fact has one type.
    api = ("--agent", "cli1", "--api", server, "--token", token)
    for place in ("Porto", "Faro", "Braga"):
        kept = _vcm(tmp_path, "facts", "remember", f"The user visited {place}", "--type", "preference", *api)
        assert kept.returncode == 0, kept.stderr
    listed = json.loads(_vcm(tmp_path, "facts", "list", "--limit", "2", *api).stdout)
    assert len(listed["facts"]) == 2
    two = _vcm(tmp_path, "facts", "remember", "The user likes tea", "--type", "preference", "--type", "learned", *api)
    assert two.returncode == 2 and "VALIDATION_ERROR" in two.stderr


@pytest.mark.slow
def test_ingest_then_search_archival(tmp_path: Path) -> None:
    import redis

    from vcm.hotpath.state import HotState
    from vcm.settings import load_settings

    url = CLI_REDIS_URL
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        client.flushdb()
    except redis.exceptions.ConnectionError:
        pytest.skip("needs the real Redis: embedded hot state is private to each CLI process")
    HotState(client, load_settings(environ={})).create_agent("ing1", model="vcm-demo-4k")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text(
        "Priya ran the Porto half marathon in 97 minutes.\n\nClara adopted a beagle named Biscuit."
    )
    (docs / "bad.txt").write_bytes(b"\xff\xfe\x00binary")
    env = {**_env(tmp_path), "VCM_REDIS_URL": url}
    ingest = subprocess.run(
        [sys.executable, "-m", "vcm.cli.main", "ingest", "--agent", "ing1", str(docs)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert ingest.returncode == 1, ingest.stderr  # the bad file is reported; the good one is ingested
    report = json.loads(ingest.stdout)
    assert "bad.txt" in json.dumps(report) and "a.txt" in json.dumps(report)
    found = subprocess.run(
        [sys.executable, "-m", "vcm.cli.main", "search", "--agent", "ing1", "--archival", "what dog did Clara adopt"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert found.returncode == 0, found.stderr
    assert "Biscuit" in found.stdout
    client.flushdb()


def test_doctor_reports_each_dependency(tmp_path: Path) -> None:
    from vcm.cli.doctor import doctor_checks
    from vcm.settings import load_settings

    ok = doctor_checks(load_settings({"store_url": f"sqlite:///{tmp_path}/vcm.db"}, environ={}), strict=True)
    jobs = {f"maintenance {j}" for j in ("expire", "sweep", "consolidate", "snapshot")}
    assert {name for name, _, _ in ok} == {"redis", "broker", "store", "embedding model", "late chunking", *jobs}
    assert all(passed for _, passed, _ in ok)
    bad = doctor_checks(
        load_settings({"store_url": f"sqlite:///{tmp_path}/vcm.db", "broker_url": "redis://127.0.0.1:1/0"}, environ={}),
        strict=True,
    )
    assert dict((n, p) for n, p, _ in bad)["broker"] is False
    tcp = doctor_checks(load_settings({"store_url": "arango+http://127.0.0.1:1/vcm"}, environ={}), strict=True)
    assert dict((n, p) for n, p, _ in tcp)["arango transport"] is False


def test_doctor_reports_whether_naive_chunking_is_allowed() -> None:
    from vcm.cli.doctor import chunking_check
    from vcm.settings import load_settings

    name, ok, detail = chunking_check(load_settings(environ={}), strict=True)
    assert (name, ok) == ("late chunking", True) and "allow_naive = false" in detail
    allowed = load_settings({"ingest": {"allow_naive": True}}, environ={})
    assert chunking_check(allowed, strict=False)[1] is True and "ALLOWED" in chunking_check(allowed, strict=False)[2]
    assert chunking_check(allowed, strict=True)[1] is False  # --strict: a compliance hole fails
    refused = load_settings({"ingest": {"mode": "naive"}}, environ={})
    assert chunking_check(refused, strict=False)[1] is False  # every ingestion would be refused


def test_render_context_shows_gauges_and_messages() -> None:
    data = {
        "agent_id": "a",
        "gauges": {
            "window": 1000,
            "max": 900,
            "system": 50,
            "working": 100,
            "summary": 30,
            "placeholders": 18,
            "fifo": 200,
            "pinned": 0,
            "total": 398,
            "free": 502,
            "occupancy": 0.398,
        },
        "messages": [{"role": "system", "content": "be nice"}, {"role": "user", "content": "hello there"}],
        "message_tokens": [50, 7],
    }
    text = render_context(data)
    assert "398 of 1000 tokens (40%)" in text and "502 free" in text
    assert "hello there" in text and "fifo" in text
    # A built context names each message's layer and sums the injected ones.
    built = {**data, "messages": [*data["messages"], {"role": "system", "content": "[vcm] memory"}],
             "message_tokens": [50, 7, 33], "layers": ["system", "fifo", "memory"]}  # fmt: skip
    shown = render_context(built)
    assert "injected for this call" in shown and "memory" in shown.split("injected")[1].split("\n")[1]
    assert shown.splitlines()[-1].split()[1] == "memory"


def test_events_time_arguments() -> None:
    import argparse
    from datetime import UTC, datetime

    from vcm.cli.commands import parse_when

    assert parse_when("1700000000.5") == 1700000000.5
    assert parse_when("2026-01-31T12:00") == datetime(2026, 1, 31, 12, tzinfo=UTC).timestamp()
    assert parse_when("2026-01-31T12:00+01:00") == datetime(2026, 1, 31, 11, tzinfo=UTC).timestamp()
    assert abs(parse_when("2h") - (time.time() - 7200)) < 60
    with pytest.raises(argparse.ArgumentTypeError):
        parse_when("yesterday")


@pytest.mark.slow
def test_reembed_embeds_stored_messages_lacking_a_current_vector(tmp_path: Path) -> None:
    """A model change leaves stored messages with old vectors only; `vcm reembed` embeds them with
    the configured model (the bundled MiniLM here), once."""
    from vcm.store import open_store
    from vcm.store.types import StoredMessage

    store = open_store(f"sqlite:///{tmp_path}/vcm.db")
    store.put_agent("re1", {"model": "vcm-demo-2k"})  # a re-embedding writes only for a known agent
    texts = ["Priya ran the Porto half marathon.", "", "Clara adopted a beagle named Biscuit.", "Nice!"]
    ids = [f"m{i}" for i in range(len(texts))]
    store.spool_messages([StoredMessage("re1", f"m{i}", i + 1, "user", t, 8, 1.7e9 + i) for i, t in enumerate(texts)])
    store.put_message_vectors("re1", [(m, [1.0, 0.0, 0.0]) for m in ids if m != "m1"], "old-model:v1")
    try:
        first = _vcm(tmp_path, "reembed", "--agent", "re1")
        assert first.returncode == 0, first.stderr
        out = json.loads(first.stdout)
        assert (out["agent_id"], out["scanned"], out["embedded"]) == ("re1", 4, 3)  # the empty one has no text
        assert "all-MiniLM-L6-v2" in out["version"]
        assert store.message_vector_ids("re1", ids, out["version"]) == {"m0", "m2", "m3"}
        again = json.loads(_vcm(tmp_path, "reembed", "--agent", "re1").stdout)
        assert again["embedded"] == 0
        assert [e.payload["embedded"] for e in store.query_events("re1", ["reembed"]).items] == [3]
    finally:
        store.close()


def test_an_unreachable_api_is_a_coded_error_not_a_traceback(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    out = _vcm(tmp_path, "context", "--agent", "a1", "--api", url, "--token", "t", timeout=60)
    assert out.returncode == 2
    assert out.stderr.startswith("error STORE_UNAVAILABLE: cannot reach " + url), out.stderr
    assert "Traceback" not in out.stderr


def _chat_file(path: Path, n: int, *, start: float = 1_683_547_200.0) -> Path:
    """``n`` dated messages, one JSON object a line, a new day every 10 (Mon 8 May 2023 on)."""
    lines = [
        json.dumps(
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "name": "Ann" if i % 2 == 0 else "Bo",
                "content": f"Line {i}: we talked about the Porto trip and the greyhound Pepper again.",
                "created_at": start + (i // 10) * 86_400 + (i % 10) * 60,
            }
        )
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_append_a_conversation_file_through_the_api_and_again(tmp_path: Path, server: str) -> None:
    created = httpx.post(f"{server}/v1/agents", json={"agent_id": "cli2", "model": "gpt-4o"},
                         headers={"Authorization": f"Bearer {ADMIN}"})  # fmt: skip
    token = created.json()["token"]
    chat = _chat_file(tmp_path / "chat.jsonl", 25)
    api = ("--api", server, "--token", token)
    first = _vcm(tmp_path, "append", str(chat), "--agent", "cli2", "--batch", "10", *api)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) | {"seconds": 0} == {"agent": "cli2", "messages": 25, "replayed": 0, "calls": 3,
                                                          "evictions": 0, "seconds": 0}  # fmt: skip
    again = _vcm(tmp_path, "append", str(chat), "--agent", "cli2", "--batch", "10", *api)
    assert json.loads(again.stdout)["replayed"] == 25  # the same file: nothing twice
    smaller = _vcm(tmp_path, "append", str(chat), "--agent", "cli2", "--batch", "7", *api)
    assert json.loads(smaller.stdout)["replayed"] == 25  # in lists of another size: nothing twice either
    said = httpx.get(f"{server}/v1/agents/cli2/context", headers={"Authorization": f"Bearer {token}"}).json()
    contents = [m["content"] for m in said["messages"][1:]]
    assert len(contents) == 25 and contents[10].startswith("[Tue 9 May 2023] Line 10:")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(chat.read_text().splitlines()[0] + "\n{not json\n")
    refused = _vcm(tmp_path, "append", str(bad), "--agent", "cli2", *api)
    assert refused.returncode == 2 and "VALIDATION_ERROR" in refused.stderr and "line 2" in refused.stderr
    after = httpx.get(f"{server}/v1/agents/cli2/context", headers={"Authorization": f"Bearer {token}"}).json()
    assert len(after["messages"]) == len(said["messages"])


@pytest.mark.slow
def test_append_a_conversation_file_into_the_data_directory(tmp_path: Path) -> None:
    """Embedded: the command's own process runs the cold path and waits for the evictions its
    messages began; a later process rebuilds the agent from the store with its summary."""
    assert _vcm(tmp_path, "agents", "create", "emb1", "--model", "vcm-demo-2k").returncode == 0
    done = _vcm(tmp_path, "append", str(_chat_file(tmp_path / "chat.jsonl", 120)), "--agent", "emb1")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["messages"] == 120 and report["evictions"] >= 1
    ctx = _vcm(tmp_path, "context", "--agent", "emb1", "--json")
    assert ctx.returncode == 0, ctx.stderr
    data = json.loads(ctx.stdout)
    assert "summary" in data["layers"] and data["gauges"]["summary"] > 0
    assert "May 2023" in json.dumps(data["messages"])
