"""search_recall compares the query vector only with message vectors of the version the workers
embed under (the service's ``recall_version``), not with whatever version the agent has most of."""

from __future__ import annotations

from pathlib import Path

from tests.doubles.embedder import hash_embed
from tests.doubles.harness import Harness
from vcm.hotpath.state import HotState

CURRENT = "hash32:late3+3:v1"


def test_recall_uses_the_current_embedding_version_after_a_model_change(hot: HotState, tmp_path: Path) -> None:
    h = Harness(hot, str(tmp_path / "vcm.db"))
    try:
        h.service.create_agent("rv", model="vcm-demo-2k")
        texts = ["the ferry leaves at noon", "buy apples and pears", "the ferry was late again", "call the dentist"]
        ids = [h.service.append("rv", "user", t).message_id for t in texts]
        # Every message has a vector of the old model (4 dimensions); only two have current ones.
        old = [(m, [1.0, 0.0, 0.0, 0.0]) for m in ids]
        assert h.store.put_message_vectors("rv", old, "old-model:v1") == 4
        current = [(ids[i], [float(x) for x in hash_embed([texts[i]])[0]]) for i in (1, 2)]
        assert h.store.put_message_vectors("rv", current, CURRENT) == 2
        h.service.recall_version = lambda: CURRENT

        found = h.service.search_recall("rv", "ferry late", mode="vector", limit=10)
        assert found.mode == "vector"
        assert [x.message.message_id for x in found.page.items] == [ids[2], ids[1]]

        hybrid = h.service.search_recall("rv", "ferry", mode="hybrid", limit=10)
        # the ferry message without a current vector is still found, by its words
        assert {x.message.message_id for x in hybrid.page.items} >= {ids[0], ids[2]}
    finally:
        h.close()
