"""Forget over HTTP: DELETE .../messages/{id} answers the counts it always did plus a receipt, and
GET .../forget/{receipt} re-checks it."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.conftest import new_agent
from vcm.service import MemoryService


def test_forget_a_message_in_the_context_answers_a_receipt_that_checks_clean(
    client: TestClient, service: MemoryService
) -> None:
    me = new_agent(client, "alice")
    said = client.post("/v1/agents/alice/messages", json={"role": "user", "content": "Zanzibar, a quokka."}, headers=me)
    mid = said.json()["message_id"]
    fact = client.post(
        "/v1/agents/alice/facts",
        json={"value": "The trip starts in Zanzibar", "type": "project", "evidence": [{"kind": "message", "id": mid}]},
        headers=me,
    )
    assert fact.status_code == 200, fact.text
    fact_id = fact.json()["fact"]["fact_id"]

    r = client.delete(f"/v1/agents/alice/messages/{mid}", headers=me)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["agent_id"] == "alice" and body["message_id"] == mid
    assert body["removed"]["fifo"] == 1 and body["removed"]["facts_removed"] == 1
    assert body["facts_removed"] == [fact_id] and body["facts_rewritten"] == []
    assert mid not in service.fifo_ids("alice")

    check = client.get(f"/v1/agents/alice/forget/{body['receipt']}", headers=me)
    assert check.status_code == 200 and check.json() == {
        "agent_id": "alice", "receipt": body["receipt"], "message_id": mid, "clean": True, "left": {},
    }  # fmt: skip
    assert client.get("/v1/agents/alice/forget/fr0000", headers=me).status_code == 404
    assert client.get("/v1/agents/alice/forget/nope", headers=me).status_code == 422
