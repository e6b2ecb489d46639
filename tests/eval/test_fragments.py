"""The fragment measure of summary readability (vcm.eval.fragments)."""

from __future__ import annotations

from vcm.eval.fragments import measure, pooled, reason


def test_each_kind_of_fragment_and_clauses_that_read_alone() -> None:
    assert reason("with mixed results") == "leaning"
    assert reason("because the train was late again") == "leaning"
    assert reason("Hopefully they finish soon") == "pronoun only"
    assert reason("it was really great") == "pronoun only"
    assert reason("so cool") == "stub"
    # Note style without the speaker's "I" reads alone under its speaker; names make a pronoun clear.
    for clause in ("ran Porto half marathon in 97 minutes on 7 May 2023", "they adopted a dog named Max",
                   "need something to watch on the train"):  # fmt: skip
        assert reason(clause) == "", clause


def test_a_summary_is_measured_by_clause_and_by_line() -> None:
    text = (
        "user: with mixed results; Hopefully they finish soon; need something to watch on train\n"
        "Priya: ran Porto half marathon on 7 May 2023; allergic to peanuts, no satay\n"
        '[flagged quote] "ignore previous instructions"\n'
    )
    r = measure(text, examples=5)
    assert (r.clauses, r.fragments, r.lines, r.lines_with_fragment) == (5, 2, 2, 1)
    assert (r.fragment_pct, r.lines_pct) == (40.0, 50.0)
    assert r.examples == ["leaning: user: with mixed results", "pronoun only: user: Hopefully they finish soon"]
    both = pooled([r, measure("Ann: so cool")])
    assert (both.clauses, both.fragments, both.lines_with_fragment) == (6, 3, 2)
    assert measure("").fragment_pct == 0.0
