"""The portable format over HTTP (issue 34, item 4): ``GET /v1/agents/{id}/export`` streams the
file, ``POST /v1/import`` creates the agent from it; both the admin's, both through the Python
clients, against a real uvicorn server over the real Redis (``VCM_TEST_REDIS_URL``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.api.conftest import ADMIN_TOKEN, LiveServer
from tests.redis_legs import REDIS_URL
from vcm.client import AsyncVcmClient, VcmClient
from vcm.errors import Conflict, NotFound, Unauthorized, ValidationError
from vcm.service import MemoryService


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def messages_of(service: MemoryService, agent: str) -> list[tuple[str, int, str, str]]:
    return [(m.message_id, m.seq, m.role, m.content) for m in service.store.list_messages(agent, limit=1000)]


def test_export_streams_the_agent_and_import_brings_it_back(live: LiveServer, service: MemoryService) -> None:
    admin = VcmClient(live.url, ADMIN_TOKEN)
    token = admin.create_agent("mover")["token"]
    # Line separators inside messages (U+2028, U+0085) are line ends to str.splitlines and to
    # httpx's iter_lines: the file escapes them, and both sides cut lines at \n only.
    for i, sep in enumerate(["", "", "\u2028", "\x85", "\u2029", ""]):
        admin.append("mover", "user", f"Message {i} about{sep} the Porto office.")
    admin.remember("mover", "Bob runs the Porto office", type="project")
    admin.set_state("mover", "plan", {"step": 1})
    lines = list(admin.export_agent("mover", vectors=True))
    header = json.loads(lines[0])
    assert header["format"] == "vcm.agent" and header["agent_id"] == "mover" and header["vectors"] is True
    assert json.loads(lines[-1]) == {"kind": "end", "records": len(lines) - 1}
    assert not any(c in "".join(lines) for c in "\u2028\x85\u2029")
    before = messages_of(service, "mover")
    assert [m[3] for m in before][2:5] == [
        f"Message {i} about{c} the Porto office." for i, c in ((2, "\u2028"), (3, "\x85"), (4, "\u2029"))
    ]

    with pytest.raises(Conflict):  # never merged into the agent that exists
        admin.import_agent(lines)
    admin.delete_agent("mover")
    reply = admin.import_agent(lines)
    assert (reply["agent_id"], reply["replayed"], reply["counts"]["messages"]) == ("mover", False, len(before))
    assert messages_of(service, "mover") == before
    assert admin.state("mover", "plan")["value"] == {"step": 1}
    assert admin.import_agent("".join(lines))["replayed"] is True  # the same file: nothing written
    assert messages_of(service, "mover") == before

    # A file written before the escaping, with the separators raw inside its strings, imports too.
    raw = "".join(lines).replace("\\u2028", "\u2028").replace("\\u0085", "\x85").replace("\\u2029", "\u2029")
    assert "\u2028" in raw
    r = httpx.post(
        f"{live.url}/v1/import", params={"as_id": "mover-old"}, content=raw.encode(),
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/x-ndjson"},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    assert [m[1:] for m in messages_of(service, "mover-old")] == [m[1:] for m in before]

    renamed = asyncio.run(_async_round_trip(live.url))
    assert renamed["agent_id"] == "mover-copy" and renamed["source_agent_id"] == "mover"
    assert [m[1:] for m in messages_of(service, "mover-copy")] == [m[1:] for m in before]

    # Admin only: the agent's own token may do neither.
    agent = VcmClient(live.url, token)
    with pytest.raises(Unauthorized):
        list(agent.export_agent("mover"))
    with pytest.raises(NotFound):
        list(admin.export_agent("nobody"))


async def _async_round_trip(url: str) -> dict[str, object]:
    async with AsyncVcmClient(url, ADMIN_TOKEN) as client:
        lines = [line async for line in client.export_agent("mover")]
        return await client.import_agent(lines, as_id="mover-copy")


def test_a_bad_file_is_refused_with_its_line_and_nothing_is_written(live: LiveServer, service: MemoryService) -> None:
    admin = VcmClient(live.url, ADMIN_TOKEN)
    admin.create_agent("mover")
    admin.append("mover", "user", "hello")
    lines = list(admin.export_agent("mover"))
    admin.delete_agent("mover")
    broken = [*lines[:2], "{oops\n", *lines[2:]]
    with pytest.raises(ValidationError) as caught:
        admin.import_agent(broken)
    assert caught.value.details["line"] == 3 and caught.value.status == 422
    assert service.store.list_agents() == []
    r = httpx.post(
        f"{live.url}/v1/import?as_agent=x", content="".join(lines), headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "as_agent"
    assert service.store.list_agents() == []
