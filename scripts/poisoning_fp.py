"""False-positive rate of the memory-poisoning filter over real conversation (LoCoMo turns).

    .venv/bin/python scripts/poisoning_fp.py [--data LOCOMO_JSON] [--show 20]
    .venv/bin/python scripts/poisoning_fp.py --text README.md docs/*.md MORE/*.txt

Every turn text of every conversation is ordinary dialogue between two people, none of it an
attack, so each turn the filter marks tainted is a false positive. Prints the count, the rate,
the matches per pattern and (``--show``) the flagged turns, so a pattern change can be judged.
Also prints how many turns mention "instruction" at all: the words an over-eager filter trips on.
The LoCoMo turns almost never do, so ``--text`` scans the paragraphs of text or markdown files
instead (technical prose that talks about prompts, roles and tool calls; API docs that show vcm's
own tool calls are expected to be flagged).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from vcm.eval.bench import add_data_flag, data_path
from vcm.poisoning import DEFAULT_PATTERNS, Filter


def turn_texts(samples: list[dict[str, object]]) -> list[str]:
    texts: list[str] = []
    for sample in samples:
        conversation = sample["conversation"]
        assert isinstance(conversation, dict)
        for key, turns in conversation.items():
            if key.startswith("session_") and isinstance(turns, list):
                texts += [str(t.get("text", "")) for t in turns if isinstance(t, dict)]
    return texts


def all_strings(node: object) -> list[str]:
    """Every string in the file (turns, captions, questions, answers, summaries, observations)."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in all_strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in all_strings(v)]
    return []


def paragraphs(paths: list[Path]) -> list[str]:
    """The blank-line separated paragraphs of text files."""
    return [p for path in paths for p in re.split(r"\n\s*\n", path.read_text()) if p.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_flag(parser)
    parser.add_argument("--show", type=int, default=10, help="print this many flagged turns")
    parser.add_argument("--all-strings", action="store_true", help="every string in the file, not only turns")
    parser.add_argument("--text", type=Path, nargs="+", help="scan the paragraphs of these files instead")
    args = parser.parse_args()
    if args.text:
        texts = paragraphs(args.text)
    else:
        data = json.loads(data_path(args.data).read_text())
        texts = all_strings(data) if args.all_strings else turn_texts(data)
    taint = Filter(DEFAULT_PATTERNS)
    flagged = [(t, taint.scan(t)) for t in texts]
    flagged = [(t, v) for t, v in flagged if v.tainted]
    by_pattern = Counter(r for _, v in flagged for r in v.reasons)
    mentions = sum("instruction" in t.lower() or "ignore" in t.lower() for t in texts)
    print(f"texts: {len(texts)}  mentioning instruction(s)/ignore: {mentions}")
    print(f"flagged: {len(flagged)}  false-positive rate: {len(flagged) / max(len(texts), 1):.4%}")
    for name, n in by_pattern.most_common():
        print(f"  {name}: {n}")
    for text, verdict in flagged[: args.show]:
        print(f"- {','.join(verdict.reasons)}: {text[:200]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
