"""The context an agent's model actually sees, through the façade: the hot context with the
layers of :mod:`vcm.prompt.layers` around it — identity, tools hint, sticky facts before the
summary and FIFO; state header, relevant memory, skills before the latest user message (the order
that keeps consecutive prompts' prefix stable for a provider's prompt cache).

Room: the injected layers together never take more than the window minus the output reserve
minus what the hot context holds, so the invariant the hot path keeps (the prompt and the answer
fit the window) holds for the built prompt too. Each layer's budget (``[context]``) is a ceiling
within that room, given in :data:`~vcm.prompt.layers.PRIORITY` order: near the flush line (90 % of
the window by default) the room, and so the layers, shrink; after a flush (down to 50 %) they have
their full budgets. ``budget.memory_reserve`` (0 by default) would keep a floor of room by moving
the flush line down. A layer's tokens include its message framing, as the hot path counts its
messages.

Relevant memory is retrieved for the latest user message (or an explicit query): facts by the
hybrid fact search and recalled messages by hybrid recall, minus messages still in the FIFO and
facts already shown in the state header or the sticky facts; each line names its source id and
carries the taint flags of its text. What it retrieves counts as a use of those facts.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vcm import validation
from vcm.errors import VcmError
from vcm.facts.working_set import RELEVANCE_HITS
from vcm.hotpath.context import AssembledContext, layer_tokens
from vcm.hotpath.timeline import unmarked
from vcm.prompt import layers as prompt
from vcm.prompt import room as prompt_room
from vcm.prompt import skills as skill_files
from vcm.service.core import Core
from vcm.service.facts import Facts
from vcm.service.injections import Injections
from vcm.service.messages import Messages
from vcm.service.search import Search
from vcm.service.state import StateKeys
from vcm.store.principals import is_holder, principal_of
from vcm.store.types import Fact, FactHit, FactQuery, FactScore, StoredMessage
from vcm.types import Gauges, Message

log = logging.getLogger(__name__)
MAX_QUERY_CHARS = 4000
# Parsed skill directories of this process, re-read when a file changes (all services share them).
_skills_lock = threading.Lock()
_skills_cache: dict[str, tuple[tuple[tuple[str, int], ...], list[skill_files.Skill], list[skill_files.Problem]]] = {}


@dataclass(frozen=True)
class BuiltContext:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    layers: list[str]  # the layer of each message
    message_tokens: list[int]
    gauges: Gauges  # the hot context's
    injected: list[prompt.Layer]
    room: int  # tokens the injected layers could use
    query: str  # what relevant memory and skills were chosen for
    problems: list[dict[str, str]] = field(default_factory=list)  # skill files left out, and why
    left_out: int = 0  # the FIFO's oldest messages this prompt leaves out to give the layers room

    @property
    def total(self) -> int:
        return sum(self.message_tokens)

    def layer_tokens(self) -> dict[str, int]:
        return layer_tokens(self.layers, self.message_tokens)


class ContextBuilder:
    """build_context: the hot context (messages) with the layers retrieved from facts, state keys
    and recall (search) around it."""

    def __init__(self, core: Core, messages: Messages, facts: Facts, state: StateKeys, search: Search) -> None:
        self.core = core
        self.injections = Injections(core)
        self.messages = messages
        self.facts = facts
        self.state = state
        self.search = search

    def build_context(
        self,
        agent_id: str,
        *,
        query: str | None = None,
        user: str | None = None,
        token_sha256: str | None = None,
        record_use: bool = True,
    ) -> BuiltContext:
        """The prompt for the agent's next model call. The facts it shows count as used (their
        lifetimes refreshed) unless ``record_use`` is off: a look at the prompt (GET /context,
        the viewer, ``vcm context --built``) changes nothing."""
        with self.core.one_agent_read():
            return self._build(agent_id, query, user, token_sha256, record_use)

    def _build(
        self, agent_id: str, query: str | None, user: str | None, token_sha256: str | None, record_use: bool
    ) -> BuiltContext:
        hot, fifo = self.messages.context_and_fifo(agent_id, token_sha256=token_sha256)
        info = self.core.agent(agent_id)
        cfg = self.core.settings.context
        # A layer is one more message: its framing tokens count, as the hot path counts its own.
        count = self.core.counter(info.model).message
        window = hot.gauges.window
        room = max(0, window - math.ceil(window * self.core.settings.budget.output_reserve) - hot.gauges.total)
        # Near the flush line the hot context leaves the per-turn layers no room: this prompt
        # leaves the FIFO's oldest messages out instead (vcm.prompt.room), turn_room / steps at a
        # time: with one step the cut stays put until the next flush, so the cached prefix breaks
        # once per eviction cycle (a cut moving with every quarter of the floor cost 19 points of
        # prefix reuse at 4k, bench_context).
        floor = math.floor(window * cfg.turn_room)
        entries = [prompt_room.Entry(m.role, m.tokens, m.pinned) for m in fifo]
        cut = prompt_room.left_out(entries, floor - room, max(1, floor // cfg.turn_room_steps))
        if cut:
            hot, freed = _without_oldest(hot, cut)
            room += freed
            fifo = fifo[cut:]
        fifo_ids = [m.id for m in fifo]
        # A long message is searched for by its first MAX_QUERY_CHARS (the searches' own limit).
        if query is None:
            query = _latest_user_text(hot)[:MAX_QUERY_CHARS]  # an appended message: valid text
        else:
            # Refused here, before any search: with a NUL only recall refused it, and the prompt
            # was built without recalled messages and without saying why.
            query = validation.text(query[:MAX_QUERY_CHARS], "query", MAX_QUERY_CHARS, allow_empty=True)
        vector_text = self._embed_ahead(agent_id, query)
        caps = {
            "identity": room, "tools_hint": math.floor(window * cfg.tools_hint),
            "state": math.floor(window * cfg.state), "sticky": math.floor(window * cfg.sticky),
            "memory": math.floor(window * cfg.memory), "skills": math.floor(window * cfg.skills),
        }  # fmt: skip
        skills, problems = self._skills()
        filters = FactQuery(limit=RELEVANCE_HITS + cfg.memory_facts, statuses=self.facts.prompt_statuses())
        build = _Build(
            agent_id, query, count, fifo_ids, vector_text,
            lambda: self.facts.fact_scores(agent_id, query, filters=filters),
            lambda ranked: self.facts.fact_hits(agent_id, ranked, filters=filters),
        )  # fmt: skip
        makers: dict[str, Callable[[int], prompt.Layer | None]] = {
            "identity": lambda b: self._identity(agent_id, user, b, count, _undated_start(fifo, cfg.time))
            if cfg.identity
            else None,
            "state": lambda b: self._state(build, b),
            "sticky": lambda b: self._sticky(build, b),
            "memory": lambda b: self._memory(build, b),
            "skills": lambda b: prompt.fit(
                "skills", [prompt.Item(f"## {s.name}\n{s.body}", {"kind": "skill", "id": s.slug})
                           for _, s in skill_files.triggered(skills, query)], b, count,
            ),
            "tools_hint": lambda b: self._tools_hint(hot, b, count),
        }  # fmt: skip
        injected: list[prompt.Layer] = []
        left = room
        for name in prompt.PRIORITY:
            layer = makers[name](min(caps[name], left))
            if layer is not None:
                injected.append(layer)
                left -= layer.tokens
        if build.used and record_use:
            self.facts.use(agent_id, build.used)
        if record_use:  # the injection log: what this prompt put before the model, ids only
            self.injections.record_injection(agent_id, injected)
        built = prompt.assemble(hot.messages, hot.layers, hot.message_tokens, injected)
        return BuiltContext(
            built.messages, hot.tools, built.layers, built.message_tokens, hot.gauges, built.injected, room,
            query, [{"path": p.path, "reason": p.reason} for p in problems], cut,
        )  # fmt: skip

    def _embed_ahead(self, agent_id: str, query: str) -> str | None:
        """The query vectors this build will ask for, in one model call: the fact search's (the
        query) and, when relevant memory recalls messages, recall's (the query without the
        authors' names it mentions, when it names some), whose text is returned for that search
        (None: none worked out here). A failure here is left to the searches, which meet it again
        and handle it as they do."""
        if self.core.embed is None or not query.strip():
            return None
        texts = [query]
        recall_text = None
        if self.core.settings.context.memory_messages and self.core.settings.recall.vectors:
            recall_text = self.search.vector_text(agent_id, query)
            texts.append(recall_text)
        try:
            self.core.vectors_of(texts)
        except Exception as exc:  # see above: the searches meet it again
            log.debug("query vectors of %s not embedded ahead: %s", agent_id, exc)
        return recall_text

    # --- layers -----------------------------------------------------------------------------------
    def _identity(
        self, agent_id: str, user: str | None, budget: int, count: Callable[[str], int], begins: float | None
    ) -> prompt.Layer | None:
        who = user or self.core.settings.context.user_name or None
        text = prompt.identity(self.core.clock(), who, agent_id, begins=begins)
        n = count(text)
        return prompt.Layer("identity", text, n) if n <= budget else None

    def _tools_hint(self, hot: AssembledContext, budget: int, count: Callable[[str], int]) -> prompt.Layer | None:
        names = [str(t.get("function", {}).get("name", "")) for t in hot.tools]
        text = prompt.tools_hint(names)
        n = count(text) if text else 0
        return prompt.Layer("tools_hint", text, n) if text and n <= budget else None

    def _state(self, build: _Build, budget: int) -> prompt.Layer | None:
        if budget <= 0:
            return None
        ws = self.facts.working_set(
            build.agent_id, build.query, caps={"facts": 0, "relations": 0, "entities": 10}, hits=build.hits(),
            record_use=False,
        )  # fmt: skip
        facts: dict[str, Fact] = {}
        items: list[prompt.Item] = []
        labels = {"goal": "Goal", "constraints": "Constraint", "next_actions": "Next", "open_questions": "Open",
                  "risk_flags": "Risk"}  # fmt: skip
        for section, label in labels.items():
            for i in ws.sections.get(section, []):
                items.append(prompt.Item(f"{label}: {i.fact.value} [{_ref(i.fact)}]", _fact_source(i.fact)))
                facts[i.fact.fact_id] = i.fact
                build.shown.add(i.fact.fact_id)
        entities = [i.fact for i in ws.sections.get("entities", [])]
        if entities:
            items.append(prompt.Item("Active entities: " + ", ".join(f.value for f in entities)))
        for entry in self.state.list_state(build.agent_id):  # its own keys, then its user's and domain's
            shared = principal_of(entry.agent_id)[0] if is_holder(entry.agent_id) else None
            line = f"{entry.key}{f' ({shared})' if shared else ''} = {prompt.quote(_json(entry.value), 200)}"
            items.append(prompt.Item(line, {"kind": "state", "id": entry.key, **({"scope": shared} if shared else {})}))
        layer = prompt.fit("state", items, budget, build.count)
        build.show(layer, facts)
        if layer is not None and any(line.startswith("Active entities: ") for line in layer.text.splitlines()):
            build.used.extend(entities)
        return layer

    def _sticky(self, build: _Build, budget: int) -> prompt.Layer | None:
        if budget <= 0:
            return None
        query = FactQuery(types=["sticky"], statuses=["active"], limit=100)
        facts = [f for f in self.facts.list_facts(build.agent_id, query) if f.fact_id not in build.shown]
        facts.sort(key=lambda f: (-f.importance, -f.updated_at))
        layer = prompt.fit("sticky", [prompt.Item(f"- {f.value} [{_ref(f)}]", _fact_source(f)) for f in facts],
                           budget, build.count)  # fmt: skip
        build.shown.update(str(s["id"]) for s in (layer.sources if layer else ()))
        return layer

    def _memory(self, build: _Build, budget: int) -> prompt.Layer | None:
        cfg = self.core.settings.context
        query = build.query
        if budget <= 0 or not query.strip():
            return None
        items: list[prompt.Item] = []
        facts: dict[str, Fact] = {}
        said: dict[str, str] = {}  # the recalled messages' words, by id, as "author: content"
        if cfg.memory_facts:
            chosen: list[FactScore] = []
            for hit in build.hits():
                if hit.score < cfg.memory_fact_min_score:
                    break  # the hits come best first
                if hit.fact_id in build.shown:
                    continue
                chosen.append(hit)
                if len(chosen) >= cfg.memory_facts:
                    break
            # Only these are read whole: a fact gone since the ranking is left out.
            facts = {h.fact.fact_id: h.fact for h in (build.read(chosen) if chosen else ())}
            said_at = self._said_at(build.agent_id, facts.values())
            for f in facts.values():
                status = "" if f.status == "active" else f", {f.status}"
                # When it was last said (its newest message evidence), as recalled messages say
                # when they were said; else when it was last written or confirmed.
                at = said_at.get(f.fact_id) or f.updated_at
                when = f", {prompt.stamp(at)}" if at > 0 else ""
                items.append(prompt.Item(f"- [{_ref(f)}, {f.type}{status}{when}] {f.value}", _fact_source(f)))
        if cfg.memory_messages:
            hits, groups = self._recalled(build, cfg.memory_messages)
            for group in groups:
                m, mark = hits[group[0]]
                others = [hits[i][0] for i in group[1:]]
                flag = f", flagged: {', '.join(mark.get('taint_reasons', []))}" if mark.get("tainted") else ""
                who = m.name or m.role
                again = prompt.also_said([o.created_at for o in others])
                head = f"- [message {m.message_id}, {who}, {prompt.stamp(m.created_at)}{flag}{again}]"
                source: dict[str, Any] = {"kind": "message", "id": m.message_id, "tainted": bool(mark.get("tainted"))}
                if others:
                    source["same_words"] = [o.message_id for o in others]
                items.append(prompt.Item(f"{head} {prompt.quote(m.content)}", source))
                said[m.message_id] = f"{who}: {m.content}"
        layer = prompt.fit("memory", items, budget, build.count)
        # A fact the offline extractor kept as it was said repeats a recalled message the layer
        # shows: the message says it, with its context, and the fact's line goes to other memory.
        shown = [said[str(s["id"])] for s in (layer.sources if layer else ()) if s.get("kind") == "message"]
        repeated = {i for i, f in facts.items() if prompt.repeats(f.value, shown)}
        if repeated:
            items = [i for i in items if not (i.source.get("kind") == "fact" and i.source.get("id") in repeated)]
            layer = prompt.fit("memory", items, budget, build.count)
        build.show(layer, facts)
        return layer

    def _said_at(self, agent_id: str, facts: Iterable[Fact]) -> dict[str, float]:
        """When each of the agent's own ``facts`` was last said: the newest time of the messages
        its evidence points at (one store read for all). A fact extracted or promoted later, or
        from history imported with its times, is placed when it was said, not when vcm wrote it."""
        cited = {f.fact_id: [str(e["id"]) for e in f.evidence if e.get("kind") == "message"]
                 for f in facts if f.agent_id == agent_id}  # fmt: skip
        ids = list(dict.fromkeys(i for found in cited.values() for i in found))
        if not ids:
            return {}
        try:
            times = {m.message_id: m.created_at for m in self.core.store.get_messages(agent_id, ids)}
        except VcmError as exc:  # a date is a nicety: the fact's own time stands in
            log.warning("relevant memory of %s: evidence times unread (%s)", agent_id, exc.code)
            return {}
        return {fid: max(times[i] for i in found if i in times) for fid, found in cited.items()
                if any(i in times for i in found)}  # fmt: skip

    def _recalled(
        self, build: _Build, wanted: int
    ) -> tuple[list[tuple[StoredMessage, dict[str, Any]]], list[list[int]]]:
        """Recall's best messages for the query (with their poisoning marks), grouped by wording
        (:func:`vcm.prompt.layers.same_words`), at most ``wanted`` groups. A wording said more than
        once takes one line, and the room it leaves goes to the next distinct message: half as
        many again are asked for, and in a conversation that repeats itself so much that they
        hold too few wordings, four times as many once more."""
        hits: list[tuple[StoredMessage, dict[str, Any]]] = []
        groups: list[list[int]] = []
        for limit in (wanted + wanted // 2, 4 * wanted):
            try:
                found = self.search.search_recall(
                    build.agent_id, build.query, limit=limit, exclude=build.fifo_ids, vector_text=build.vector_text
                )
            except VcmError as exc:  # recall is an index: a failure leaves the facts in place
                log.warning("relevant memory of %s: recall search failed (%s)", build.agent_id, exc.code)
                break
            hits = [(r.message, mark) for r, mark in zip(found.page.items, found.marks, strict=True)]
            groups = prompt.same_words([m.content for m, _ in hits])
            if len(groups) >= wanted or len(hits) < limit:
                break
        return hits, groups[:wanted]

    # --- skills -----------------------------------------------------------------------------------
    def _skills(self) -> tuple[list[skill_files.Skill], list[skill_files.Problem]]:
        """The skills directory's files, re-read when a file changes (by name, size and mtime)."""
        directory = self.core.settings.context.skills_dir
        if not directory:
            return [], []
        try:
            stamp = tuple(
                sorted((e.name, e.stat().st_mtime_ns ^ e.stat().st_size) for e in os.scandir(directory)
                       if e.name.endswith(".md"))
            )  # fmt: skip
        except OSError as exc:
            return [], [skill_files.Problem(directory, f"cannot read the skills directory: {exc}")]
        with _skills_lock:
            cached = _skills_cache.get(directory)
            if cached is None or cached[0] != stamp:
                skills, problems = skill_files.load(directory)
                for p in problems:
                    log.warning("skill file %s left out: %s", p.path, p.reason)
                cached = (stamp, skills, problems)
                _skills_cache[directory] = cached
        return cached[1], cached[2]


@dataclass
class _Build:
    """One build's state: what it searches for, and the facts its layers show."""

    agent_id: str
    query: str
    count: Callable[[str], int]
    fifo_ids: list[str]  # recalled messages still in the FIFO are left out
    vector_text: str | None  # recall's query vector text, worked out with the query's vectors
    search: Callable[[], list[FactScore]]  # the one fact search, shared by state header and memory
    read: Callable[[Sequence[FactScore]], list[FactHit]]  # whole facts of some of its hits
    shown: set[str] = field(default_factory=set)  # fact ids a layer holds: no other repeats them
    used: list[Fact] = field(default_factory=list)  # their use is recorded once, after the build
    _hits: list[FactScore] | None = None

    def hits(self) -> list[FactScore]:
        if self._hits is None:
            self._hits = self.search() if self.query.strip() else []
        return self._hits

    def show(self, layer: prompt.Layer | None, facts: Mapping[str, Fact]) -> None:
        """Count the ``facts`` among ``layer``'s sources as used (those that did not fit are not)."""
        kept = {str(s["id"]) for s in (layer.sources if layer else ()) if s.get("kind") == "fact"}
        self.used.extend(f for i, f in facts.items() if i in kept)


def _without_oldest(hot: AssembledContext, count: int) -> tuple[AssembledContext, int]:
    """``hot`` without its FIFO's ``count`` oldest messages, and the tokens they held. The gauges
    stay the hot state's (what the hot path holds, not what this prompt shows)."""
    first = hot.layers.index("fifo")
    freed = sum(hot.message_tokens[first : first + count])
    keep = [i for i in range(len(hot.messages)) if not first <= i < first + count]
    trimmed = AssembledContext(
        [hot.messages[i] for i in keep], hot.tools, hot.gauges, [hot.message_tokens[i] for i in keep],
        [hot.layers[i] for i in keep],
    )  # fmt: skip
    return trimmed, freed


def _latest_user_text(hot: AssembledContext) -> str:
    for message, layer in zip(reversed(hot.messages), reversed(hot.layers), strict=True):
        if layer == "fifo" and message.get("role") == "user" and isinstance(message.get("content"), str):
            return unmarked(str(message["content"]))  # the words, not when they were said
    return ""


def _fact_source(f: Fact) -> dict[str, Any]:
    shared = is_holder(f.agent_id)  # a user's or domain's fact: the source says whose
    return {"kind": "fact", "id": f.fact_id, **({"scope": f.scope} if shared else {})}


def _ref(f: Fact) -> str:
    """How a fact is named in the prompt: its id, and its scope when the agent shares it with
    its user's or domain's other agents (``[fact f1, user]``)."""
    return f"fact {f.fact_id}, {f.scope}" if is_holder(f.agent_id) else f"fact {f.fact_id}"


def _json(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


__all__: Sequence[str] = ("BuiltContext", "ContextBuilder")


def _undated_start(fifo: Sequence[Message], mode: str) -> float | None:
    """When the prompt's first message with words was said, if no date marker says it (``day``
    mode: a marker only where the day changes, so the run of messages before the first marker
    shares that message's day); None when its marker places it, or in the other modes."""
    if mode != "day":
        return None
    for m in fifo:
        if m.kind == "message" and m.role != "tool" and m.content:
            return None if m.marker else m.created_at
    return None
