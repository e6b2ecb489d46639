"""Recursive summarisation: new summary = f(previous summary, evicted batch), within a token cap.

Pure: token counting, embedding and the poisoning scan come in as callables, so nothing here does I/O.

The default, :func:`extractive`, is **fact-keeping** (see :mod:`vcm.tasks.summary.units`): each sentence of
the batch becomes a unit of its speaker, compressed (greetings, interjections, hedges and
pleasantries dropped), with relative dates replaced by the date they mean, rewritten in note style
(:func:`vcm.tasks.summary.telegraph.condense`: "I ran the Porto half marathon in 97 minutes yesterday" ->
"ran Porto half marathon in 97 minutes on 7 May 2023") and cut into its independent clauses
(:func:`vcm.tasks.summary.telegraph.split`), so the clause that carries a fact can be kept without the one
that comments on it. Filler units are dropped; the rest are picked greedily by weighted coverage per
token: content words not yet held by the summary, names and numbers weighing more, plus
preferences and decisions (:class:`vcm.tasks.summary.units.Coverage`), so a clause repeating what is
already kept gains nothing.

The summary is **hierarchical**: its text is the previous summary's block, then the batch's, each
with one line per speaker joining that speaker's clauses (``Priya: ran Porto half marathon in 97
minutes; allergic to peanuts``); the next eviction reads the lines back as units, each clause
compressed further as it ages (headline style, :func:`vcm.tasks.summary.aging.shorten`, before the
poisoning re-scan), so older blocks fold into one line per speaker and take fewer tokens. The
previous summary's units are picked first within ``previous_share`` of the cap (unless a newer
unit of the same speaker supersedes them: covers most of their content words); after that, old
and new units compete on the same terms, so an older fact leaves the summary only when newer ones
carry more per token. When that leaves the batch under the loss score's threshold, the retry
gives the batch a floor, the least share of the cap up to half that lifts the score to its
threshold (:func:`extractive`).
The cosine drift is measured against at most ``max_candidates`` of the source's units.
Sentences the poisoning filter flags become marked, quoted reports on lines of their own, never
bare text. Each draft says how many of the batch's salient units it retained (the loss score,
beside the cosine drift).

:func:`by_centrality` is the earlier summariser, kept for comparison (``scripts/eval_summary.py
--summarizer old``). Its candidates are the previous summary's lines and the batch's
sentences (each prefixed with its speaker, so "who said it" survives). Each candidate's
relevance is its embedding's cosine to the centroid of all candidates (centrality) plus a bonus
for names, numbers and identifiers (:func:`vcm.tasks.summary.sentences.salience`; the speakers' own names do
not count), scaled down for sentences with little content ("Wow, that's awesome!",
:func:`vcm.tasks.summary.sentences.substance`), which are central in any chat but say nothing. Maximal marginal
relevance then picks candidates until the cap is spent: first from the previous summary (up to
``previous_share`` of the cap, so the chain stays recursive and old facts do not vanish at the
first eviction), then from the batch, then from whatever is left. The summary lists the kept
previous lines, then the kept batch sentences, each in its original order, one per line. It is
cut only at sentence boundaries and never exceeds the cap.

Embedding is the cost of a summary (about a millisecond per token on one CPU thread), so for it at
most ``max_candidates`` sentences are embedded: a larger batch is first thinned without the model to
the lexically most central and salient sentence of each of that many stretches of the
conversation, which keeps the whole time line represented. Drift is then measured against these
candidates (see :mod:`vcm.tasks.summary.drift`).

The request and draft types are in :mod:`vcm.tasks.summary.request`, the centrality summariser
in :mod:`vcm.tasks.summary.centrality`.
"""

from __future__ import annotations

import heapq
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from vcm import poisoning
from vcm.tasks.summary import aging, drift, sentences, telegraph, units
from vcm.tasks.summary.ahead import Ahead, DriftTexts
from vcm.tasks.summary.request import Draft, Params, Request, empty_draft

log = logging.getLogger(__name__)


def fit_text(text: str, request: Request, params: Params) -> list[str]:
    """Sentences of free text (an LLM's summary), keeping a prefix that fits the cap."""
    lines = sentences.split(text, params.max_sentence_chars)
    while lines and request.count("\n".join(lines)) > request.cap:
        lines.pop()
    return lines


@cache
def _default_filter() -> poisoning.Filter:
    return poisoning.Filter(poisoning.patterns())


def default_scan(text: str) -> tuple[str, ...]:
    """vcm's default poisoning patterns (for a request that brings no scan of its own)."""
    return _default_filter().scan(text).reasons


@dataclass(frozen=True)
class Units:
    """The units of a request: the previous summary's, then the batch's."""

    previous: list[units.Unit]
    batch: list[units.Unit]
    speakers: frozenset[str]  # lower case: their names are no news
    flagged: int  # batch sentences (or whole turns) the filter flagged


def units_of(request: Request, params: Params, *, telegraphic: bool = True) -> Units:
    """The request's units; the batch's in note style unless ``telegraphic`` is off (an LLM reads
    the sentences as they were said)."""
    scan = request.scan or default_scan
    previous = units.previous_units(request.previous.split("\n"), scan, aging.shorten if telegraphic else None)
    speakers = {t.speaker.lower() for t in request.turns} | {u.speaker.lower() for u in previous if u.speaker}
    batch: list[units.Unit] = []
    seen = {u.line for u in previous}
    flagged = 0
    for turn in request.turns:
        parts = sentences.split(turn.text, params.max_sentence_chars)
        made = [units.unit_of(turn.speaker, p, turn.at, scan, telegraphic=telegraphic) for p in parts]
        whole = scan(turn.text)
        if whole and not any(u is not None and u.flagged for u in made):
            # The pattern spans sentences: the whole turn is reported, none of its sentences bare.
            made = [units.Unit(turn.speaker, units.flagged_line(turn.speaker, turn.text, whole), whole)]
        if telegraphic:  # a sentence's clauses compete on their own (see telegraph.split)
            made = [c for u in _attached(made) for c in _clauses(u)]
        for unit in made:
            if unit is None or unit.line in seen:
                continue
            seen.add(unit.line)
            flagged += bool(unit.flagged)
            batch.append(unit)
    return Units(previous, batch, frozenset(s for s in speakers if s), flagged)


def _attached(made: Sequence[units.Unit | None]) -> list[units.Unit | None]:
    """A turn's sentences, each that would read as a fragment alone ("Hopefully they finish soon",
    "With mixed results") joined to the sentence of the same turn before it, which holds what it
    points back to (its first sentence's antecedent was said by someone else: it stays alone)."""
    out: list[units.Unit | None] = []
    for unit in made:
        before = out[-1] if out else None
        if (unit is not None and before is not None and not unit.flagged and not before.flagged
                and unit.speaker and telegraph.fragment(unit.body)):  # fmt: skip
            out[-1] = replace(before, body=f"{before.body}, {unit.body}")
            continue
        out.append(unit)
    return out


def _clauses(unit: units.Unit | None) -> list[units.Unit | None]:
    if unit is None or unit.flagged or not unit.speaker:
        return [unit]
    bodies = telegraph.split(unit.body, units.words)
    if bodies == [unit.body]:
        return [unit]  # one clause (most sentences): the unit as it is
    return [units.Unit(unit.speaker, b, unit.flagged, unit.previous) for b in bodies]


def _superseded(old: units.Unit, newer: Mapping[str, Mapping[str, list[int]]], cover: float = 0.7) -> bool:
    """A newer unit of the same speaker holds most of ``old``'s content words: it replaces it.
    ``newer``: by speaker, the rows of the units holding each content word (an index: comparing
    each old unit with each newer one was 1.2 million set intersections at a 128k window)."""
    if old.flagged or not old.speaker:
        return False
    content = set(units.words(old.body))
    postings = newer.get(old.speaker)
    if not content or not postings:
        return False
    shared = Counter(row for word in content for row in postings.get(word, ()))
    return any(n / len(content) >= cover for n in shared.values())


def _newer(batch: Sequence[units.Unit]) -> dict[str, dict[str, list[int]]]:
    """The index :func:`_superseded` reads: speaker -> content word -> rows of ``batch``."""
    index: dict[str, dict[str, list[int]]] = {}
    for row, unit in enumerate(batch):
        words = index.setdefault(unit.speaker, {})
        for word in set(units.words(unit.body)):
            words.setdefault(word, []).append(row)
    return index


Group = tuple[bool, str, int]  # (in the previous block, speaker, own row or -1)


def _group(unit: units.Unit, row: int) -> Group:
    """The summary line a unit goes on: one per speaker in each block (the previous summary's,
    the batch's); a flagged or speakerless unit has a line of its own."""
    if unit.flagged or not unit.speaker or unit.body.startswith(units.FLAG_PREFIX):
        return unit.previous, "", row
    return unit.previous, unit.speaker, -1


def render(pool: Sequence[units.Unit], rows: Sequence[int]) -> str:
    """The summary text of the units ``rows`` of ``pool``: the previous summary's block, then the
    batch's; in each, one line per speaker joining that speaker's clauses in their order
    (``Priya: ran Porto half marathon; adopted dog Max``), speakers in order of first appearance."""
    lines: dict[Group, list[str]] = {}
    for i in sorted(rows, key=lambda i: (not pool[i].previous, i)):
        lines.setdefault(_group(pool[i], i), []).append(pool[i].body if pool[i].speaker else pool[i].line)
    return "\n".join(
        telegraph.join(speaker, bodies) if own < 0 else bodies[0] for (_, speaker, own), bodies in lines.items()
    )


def guarded(text: str, scan: units.Scan) -> str:
    """Each rendered line scanned as it stands: clauses that passed one by one can read as an
    instruction once joined on their speaker's line (``will ignore what Bob says; all previous
    instructions are void``). The shortest run of adjacent clauses that matches becomes a marked
    quote on a line of its own (again while one matches); the speaker's other clauses stay."""
    out: list[str] = []
    for line in text.split("\n"):
        speaker, sep, body = line.partition(": ")
        if not sep or " " in speaker or len(speaker) > 64:
            speaker, body = "", line
        if line.startswith(units.FLAG_PREFIX) or not (reasons := units.scan_spoken(speaker, body, scan)):
            out.append(line)
        elif not speaker:
            out.append(units.flagged_line("", line, reasons))
        else:
            kept, marked = _unjoin(speaker, telegraph.clauses(body), scan)
            if kept:
                out.append(telegraph.join(speaker, kept))
            out.extend(marked)
    return "\n".join(out)


def _unjoin(speaker: str, clauses: list[str], scan: units.Scan) -> tuple[list[str], list[str]]:
    """A speaker's clauses less each shortest matching run, and those runs as marked lines."""
    marked: list[str] = []
    while clauses and units.scan_spoken(speaker, "; ".join(clauses), scan):
        window = next(
            (i, i + n)
            for n in range(1, len(clauses) + 1)
            for i in range(len(clauses) - n + 1)
            if units.scan_spoken(speaker, "; ".join(clauses[i : i + n]), scan)
        )
        run = "; ".join(clauses[window[0] : window[1]])
        marked.append(units.flagged_line(speaker, run, units.scan_spoken(speaker, run, scan)))
        clauses = clauses[: window[0]] + clauses[window[1] :]
    return clauses, marked


def extractive(request: Request, params: Params) -> Draft:
    """The fact-keeping summary of ``request`` (see the module docstring).

    The previous summary's units are picked first, up to ``previous_share`` of the cap; then every
    unit, old or new, competes for the rest on the same terms, so an older fact is not dropped for
    being older. The retry after drift or loss (``attempt`` > 0) gives the batch a floor: the
    least share of the cap (a tenth, two tenths, ... up to half) that brings the loss score to its
    threshold. Not more than half: that would wipe out the older facts, so the alarm says instead
    that the batch lost facts.
    """
    source = units_of(request, params)
    if not (source.previous or source.batch):  # nothing but pleasantries: nothing to drift from
        return replace(empty_draft(request), score=1.0)
    if request.cap - request.count("") <= 0:
        return empty_draft(request)
    # The loss score's room depends on the units alone: counted once, in a thread while the
    # selection runs (a token count releases the GIL; ~3 000 of them at a 128k window, 20-90 ms).
    room = Ahead(lambda: room_for(request, source), "vcm-summary-room")
    try:
        if params.attempt == 0:
            return _select(request, params, source, 0.0, room)
        for floor in _BATCH_FLOORS:
            draft = _select(request, params, source, floor, room)
            if draft.retention >= params.retention_threshold:
                break
        return draft
    finally:
        room.join()


_BATCH_FLOORS = (0.1, 0.2, 0.3, 0.4, 0.5)


def _select(request: Request, params: Params, source: Units, batch_floor: float, room: Ahead[int]) -> Draft:
    """Greedy weighted coverage: each step takes the unit adding the most not yet covered
    content-word weight per token (a word weighs more when it names something, is a number or
    recurs in the source; :class:`vcm.tasks.summary.units.Coverage`), so the summary holds as many distinct
    facts as the cap allows and a second line saying the same thing gains nothing. A unit costs its
    clause and separator, plus its speaker's line header when it opens that line. After the
    previous summary's share, the batch takes ``batch_floor`` of the cap before the rest is open."""
    base = request.count("")
    available = request.cap - base
    newer = _newer(source.batch)
    kept_previous = [u for u in source.previous if not _superseded(u, newer)]
    pool = kept_previous + source.batch
    drift_source = DriftTexts(request, params, pool)
    value = units.Coverage(pool, source.speakers)
    tokens = _Tokens(request, base)
    worth = [i for i in range(len(pool)) if value.worth(i)]
    # A clause follows "; " (or its speaker's ": "), a line of its own a line break. Only a unit
    # worth something is ever picked, so only those are counted: each count is a tokenizer call,
    # and a fifth of a LoCoMo batch's units are worth nothing.
    costs = {i: tokens(f"; {pool[i].body}") if pool[i].speaker else tokens(pool[i].line) + 1 for i in worth}
    groups = [_group(u, i) for i, u in enumerate(pool)]
    header = {g: tokens(f"{g[1]}:") + 1 if g[2] < 0 else 0 for g in set(groups)}  # +1: the line break
    opened: set[Group] = set()
    picked: list[int] = []
    spent = 0

    def cost(i: int) -> int:
        return costs[i] + (0 if groups[i] in opened else header[groups[i]])

    def ratio(i: int) -> tuple[float, int]:
        return -value.gain(i) / cost(i) ** 0.9, i  # a heap key: the best first, then the lowest row

    def take(rows: Sequence[int], budget: int) -> None:
        """Pick, while any fits, the unit of ``rows`` with the most gain per token (the lowest row
        on a tie). Lazily (CELF): a unit's gain only falls as others are covered, so the key it
        was pushed with bounds its current one, and only the top needs evaluating; its cost falls
        only when its line is opened, and then its group's units are pushed again. The picks are
        the plain greedy's, in O(n log n) evaluations instead of O(n²): 2.3 million gain
        evaluations, about 3 s, at a 128k window's eviction (1 490 messages)."""
        nonlocal spent
        done = set(picked)
        heap = [ratio(i) for i in set(rows) - done]
        heapq.heapify(heap)
        members: dict[Group, list[int]] = {}
        for i in rows:
            members.setdefault(groups[i], []).append(i)
        while heap:
            _, i = heapq.heappop(heap)
            if i in done:
                continue  # a stale copy of a unit pushed again
            if cost(i) > budget - spent:
                continue  # fits again only once its line is opened, which pushes it again
            fresh = ratio(i)
            if heap and fresh > heap[0]:
                heapq.heappush(heap, fresh)  # another may be better now
                continue
            if value.gain(i) <= 0:
                return
            picked.append(i)
            done.add(i)
            value.cover(i)
            spent += cost(i)
            if groups[i] not in opened:
                opened.add(groups[i])
                for j in members.get(groups[i], ()):
                    if j not in done:
                        heapq.heappush(heap, ratio(j))

    take([i for i in worth if pool[i].previous], int(available * params.previous_share))
    if batch_floor > 0:
        take([i for i in worth if not pool[i].previous], spent + int(available * batch_floor))
    take(worth, available)
    # The costs are estimates (tokens merge across a clause's boundaries): what the rendered text
    # really leaves goes to more units.
    spent = request.count(render(pool, picked)) - base
    take(worth, available)
    try:
        # The lines the draft keeps unless its recount is over the cap (then it drops the last picks).
        drift_source.summary_ahead([pool[i].line for i in sorted(picked)])
        return _fact_draft(request, source, pool, picked, drift_source, room)
    finally:
        drift_source.join()  # a draft with no lines never reads the vectors: the threads end here


class _Tokens:
    """Tokens of a piece of summary text, as the main context counts it, memoised."""

    def __init__(self, request: Request, base: int) -> None:
        self.request = request
        self.base = base
        self.memo: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        if text not in self.memo:
            self.memo[text] = max(1, self.request.count(text) - self.base)
        return self.memo[text]


def _fact_draft(
    request: Request,
    source: Units,
    pool: list[units.Unit],
    picked: list[int],
    drift_source: DriftTexts,
    room: Ahead[int],
) -> Draft:
    """Render the picked units; while the (non-additive) recount is over the cap, drop the unit
    picked last."""
    kept = list(picked)
    scan = request.scan or default_scan
    while True:
        text = guarded(render(pool, kept), scan)
        tokens = request.count(text)
        if tokens <= request.cap or not kept:
            break
        kept.pop()
    if not kept:
        return replace(empty_draft(request), score=0.0 if picked else 1.0)
    lines = [pool[i].line for i in sorted(kept)]
    salient, retained = units.retention(source.batch, lines, source.speakers)
    return Draft(
        text,
        tokens,
        _cosine(drift_source, lines),
        "extractive",
        text.count("\n") + 1,
        salient=salient,
        retained=retained,
        flagged=source.flagged,
        room=room.result(),
    )


def room_for(request: Request, source: Units) -> int:
    """How many of the batch's salient units the cap could hold, cheapest first."""
    base = request.count("")
    left = request.cap - base
    costs = sorted(max(1, request.count(u.line) - base + 1) for u in source.batch if units.salient(u, source.speakers))
    held = 0
    for cost in costs:
        if cost > left:
            break
        left -= cost
        held += 1
    return held


def _cosine(source: DriftTexts, lines: list[str]) -> float:
    """Drift: the cosine of the summary's mean embedding to its source's, the source thinned to
    ``max_candidates`` units (the most salient of each stretch) and the summary to as many of its
    lines (one of each stretch: the mean of an even spread estimates the mean of all), to bound
    the embedding work. Unbounded, the summary side was most of a large window's eviction job: at
    128k the summary holds about a thousand lines, 5.1 s of the job's 5.4 s of model time."""
    texts, sample = source.texts, source.sample
    if not texts:
        return 1.0
    vectors = source.vectors(lines)
    weights = np.full(len(sample), len(texts) / len(sample), dtype=np.float64)
    return drift.similarity(vectors[len(sample) :], vectors[: len(sample)], weights)


def sentence_lines(text: str, request: Request, params: Params) -> tuple[list[str], int]:
    """Free text (an LLM's summary) as lines that fit the cap, each sentence the filter flags
    replaced by its marked report; and how many were flagged."""
    scan = request.scan or default_scan
    lines: list[str] = []
    flagged = 0
    for sentence in sentences.split(text, params.max_sentence_chars):
        if sentence.startswith(units.FLAG_PREFIX):
            lines.append(sentence)
        elif reasons := scan(sentence):
            flagged += 1
            lines.append(units.flagged_line("", sentence, reasons))
        else:
            lines.append(sentence)
    while lines and request.count("\n".join(lines)) > request.cap:
        lines.pop()
    return lines, flagged
