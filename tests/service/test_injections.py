"""The injection log: each prompt built for a model call records the ids it injected (never
content); a look at the prompt records nothing. Through the façade, on fakeredis and SQLite."""

from __future__ import annotations

from vcm.service import MemoryService


def test_a_built_prompt_records_the_ids_it_injected_and_a_look_records_nothing(svc: MemoryService) -> None:
    sticky = svc.remember("ann", "Ann is vegetarian", type="sticky").fact
    office = svc.remember("ann", "The Porto office opens at 9", type="learned").fact
    shadow = svc.remember("ann", "The Porto office closes at 5", type="learned", status="shadow").fact
    svc.append("ann", "user", "When does the Porto office open?")
    svc.set_state("ann", "plan", {"step": 1})

    looked = svc.build_context("ann", record_use=False)
    assert svc.injections("ann")[0] == []  # a look uses nothing, records nothing
    built = svc.build_context("ann")
    rows, cursor = svc.injections("ann")
    assert len(rows) == 1 and cursor is None
    row = rows[0]
    assert {sticky.fact_id, office.fact_id} <= set(row.facts) and shadow.fact_id not in row.facts
    assert "plan" in row.state and set(row.layers) == {layer.name for layer in built.injected}
    assert row.layers == {layer.name: layer.tokens for layer in looked.injected}
    # Content-free: ids and token counts only.
    event = svc.events("ann", ["injection"]).items[0]
    assert "vegetarian" not in str(event.payload) and "Porto" not in str(event.payload)
    svc.build_context("ann")
    assert len(svc.injections("ann")[0]) == 2
