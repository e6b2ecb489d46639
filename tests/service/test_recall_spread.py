"""Hybrid recall through the façade, spread across the conversation when ``[recall] diversity_*``
asks for it (vcm.store.diversity; off by default): one strong hit's neighbours give way to another
part of it."""

from __future__ import annotations

from pathlib import Path

from tests.doubles.harness import Harness
from vcm.hotpath.state import HotState
from vcm.store.diversity import DEFAULT, Diversity

FILLER = [
    "the weather was grey all week",
    "we watched a film on friday",
    "my brother fixed the bike",
    "the shop closes early today",
    "lunch was soup and bread",
    "the train was on time for once",
]


def test_a_strong_hits_neighbours_do_not_crowd_out_another_session(hot: HotState, tmp_path: Path) -> None:
    h = Harness(hot, str(tmp_path / "vcm.db"))
    try:
        h.service.create_agent("sp", model="vcm-demo-2k")
        texts = [
            *FILLER,
            "we took the ferry to the island, the ferry was full of kayaks",  # the strong hit
            "did you paddle the kayaks?",
            "yes, round the whole island",
            "the island had a little harbour",
            *FILLER,
            *FILLER,
            "last summer I went kayaking on a lake up north with my cousin",  # another session
            *FILLER,
        ]
        ids = [h.service.append("sp", "user", t).message_id for t in texts]
        strong, far = ids[len(FILLER)], ids[3 * len(FILLER) + 4]
        query = "kayaks island ferry"

        store = h.store
        assert store.recall_diversity == DEFAULT and DEFAULT.off  # type: ignore[attr-defined]
        fused = [x.message.message_id for x in h.service.search_recall("sp", query, limit=3).page.items]
        store.recall_diversity = Diversity(penalty=0.2, reach=3)  # type: ignore[attr-defined]
        spread = [x.message.message_id for x in h.service.search_recall("sp", query, limit=3).page.items]

        assert fused[0] == spread[0] == strong
        # As fused, the strong hit's neighbours fill the top 3; spread, the other session is in it.
        assert far not in fused
        assert far in spread
        # A second page continues the same ranking: nothing repeated.
        first = h.service.search_recall("sp", query, limit=2)
        second = h.service.search_recall("sp", query, limit=2, cursor=first.page.next_cursor)
        assert not {x.message.message_id for x in first.page.items} & {x.message.message_id for x in second.page.items}
    finally:
        h.close()
