"""The memory viewer (vcm.api.viewer): the page and its files, ``/v1/whoami``, the agent's live stream
(server-sent events) on a real uvicorn server, and the page itself in headless Chromium.

The routes take the same tokens as the API, another agent's stream answers like a missing agent,
and the frames carry new audit rows and the context's status. In Chromium (Debian's ``chromium``,
driven by Playwright; skipped, saying why, without either; ``.ci/run`` installs Chromium) the page,
opened with an agent's token in the URL fragment, shows the gauges, a fact captured from an append
arrives live (no reload), a fact deleted in the page (confirmed) is gone from the store and
audited, stored text is shown as text, and an agent's token shows nothing of another agent. Hot
state on fakeredis only: these tests are about the viewer, the other suites cover the backends."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, ADMIN_TOKEN, LiveServer, bearer, new_agent
from vcm.api.health import HealthCache
from vcm.api.viewer import LOOKBACK_S, Watch
from vcm.service import MemoryService
from vcm.store.types import MemoryEvent

CHROMIUM = os.environ.get("VCM_TEST_CHROMIUM", "/usr/bin/chromium")
LIVE_S = 15_000  # ms: a stream tick is a second; this is slack for a loaded machine

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = fakeredis.FakeRedis(decode_responses=True)
    yield client
    client.close()


def test_the_page_and_its_files_need_no_token_and_hold_no_data(client: TestClient) -> None:
    r = client.get("/viewer", follow_redirects=False)
    assert r.status_code == 308 and r.headers["location"] == "viewer/"
    page = client.get("/viewer/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    # The page's own query string (which agent to show) is its script's: the API's refusal of
    # unknown query parameters does not apply to it.
    assert client.get("/viewer/", params={"agent": "bob"}).text == page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert '<script type="module" src="app.js">' in page.text
    for name, kind in [("app.js", "text/javascript"), ("api.js", "text/javascript"), ("viewer.css", "text/css")]:
        r = client.get(f"/viewer/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), name
    # Only the package's own files: nothing else on disk is reachable through the asset route.
    for name in ["nope.js", "..%2Fviewer.py", "%2e%2e%2fapp.py", "viewer.py", "__init__.py"]:
        r = client.get(f"/viewer/{name}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND", name


def test_no_script_writes_html(client: TestClient) -> None:
    # Stored text (messages, facts, payloads) is user content: the scripts build nodes and set text.
    for name in ["app.js", "api.js", "dom.js", "gauges.js", "panels.js"]:
        source = client.get(f"/viewer/{name}").text
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in source, (name, sink)


def test_whoami_names_the_tokens_principal(client: TestClient) -> None:
    me = new_agent(client, "alice")
    assert client.get("/v1/whoami", headers=ADMIN).json() == {"admin": True, "agent_id": None}
    assert client.get("/v1/whoami", headers=me).json() == {"admin": False, "agent_id": "alice"}
    for headers in [{}, bearer("nope"), bearer(ADMIN_TOKEN + "x")]:
        r = client.get("/v1/whoami", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED"


def test_the_context_names_each_messages_layer(client: TestClient) -> None:
    me = new_agent(client, "alice")
    client.put("/v1/agents/alice/blocks/persona", json={"content": "I like tea.", "pinned": True}, headers=me)
    client.post("/v1/agents/alice/messages", json={"role": "user", "content": "hello"}, headers=me)
    ctx = client.get("/v1/agents/alice/context", headers=me).json()
    assert ctx["layers"] == ["system", "working", "fifo"]
    assert len(ctx["layers"]) == len(ctx["messages"]) == len(ctx["message_tokens"])


def test_the_stream_takes_the_agents_token_and_refuses_others(client: TestClient) -> None:
    alice = new_agent(client, "alice")
    new_agent(client, "bob")
    for headers in [{}, bearer("nope")]:
        r = client.get("/v1/agents/alice/stream", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED"
    # Another agent's stream reads exactly like one that does not exist.
    theirs = client.get("/v1/agents/bob/stream", headers=alice)
    ghost = client.get("/v1/agents/ghost/stream", headers=ADMIN)
    assert theirs.status_code == ghost.status_code == 404
    assert theirs.json()["error"] == {"code": "NOT_FOUND", "message": "unknown agent 'bob'; create it first",
                                      "agent_id": "bob"}  # fmt: skip
    assert client.get("/v1/agents/alice/stream", params={"since": "nan"}, headers=alice).status_code == 422


def frames(lines: Iterator[str], until: Any, timeout_s: float = 10.0) -> list[tuple[str, Any]]:
    """Server-sent events read off a response's ``lines`` until ``until(frames)`` holds."""
    got: list[tuple[str, Any]] = []
    name, data = "message", []
    deadline = time.monotonic() + timeout_s
    for line in lines:
        if time.monotonic() > deadline:
            raise AssertionError(f"no matching frame within {timeout_s} s: {got}")
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())
        elif line == "" and data:
            got.append((name, json.loads("\n".join(data))))
            name, data = "message", []
            if until(got):
                return got
    raise AssertionError(f"the stream ended: {got}")


def test_the_stream_sends_status_and_new_audit_rows_of_its_agent_only(
    client: TestClient, live: LiveServer, service: MemoryService
) -> None:
    alice = new_agent(client, "alice", model="vcm-demo-4k")
    bob = new_agent(client, "bob")
    client.post("/v1/agents/bob/facts", json={"value": "bob's secret fact", "type": "sticky"}, headers=bob)
    with (
        httpx.Client(base_url=live.url, timeout=10) as http,
        http.stream("GET", "/v1/agents/alice/stream", headers=alice) as r,
    ):
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-store"
        lines = r.iter_lines()
        first = frames(lines, lambda got: any(n == "status" for n, _ in got))
        status = next(d for n, d in first if n == "status")
        budget = {k: status["thresholds"][k] for k in ("warning", "flush", "target", "pinned_cap", "summary_cap")}
        assert budget == {"warning": 0.7, "flush": 0.9, "target": 0.5, "pinned_cap": 0.25, "summary_cap": 0.15}
        assert status["thresholds"]["output_reserve"] == 0.1
        assert status["gauges"]["window"] == 4096 and status["pending_batches"] == []
        assert status["health"]["ok"] is True
        assert [d["kind"] for n, d in first if n == "audit"] == ["agent_created"]  # the backlog
        # A fact written now arrives as a row; an append changes the status.
        client.post("/v1/agents/alice/facts", json={"value": "Ada likes tea", "type": "sticky"}, headers=alice)
        client.post("/v1/agents/alice/messages", json={"role": "user", "content": "hi"}, headers=alice)
        later = frames(
            lines,
            lambda got: (
                any(n == "audit" and d["kind"] == "fact_decision" for n, d in got)
                and any(n == "status" for n, _ in got)
            ),
        )
        row = next(d for n, d in later if n == "audit")
        assert row["agent_id"] == "alice" and row["payload"]["decision"] == "NEW"
        assert next(d for n, d in later if n == "status")["gauges"]["fifo"] > 0
        assert "bob" not in json.dumps(first + later)
        # A rotated token ends the stream at its next tick.
        assert client.post("/v1/agents/alice/token", headers=ADMIN).status_code == 200
        end = frames(lines, lambda got: any(n == "error" for n, _ in got))
        assert end[-1] == ("error", {"code": "UNAUTHORIZED", "message": "invalid bearer token"})


def test_a_watch_sends_each_row_once_even_when_one_lands_late(service: MemoryService, client: TestClient) -> None:
    new_agent(client, "alice")
    now = service.clock()
    watch = Watch(service, "alice", now - 60, HealthCache(service.health))
    first = watch.poll()
    assert [f.split("\n")[0] for f in first] == ["event: audit", "event: status"]
    assert watch.poll() == []  # nothing new: nothing sent, not even the status
    newest = service.events("alice").items[-1].created_at
    # A row stamped before the newest one sent, within the look-back (a worker's late write).
    service.store.append_event(MemoryEvent("alice", "summarize", {}, event_id="late", created_at=newest - 1))
    late = watch.poll()
    assert len(late) == 1 and '"event_id":"late"' in late[0]
    assert watch.poll() == []
    assert watch.since >= newest - LOOKBACK_S


# --- the page in Chromium ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (a dev dependency)")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does); viewer browser tests skipped")
    with sync_api.sync_playwright() as pw:
        # Playwright cannot download its own browsers here: Debian's build is launched instead.
        launched = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, live: LiveServer) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()  # before the server stops: closes the page's stream
    assert not errors, errors


def token_of(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


def test_gauges_a_live_fact_and_deleting_it(
    page: Any, live: LiveServer, client: TestClient, service: MemoryService
) -> None:
    me = new_agent(client, "alice", model="vcm-demo-4k", system_prompt="You are helpful.")
    client.post("/v1/agents/alice/messages", json={"role": "user", "content": f"hello {XSS}"}, headers=me)
    client.put("/v1/agents/alice/state/city", json={"value": "Porto", "ttl_s": 3600}, headers=me)
    page.goto(f"{live.url}/viewer/#token={token_of(me)}")
    # The token left the address bar (and the history) as soon as the page read it.
    page.wait_for_function("!location.hash")
    assert token_of(me) not in page.url

    occupancy = page.locator("#occupancy")
    occupancy.wait_for(timeout=LIVE_S)
    assert re.search(r"\d+ of 4096 tokens", occupancy.inner_text())
    for line in ("target 50 %", "warning 70 %", "flush 90 %"):
        assert line in page.locator(f"[data-line={line.split()[0]}]").inner_text()
    assert page.locator("[data-layer=fifo] td.num").first.inner_text() != "0"
    page.locator("#state tr[data-key=city]").wait_for(timeout=LIVE_S)
    assert "in 60 min" in page.locator("#state tr[data-key=city]").inner_text()
    assert page.locator("#agents").is_hidden()  # an agent token: no agent list

    # The assistant's memory tag becomes a sticky fact; the page shows it without a reload.
    reply = f"Noted. [MEMORY:sticky] The user's name is Ada {XSS} [/MEMORY]"
    client.post("/v1/agents/alice/messages", json={"role": "assistant", "content": reply}, headers=me)
    fact = page.locator("#facts li.fact", has_text="The user's name is Ada")
    fact.wait_for(timeout=LIVE_S)
    assert "sticky" in fact.inner_text()
    assert page.locator("#facts section[data-type=sticky]").count() == 1
    # Stored text is shown as text: the markup in it is visible and never ran.
    assert "<img src=x" in fact.inner_text()
    page.locator("#context-messages").get_by_text("hello <img", exact=False).wait_for(state="attached")
    # The context panel shows the prompt as built: the sticky fact in its own layer.
    built = page.locator("#context-messages li[data-layer=sticky]", has_text="The user's name is Ada")
    built.wait_for(state="attached", timeout=LIVE_S)
    assert page.evaluate("window.__xss") is None
    page.locator("#timeline li[data-kind=fact_decision]").first.wait_for(timeout=LIVE_S)

    fact_id = fact.get_attribute("data-fact-id")
    assert fact_id
    asked: list[str] = []

    def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    fact.locator("button.delete").click()
    fact.wait_for(state="detached", timeout=LIVE_S)
    assert asked and "The user's name is Ada" in asked[0]
    assert fact_id not in {f.fact_id for f in service.list_facts("alice")}
    rows = service.events("alice", ["fact_forgotten"]).items
    assert [(r.payload["fact_id"], r.actor) for r in rows] == [(fact_id, "api:agent:alice")]
    # The deletion's own row reaches the timeline through the stream.
    page.locator("#timeline li[data-kind=fact_forgotten]").wait_for(timeout=LIVE_S)


def test_an_agent_token_shows_nothing_of_another_agent(page: Any, live: LiveServer, client: TestClient) -> None:
    alice = new_agent(client, "alice")
    bob = new_agent(client, "bob")
    client.post("/v1/agents/alice/facts", json={"value": "alice likes tea", "type": "sticky"}, headers=alice)
    client.post("/v1/agents/bob/facts", json={"value": "bob-secret-fact", "type": "sticky"}, headers=bob)
    client.post("/v1/agents/bob/messages", json={"role": "user", "content": "bob-secret-message"}, headers=bob)
    client.put("/v1/agents/bob/blocks/persona", json={"content": "bob-secret-block"}, headers=bob)

    seen: list[tuple[str, int]] = []
    page.on("response", lambda r: seen.append((r.url, r.status)))
    page.goto(f"{live.url}/viewer/#token={token_of(alice)}")
    page.locator("#facts li.fact", has_text="alice likes tea").wait_for(timeout=LIVE_S)
    page.locator("#timeline li[data-kind=fact_decision]").first.wait_for(timeout=LIVE_S)
    assert "bob" not in page.content()

    # Asking the page for bob's memory with alice's token: the API's NOT_FOUND, and no data.
    page.goto(f"{live.url}/viewer/?agent=bob#token={token_of(alice)}")
    notice = page.locator("#notice")
    notice.wait_for(timeout=LIVE_S)
    assert "NOT_FOUND" in notice.inner_text()
    page.wait_for_timeout(1500)  # a stream tick: nothing may arrive
    assert "bob-secret" not in page.content()
    assert page.locator("#facts li.fact").count() == 0
    assert all(status == 404 for url, status in seen if "/v1/agents/bob" in url), seen
    # Nor can alice's token open bob's stream directly.
    assert client.get("/v1/agents/bob/stream", headers=alice).status_code == 404

    # The admin token lists both agents and opens either.
    page.goto(f"{live.url}/viewer/?agent=bob#token={ADMIN_TOKEN}")
    page.locator("#facts li.fact", has_text="bob-secret-fact").wait_for(timeout=LIVE_S)
    assert page.locator("#agent-list li").all_inner_texts() == ["alice", "bob"]
