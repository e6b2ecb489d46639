"""Facts and state over HTTP: coded 4xx for bad input with nothing written, agent isolation,
keyed retries, and the client SDK's methods against a real server."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, LiveServer, new_agent
from vcm.client import VcmClient
from vcm.errors import NotFound, Unauthorized, ValidationError
from vcm.service import MemoryService


def facts_of(client: TestClient, headers: dict[str, str], agent: str = "a1", **params: Any) -> list[dict[str, Any]]:
    r = client.get(
        f"/v1/agents/{agent}/facts", params={"status": ["active", "shadow", "archived"], **params}, headers=headers
    )
    assert r.status_code == 200, r.text
    return list(r.json()["facts"])


def said(client: TestClient, headers: dict[str, str], text: str = "a message", agent: str = "a1") -> str:
    """The id of a message appended to the agent (evidence must name what the agent holds)."""
    r = client.post(f"/v1/agents/{agent}/messages", json={"role": "user", "content": text}, headers=headers)
    assert r.status_code == 200, r.text
    return str(r.json()["message_id"])


def test_remember_dedup_conflict_search_and_forget(client: TestClient) -> None:
    h = new_agent(client, "a1")
    m1, m2 = said(client, h), said(client, h)
    body = {"value": "Alice's sister lives in Porto", "type": "learned", "evidence": [{"kind": "message", "id": m1}]}
    first = client.post("/v1/agents/a1/facts", json=body, headers=h).json()
    again = client.post(
        "/v1/agents/a1/facts", json=body | {"evidence": [{"kind": "message", "id": m2}]}, headers=h
    ).json()
    assert (first["decision"], again["decision"]) == ("NEW", "MATCH")
    assert first["fact"]["status"] == "active"  # its evidence is the agent's own message
    assert [e["id"] for e in again["fact"]["evidence"]] == [m1, m2]
    client.post("/v1/agents/a1/facts", json={"value": "Paris", "type": "project", "key": "hq"}, headers=h)
    clash = client.post("/v1/agents/a1/facts", json={"value": "Rome", "type": "project", "key": "hq"}, headers=h).json()
    assert clash["decision"] == "CONFLICT" and clash["conflicts"][0]["value"] == "Paris"
    hits = client.get("/v1/agents/a1/facts/search", params={"query": "sister Porto"}, headers=h).json()["hits"]
    assert hits[0]["fact"]["fact_id"] == first["fact"]["fact_id"]
    stats = client.get("/v1/agents/a1/facts/stats", headers=h).json()
    # The conflict also went on the agenda as an open question (seed 002).
    assert stats["by_type"] == {"learned": 1, "project": 2, "question": 1} and stats["conflicts"] == 2
    fid = first["fact"]["fact_id"]
    assert client.delete(f"/v1/agents/a1/facts/{fid}", headers=h).json()["removed"] == {"facts": 1}
    assert client.get(f"/v1/agents/a1/facts/{fid}", headers=h).json()["error"]["code"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"value": "x", "type": "gossip"}, "VALIDATION_ERROR"),
        ({"value": "x" * 5000, "type": "learned"}, "VALIDATION_ERROR"),
        ({"value": "x", "type": "learned", "ttl_s": -1}, "VALIDATION_ERROR"),
        ({"value": "my api key is sk-live-abcdefghijklmnop1234", "type": "learned"}, "POLICY_REFUSED"),
        ({"value": "x", "type": "learned", "unknown": 1}, "VALIDATION_ERROR"),
        # Evidence must name what the agent holds: no message m99999, no such document.
        ({"value": "x", "type": "learned", "evidence": [{"kind": "message", "id": "m99999"}]}, "VALIDATION_ERROR"),
        ({"value": "x", "type": "learned", "evidence": [{"kind": "document", "id": "d404"}]}, "VALIDATION_ERROR"),
        ({"value": "x", "type": "learned", "evidence": [{"kind": "tool_call", "id": "call_x"}]}, "VALIDATION_ERROR"),
    ],
)
def test_bad_fact_input_is_a_coded_4xx_and_writes_nothing(client: TestClient, body: dict[str, Any], code: str) -> None:
    h = new_agent(client, "a1")
    r = client.post("/v1/agents/a1/facts", json=body, headers=h)
    assert r.status_code == 422 and r.json()["error"]["code"] == code
    assert facts_of(client, h) == []


def test_state_over_http_with_revs_ttl_and_isolation(client: TestClient) -> None:
    h1, h2 = new_agent(client, "a1"), new_agent(client, "a2")
    put = client.put("/v1/agents/a1/state/plan", json={"value": {"step": 1}}, headers=h1).json()
    upd = client.put("/v1/agents/a1/state/plan", json={"value": {"step": 2}, "_rev": put["_rev"]}, headers=h1)
    assert upd.status_code == 200
    stale = client.put("/v1/agents/a1/state/plan", json={"value": {"step": 3}, "_rev": put["_rev"]}, headers=h1)
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "REV_CONFLICT"
    assert client.get("/v1/agents/a1/state/plan", headers=h1).json()["value"] == {"step": 2}
    # "_rev": "" creates only: a key that exists already is a conflict, left as it was.
    taken = client.put("/v1/agents/a1/state/plan", json={"value": {"step": 9}, "_rev": ""}, headers=h1)
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "REV_CONFLICT"
    fresh = client.put("/v1/agents/a1/state/owner", json={"value": "me", "_rev": ""}, headers=h1)
    assert fresh.status_code == 200 and fresh.json()["value"] == "me"
    # Another agent's token sees nothing of it, as if it did not exist.
    assert client.get("/v1/agents/a1/state/plan", headers=h2).json()["error"]["code"] == "NOT_FOUND"
    assert client.get("/v1/agents/a1/facts", headers=h2).status_code == 404
    bad = client.put("/v1/agents/a1/state/plan", json={"value": 1, "ttl_s": 0}, headers=h1)
    assert bad.status_code == 422
    assert client.delete("/v1/agents/a1/state", headers=ADMIN).json()["removed"] == {"state": 2}
    assert client.get("/v1/agents/a1/state", headers=h1).json()["state"] == []


def test_keyed_remember_retry_answers_the_first_result(client: TestClient) -> None:
    h = new_agent(client, "a1")
    body = {"value": "Alice prefers tea", "type": "preference", "idempotency_key": "k-1"}
    first = client.post("/v1/agents/a1/facts", json=body, headers=h).json()
    retry = client.post("/v1/agents/a1/facts", json=body, headers=h).json()
    assert retry["fact"]["fact_id"] == first["fact"]["fact_id"] and retry["decision"] == "REPLAYED"
    assert len(facts_of(client, h)) == 1
    other = client.post("/v1/agents/a1/facts", json=body | {"value": "Alice prefers coffee"}, headers=h)
    assert other.status_code == 422 and other.json()["error"]["code"] == "IDEMPOTENCY_MISMATCH"


def test_entity_graph_over_http_and_through_the_client(live: LiveServer, client: TestClient) -> None:
    h = new_agent(client, "a1")
    other = new_agent(client, "b1")
    token = h["Authorization"].removeprefix("Bearer ")
    m1 = said(client, h, "Maya is Priya's sister")
    with VcmClient(live.url, token) as me, VcmClient(live.url, ADMIN["Authorization"].removeprefix("Bearer ")) as op:
        sister = me.remember("a1", "Maya is Priya's sister", type="relation", key="Priya|sister|Maya",
                             evidence=[{"kind": "message", "id": m1}])  # fmt: skip
        friend = me.remember("a1", "Jo is Maya's friend", type="relation", key="maya|friend|jo", source="Jo, at lunch")
        decided = client.get("/v1/agents/a1/events", params={"kinds": "fact_decision"}, headers=h).json()["items"]
        assert decided[-1]["payload"]["provenance"] == {
            "entry_point": "api", "source": "Jo, at lunch", "message_ids": [], "tool_call_ids": [], "document_ids": []
        }  # fmt: skip
        assert decided[-1]["payload"]["policy"]["operator"] is False
        # Written online, both wait as shadow: no structure yet.
        assert {sister["fact"]["status"], friend["fact"]["status"]} == {"shadow"}
        with pytest.raises(NotFound):
            me.entity_graph("a1", "Priya")
        with pytest.raises(Unauthorized):  # settling is a person's (the admin's) word
            me.settle_fact("a1", sister["fact"]["fact_id"], "promote")
        for r in (sister, friend):
            assert op.settle_fact("a1", r["fact"]["fact_id"], "promote")["fact"]["status"] == "active"
        near = me.entity_graph("a1", "Priya")
        assert near["entity"]["key"] == "priya" and [n["key"] for n in near["neighbours"]] == ["maya"]
        assert near["mentioned_in"] == [m1]
        far = me.entity_graph("a1", "priya", depth=2)
        assert [n["key"] for n in far["neighbours"]] == ["maya", "jo"] and len(far["relations"]) == 2
        assert {s for s in me.working_set("a1")["sections"]} >= {"entities", "relations"}
        with pytest.raises(NotFound):
            me.entity_graph("a1", "nobody")
        with pytest.raises(ValidationError):
            me.entity_graph("a1", "priya", depth=4)
    # Another agent's token sees none of it (not even that it exists), nor has it any of its own.
    for path in ("/v1/agents/a1/entities/priya", "/v1/agents/b1/entities/priya"):
        r = client.get(path, headers=other)
        assert r.status_code == 404 and "maya" not in r.text.lower()


def test_the_built_context_shows_each_layer_with_its_tokens_and_sources(client: TestClient) -> None:
    h = new_agent(client, "a1")
    client.post("/v1/agents/a1/facts", json={"value": "Priya is vegetarian", "type": "sticky"}, headers=h)
    client.post("/v1/agents/a1/facts", json={"value": "The Porto office opens at 9", "type": "learned"}, headers=ADMIN)
    # The agent's own word without evidence lands shadow: never in the prompt, nor in default search.
    shadow = client.post(
        "/v1/agents/a1/facts", json={"value": "The Porto office closes at 5", "type": "learned"}, headers=h
    ).json()["fact"]
    assert shadow["status"] == "shadow"
    client.post(
        "/v1/agents/a1/messages", json={"role": "user", "content": "When does the Porto office open?"}, headers=h
    )
    hot = client.get("/v1/agents/a1/context", headers=h).json()
    assert "memory" not in hot["layers"] and hot["layer_tokens"]["fifo"] > 0
    built = client.get("/v1/agents/a1/context", params={"built": "true", "user": "Priya"}, headers=h).json()
    assert {"identity", "sticky", "memory"} <= set(built["layers"])
    assert built["query"] == "When does the Porto office open?"
    assert sum(built["layer_tokens"].values()) == sum(built["message_tokens"])
    memory = next(x for x in built["injected"] if x["name"] == "memory")
    assert memory["sources"][0]["kind"] == "fact" and memory["tokens"] == built["layer_tokens"]["memory"]
    assert sum(x["tokens"] for x in built["injected"]) <= built["room"]
    assert built["left_out"] == 0 and hot["left_out"] is None  # a short FIFO: nothing left out
    assert "closes at 5" not in str(built["messages"]) and shadow["fact_id"] not in str(built["injected"])
    # A look at the prompt is a GET: the facts it shows are not counted as used.
    facts = client.get("/v1/agents/a1/facts", headers=h).json()["facts"]
    assert memory["sources"][0]["id"] in {f["fact_id"] for f in facts}
    assert all(f["access_count"] == 0 for f in facts), facts
    hits = client.get("/v1/agents/a1/facts/search", params={"query": "Porto office"}, headers=h).json()["hits"]
    assert hits[0]["fact"]["value"] == "The Porto office opens at 9"
    assert shadow["fact_id"] not in {x["fact"]["fact_id"] for x in hits}
    asked = client.get("/v1/agents/a1/facts/search", params={"query": "Porto office", "status": "shadow"}, headers=h)
    assert [x["fact"]["fact_id"] for x in asked.json()["hits"]] == [shadow["fact_id"]]


def test_a_restore_over_http_returns_facts_and_state_to_the_snapshot(client: TestClient) -> None:
    """Snapshots hold facts and state (issue 29): what came after goes on a restore, and the
    ``pre_restore`` snapshot brings it back."""
    h = new_agent(client, "a1")
    kept = client.post("/v1/agents/a1/facts", json={"value": "Ann likes tea", "type": "preference"}, headers=h).json()
    client.put("/v1/agents/a1/state/plan", json={"value": {"step": 1}}, headers=h)
    snap = client.post("/v1/agents/a1/snapshots", json={}, headers=h).json()
    before = (facts_of(client, h), client.get("/v1/agents/a1/state", headers=h).json())
    client.post("/v1/agents/a1/facts", json={"value": "Ann moved to Oslo", "type": "learned"}, headers=h)
    client.delete(f"/v1/agents/a1/facts/{kept['fact']['fact_id']}", headers=h)
    client.put("/v1/agents/a1/state/plan", json={"value": {"step": 2}}, headers=h)
    client.put("/v1/agents/a1/state/later", json={"value": True}, headers=h)
    later = (facts_of(client, h), client.get("/v1/agents/a1/state", headers=h).json())

    out = client.post(f"/v1/agents/a1/snapshots/{snap['snapshot_id']}/restore", headers=h)
    assert out.status_code == 200, out.text
    facts, state = facts_of(client, h), client.get("/v1/agents/a1/state", headers=h).json()
    assert [(f["fact_id"], f["value"], f["status"]) for f in facts] == [
        (f["fact_id"], f["value"], f["status"]) for f in before[0]
    ]
    assert _values(state) == _values(before[1]) == {"plan": {"step": 1}}

    back = client.post(f"/v1/agents/a1/snapshots/{out.json()['pre_restore_snapshot_id']}/restore", headers=h)
    assert back.status_code == 200, back.text
    assert [f["value"] for f in facts_of(client, h)] == [f["value"] for f in later[0]] == ["Ann moved to Oslo"]
    assert _values(client.get("/v1/agents/a1/state", headers=h).json()) == _values(later[1])


def _values(listing: dict[str, Any]) -> dict[str, Any]:
    return {e["key"]: e["value"] for e in listing["state"]}


def test_search_and_listing_filters_each_exclude_what_they_should(client: TestClient, service: MemoryService) -> None:
    h = new_agent(client, "a1")
    ev = [{"kind": "message", "id": said(client, h, "tea and the Falcon launch")}]

    def keep(value: str, **extra: Any) -> str:
        body = {"value": value, "type": "learned", "evidence": ev, **extra}
        r = client.post("/v1/agents/a1/facts", json=body, headers=h)
        assert r.status_code == 200, r.text
        return str(r.json()["fact"]["fact_id"])

    minor = keep("Ann drinks tea at noon", importance=0.5, category="habits")
    major = keep("The Falcon launch drinks budget is fixed", importance=0.9, category="work", confidence=0.9)
    cut = service.core.clock()
    late = keep("Ann drinks tea with the Falcon team", importance=0.8, category="work")

    def found(path: str = "search", **params: Any) -> set[str]:
        params = {"query": "tea Falcon drinks", **params} if path == "search" else params
        r = client.get(f"/v1/agents/a1/facts/{path}".rstrip("/"), params=params, headers=h)
        assert r.status_code == 200, r.text
        body = r.json()
        return (
            {x["fact"]["fact_id"] for x in body["hits"]} if path == "search" else {f["fact_id"] for f in body["facts"]}
        )

    assert found() == {minor, major, late}
    assert found(min_importance=0.7) == {major, late}  # the 0.5 fact is left out
    assert found(max_importance=0.85) == {minor, late}
    assert found(min_confidence=0.8) == {major}
    assert found(category="work") == {major, late}
    assert found(created_since=cut) == {late} and found(created_until=cut) == {minor, major}
    assert found(updated_since=cut) == {late} and found(updated_until=cut) == {minor, major}
    assert found("", category="habits") == {minor} and found("", min_importance=0.85) == {major}
    # Scores are the fused score itself, in [0, 1], not rescaled so that the best is always 1.
    hits = client.get("/v1/agents/a1/facts/search", params={"query": "budget"}, headers=h).json()["hits"]
    assert hits and all(0.0 <= x["score"] <= 1.0 for x in hits)
    weak = client.get("/v1/agents/a1/facts/search", params={"query": "noon zebra"}, headers=h).json()["hits"]
    assert weak and weak[0]["score"] < 1.0


@pytest.mark.parametrize(
    "path",
    [
        "/v1/agents/a1/facts/search?query=tea&min_importanc=0.7",
        "/v1/agents/a1/facts?bogus=1",
        "/v1/agents/a1/working-set?q=tea",
        "/v1/agents/a1/facts/stats?verbose=true",
        "/v1/agents/a1/events?kinds=x&colour=red",
        "/v1/agents/a1/context?built=true&quer=x",
    ],
)
def test_an_unknown_query_parameter_is_refused_on_get_routes(client: TestClient, path: str) -> None:
    h = new_agent(client, "a1")
    r = client.get(path, headers=h)
    assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_ERROR", r.text
    assert r.json()["error"]["field"] in path


def test_unsure_candidates_are_listed_for_review_and_settled_by_a_person(client: TestClient) -> None:
    h = new_agent(client, "a1")
    river, sea = "Ann's sister lives in Porto near the river", "Ann's sister lives in Porto near the sea"
    first = client.post(
        "/v1/agents/a1/facts",
        json={"value": river, "type": "learned", "evidence": [{"kind": "message", "id": said(client, h, river)}]},
        headers=h,
    ).json()
    maybe = client.post(
        "/v1/agents/a1/facts",
        json={"value": sea, "type": "learned", "evidence": [{"kind": "message", "id": said(client, h, sea)}]},
        headers=h,
    ).json()
    assert maybe["decision"] == "UNSURE" and maybe["fact"]["duplicate_of"] == first["fact"]["fact_id"]
    staged = client.get("/v1/agents/a1/facts", params={"decision": "unsure"}, headers=h).json()["facts"]
    assert [(f["fact_id"], f["status"]) for f in staged] == [(maybe["fact"]["fact_id"], "shadow")]
    bad = client.get("/v1/agents/a1/facts", params={"decision": "maybe"}, headers=h)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "VALIDATION_ERROR"
    path = f"/v1/agents/a1/facts/{maybe['fact']['fact_id']}/settle"
    assert client.post(path, json={"action": "merge"}, headers=h).status_code == 401  # a person's word: the admin's
    wrong = client.post(path, json={"action": "keep"}, headers=ADMIN)
    assert wrong.status_code == 422 and wrong.json()["error"]["code"] == "VALIDATION_ERROR"
    done = client.post(path, json={"action": "merge"}, headers=ADMIN).json()
    assert done["fact"]["fact_id"] == first["fact"]["fact_id"] and len(done["fact"]["evidence"]) == 2
    assert client.get("/v1/agents/a1/facts", params={"decision": "unsure"}, headers=h).json()["facts"] == []
    again = client.post(path, json={"action": "merge"}, headers=ADMIN)
    assert again.status_code == 404


def test_the_injection_log_over_http_and_through_the_client(
    live: LiveServer, client: TestClient, service: MemoryService
) -> None:
    h = new_agent(client, "a1")
    fact = client.post(
        "/v1/agents/a1/facts", json={"value": "Priya is vegetarian", "type": "sticky"}, headers=h
    ).json()["fact"]
    client.get("/v1/agents/a1/context", params={"built": "true"}, headers=h)  # a look: not logged
    assert client.get("/v1/agents/a1/injections", headers=h).json() == {"items": [], "next_cursor": None}
    service.build_context("a1")  # a prompt for a model call
    with VcmClient(live.url, h["Authorization"].removeprefix("Bearer ")) as me:
        (row,) = me.injections("a1")["items"]
    assert row["facts"] == [fact["fact_id"]] and row["layers"]["sticky"] > 0
    other = new_agent(client, "b1")
    assert client.get("/v1/agents/a1/injections", headers=other).status_code == 404
    assert client.get("/v1/agents/a1/injections", params={"kinds": "x"}, headers=h).status_code == 422
