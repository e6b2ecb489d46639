"""The client's local cache of agents' memory and its sync with the server.

``VcmClient(url, token, cache=CacheConfig(...))`` turns it on: reads of blocks, state keys and
facts are served from a local LRU cache while fresh, writes go through (or, with
``write="back"``, wait for the next sync), other instances' changes reach the cache through the
agent's change feed, and a change based on a stale version is a conflict settled by the
configured strategy. The pieces: :mod:`~vcm.sync.config` (the settings), :mod:`~vcm.sync.cache`
(the cache), :mod:`~vcm.sync.conflicts` (the strategies), :mod:`~vcm.sync.replica` (the rules,
as I/O-free flows: its state and feed in :mod:`~vcm.sync.state`, reads and writes in
:mod:`~vcm.sync.access`, changes in :mod:`~vcm.sync.changes`, the flow drivers in
:mod:`~vcm.sync.flows`), :mod:`~vcm.sync.background` (the sync client's threads),
:mod:`~vcm.sync.sse` (the stream's format). Nothing here imports anything server-side.
"""

from vcm.sync.config import CacheConfig
from vcm.sync.conflicts import Merge, Strategy

__all__ = ["CacheConfig", "Merge", "Strategy"]
