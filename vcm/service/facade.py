"""The memory service: one façade over the hot state, the store and the cold-path seams.

The HTTP API, the tool executor, the agent loop and the CLI all go through it; they do not
reach into the hot state or the store. It owns what every entry point must do the same way:

* **idempotency**: one record format, kept by the hot state (:meth:`HotState.claim` and the Lua
  mutations), one namespace per agent, checked and recorded atomically;
* **taint marking** of retrieved text (:mod:`vcm.poisoning`): :meth:`mark` and the marks on
  search results, and the refusal of tainted text into working blocks;
* **cursor secrets**: the key of the MACs on result cursors (:meth:`cursor_secret`);
* **agent tokens**: issuing them (:mod:`vcm.service.tokens`); entry points check the tokens they
  receive against the hot state's (:class:`vcm.api.auth.TokenAuthority`).

Entry points translate their requests into calls here and nothing more: what a keyed retry
answers, which filters and defaults apply, what a request needs are decided here.

Its collaborators are ports, wired by process entry points: a :class:`~vcm.dispatch.Dispatcher`
for cold-path work (spooling, evictions, archival ingestion jobs), an ``embed`` function for
query vectors, for the CLI's bulk jobs a :class:`~vcm.service.bulk.BulkJobs` and, to run
maintenance now, a :class:`~vcm.service.maintenance.MaintenanceJobs`. Nothing here
imports Celery or the embedding model.

**Composition.** The façade is made of parts that share one :class:`~vcm.service.core.Core`, each
a small class of its own module; a part that needs another takes it as a typed constructor
argument. Each part's public methods are bound here as attributes of the façade
(``self.remember = self.facts.remember``), so callers keep one object with every method, and
mypy knows each bound method's full signature.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from vcm.dispatch import Dispatcher
from vcm.durable import Durability
from vcm.hotpath.state import HotState
from vcm.service.agents import Agents
from vcm.service.blocks import Blocks
from vcm.service.bulk import Bulk, BulkJobs
from vcm.service.context import ContextBuilder
from vcm.service.core import Core, Embed
from vcm.service.facts import Facts
from vcm.service.forgetting import Forgetting
from vcm.service.graph import Graph
from vcm.service.lifecycle import Lifecycle
from vcm.service.maintenance import Maintenance, MaintenanceJobs
from vcm.service.messages import Messages
from vcm.service.portable import Portable
from vcm.service.principals import Principals
from vcm.service.redaction import SummaryRedaction, SummaryRewriter
from vcm.service.replicas import Replicas
from vcm.service.search import Search
from vcm.service.snapshots import Snapshots
from vcm.service.state import StateKeys
from vcm.service.tokens import Tokens
from vcm.settings import Settings
from vcm.store.port import MemoryStore


class MemoryService:
    def __init__(
        self,
        hot: HotState,
        store: MemoryStore,
        dispatcher: Dispatcher,
        *,
        embed: Embed | None = None,
        recall_version: Callable[[], str] | None = None,
        clock: Callable[[], float] = time.time,
        bulk: BulkJobs | None = None,
        maintenance: MaintenanceJobs | None = None,
        summaries: SummaryRewriter | None = None,
    ) -> None:
        self.core = core = Core(hot, store, dispatcher, embed=embed, recall_version=recall_version, clock=clock)
        # --- the parts; a part that needs another takes it explicitly --------------------------------
        self.principals = Principals(core)
        self.facts = Facts(core, self.principals)
        self.state = StateKeys(core, self.principals)
        self.registry = Agents(core, self.facts, self.state)
        self.tokens = Tokens(core, self.registry)
        self.messages = Messages(core, self.facts, self.state)
        self.blocks = Blocks(core)
        self.search = Search(core)
        self.graph = Graph(core, self.facts)
        self.lifecycle = Lifecycle(core)
        self.snapshots = Snapshots(core, self.lifecycle)
        self.forgetting = Forgetting(core, self.facts, self.lifecycle, SummaryRedaction(core, summaries))
        self.replicas = Replicas(core)
        self.builder = ContextBuilder(core, self.messages, self.facts, self.state, self.search)
        self.bulk = Bulk(core, bulk)
        self.maintenance = Maintenance(core, maintenance)
        self.portable = Portable(core, self.lifecycle, self.search, self.bulk)

        # --- the public surface: each part's methods, bound ------------------------------------------
        # core: agents, idempotency, retrieved text, counters
        self.agent = core.agent
        self.rebuild = core.rebuild
        self.claim = core.claim
        self.release = core.release
        self.settle = core.settle
        self.cursor_secret = core.cursor_secret
        self.counter = core.counter
        self.mark = core.mark
        self.scan = core.scan
        self.vector_of = core.vector_of
        # agents and what entry points read about them
        self.create_agent = self.registry.create_agent
        self.agents = self.registry.agents
        self.rebuild_missing = self.registry.rebuild_missing
        self.gauges = self.registry.gauges
        self.pending_batches = self.registry.pending_batches
        self.agent_stats = self.registry.agent_stats
        self.health = self.registry.health
        self.stats = self.registry.stats
        self.events = self.registry.events
        self.record_event = self.registry.record_event
        self.turn = self.registry.turn
        # users and domains: the principals whose memory their agents share (admin operations)
        self.create_principal = self.principals.create_principal
        self.list_principals = self.principals.list_principals
        self.get_principal = self.principals.get_principal
        self.delete_principal = self.principals.delete_principal
        self.set_agent_principals = self.principals.set_agent_principals
        self.agent_principals = self.principals.agent_principals
        # agent tokens: issued here, checked by the entry points that receive them (vcm.api.auth)
        self.create_agent_with_token = self.tokens.create_agent_with_token
        self.issue_token = self.tokens.issue_token
        self.rotate_token = self.tokens.rotate_token
        # messages and the main context
        self.append = self.messages.append
        self.append_many = self.messages.append_many
        self.evict = self.messages.evict
        self.write_recall = self.messages.write_recall
        self.write_recall_entries = self.messages.write_recall_entries
        self.context = self.messages.context
        self.fifo_ids = self.messages.fifo_ids
        self.keep_captured = self.messages.keep_captured
        # working blocks
        self.put_block = self.blocks.put_block
        self.delete_block = self.blocks.delete_block
        self.get_block = self.blocks.get_block
        self.list_blocks = self.blocks.list_blocks
        # recall and archival memory
        self.search_recall = self.search.search_recall
        self.search_archival = self.search.search_archival
        self.ingest_archival = self.search.ingest_archival
        self.ingest_chunks = self.search.ingest_chunks
        self.vector_index_used = self.search.vector_index_used
        self.ingest_job = self.search.ingest_job
        # facts and the entity graph
        self.remember = self.facts.remember
        self.recall_fact = self.facts.recall_fact
        self.search_facts = self.facts.search_facts
        self.rank_facts = self.facts.rank_facts
        self.list_facts = self.facts.list_facts
        self.get_fact = self.facts.get_fact
        self.forget_fact = self.facts.forget_fact
        self.archive_facts = self.facts.archive_facts
        self.fact_stats = self.facts.fact_stats
        self.working_set = self.facts.working_set
        self.consolidate = self.facts.consolidate
        self.settle_fact = self.facts.settle_fact
        self.injections = self.builder.injections.injections
        self.entity_graph = self.graph.entity_graph
        # state keys
        self.set_state = self.state.set_state
        self.get_state = self.state.get_state
        self.list_state = self.state.list_state
        self.delete_state = self.state.delete_state
        # lifecycle and snapshots
        self.delete_agent = self.lifecycle.delete_agent
        self.forget = self.forgetting.forget
        self.forget_message = self.forgetting.forget_message
        self.check_forget = self.forgetting.check_forget
        self.forget_document = self.forgetting.forget_document
        self.reset = self.lifecycle.reset
        self.create_snapshot = self.snapshots.create_snapshot
        self.summary_versions = self.snapshots.summary_versions
        self.list_snapshots = self.snapshots.list_snapshots
        self.get_snapshot = self.snapshots.get_snapshot
        self.delete_snapshot = self.snapshots.delete_snapshot
        self.restore_snapshot = self.snapshots.restore_snapshot
        self.snapshot_all = self.snapshots.snapshot_all
        self.store_agent_ids = self.snapshots.store_agent_ids
        # portable export and import of one agent (docs/portable.md)
        self.export_agent = self.portable.export_agent
        self.import_agent = self.portable.import_agent
        # client instances: the change feed, conflicts, sync status
        self.changes = self.replicas.changes
        self.record_conflict = self.replicas.record_conflict
        self.report_instance = self.replicas.report_instance
        self.instances = self.replicas.instances
        # the prompt the model sees
        self.build_context = self.builder.build_context
        # the CLI's bulk jobs, run here in this process
        self.ingest_paths = self.bulk.ingest_paths
        self.reembed = self.bulk.reembed
        # periodic maintenance: run a job now, and when each last ran
        self.run_maintenance = self.maintenance.run_maintenance
        self.maintenance_runs = self.maintenance.maintenance_runs

    # --- the tiers and ports, shared with the parts through the core ---------------------------------
    # Read-only: the parts hold the core's, so replacing one here would split the service.
    @property
    def hot(self) -> HotState:
        return self.core.hot

    @property
    def store(self) -> MemoryStore:
        return self.core.store

    @property
    def durable(self) -> Durability:
        return self.core.durable

    # Replaceable on a live service (tests, entry points): every part reads them from the core.
    @property
    def settings(self) -> Settings:
        return self.core.settings

    @settings.setter
    def settings(self, value: Settings) -> None:
        self.core.settings = value

    @property
    def dispatcher(self) -> Dispatcher:
        return self.core.dispatcher

    @dispatcher.setter
    def dispatcher(self, value: Dispatcher) -> None:
        self.core.dispatcher = value

    @property
    def embed(self) -> Embed | None:
        return self.core.embed

    @embed.setter
    def embed(self, value: Embed | None) -> None:
        self.core.embed = value

    @property
    def recall_version(self) -> Callable[[], str] | None:
        return self.core.recall_version

    @recall_version.setter
    def recall_version(self, value: Callable[[], str] | None) -> None:
        self.core.recall_version = value

    @property
    def clock(self) -> Callable[[], float]:
        return self.core.clock
