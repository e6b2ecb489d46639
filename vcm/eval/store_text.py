"""Synthetic text for the store benchmark (``scripts/bench_store.py``): messages whose words follow a
Zipf distribution (real function words on top, pronounceable pseudo-words below), and varied
sentences whose embeddings serve as the vector topics' centres."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from vcm.store.types import StoredMessage

# The most frequent English words, in rank order: they take the top Zipf ranks so common-word
# queries hit posting lists as long as real ones.
_COMMON_TEXT = (
    "the of and to a in is you that it he was for on are as with his they i at be this have from "
    "or one had by word but not what all were we when your can said there use an each which she "
    "do how their if will up other about out many then them these so some her would make like him "
    "into time has look two more write go see number no way could people my than first water been "
    "call who oil its now find long down day did get come made may part"
)


COMMON = _COMMON_TEXT.split()


_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "br", "st", "tr", "pl")


_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou")


_CODAS = ("", "n", "r", "s", "t", "l", "nd", "st", "ck", "m")


def vocabulary(size: int, seed: int = 11) -> list[str]:
    """``size`` distinct words: the common English ones first, then 1-3 syllable pseudo-words.

    Pseudo-words rather than a dictionary keep the benchmark self-contained; BM25 cost depends
    on posting-list lengths, which the Zipf ranks fix, not on spelling.
    """
    rng = np.random.default_rng(seed)
    words = list(dict.fromkeys(COMMON))
    seen = set(words)
    while len(words) < size:
        n = int(rng.integers(1, 4))
        word = "".join(
            _ONSETS[rng.integers(len(_ONSETS))]
            + _VOWELS[rng.integers(len(_VOWELS))]
            + _CODAS[rng.integers(len(_CODAS))]
            for _ in range(n)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words[:size]


class ZipfText:
    """Messages and queries whose words follow p(rank) ~ rank^-s."""

    def __init__(self, vocab_size: int, s: float, seed: int) -> None:
        self.words = np.array(vocabulary(vocab_size), dtype=object)
        ranks = np.arange(1, vocab_size + 1, dtype=np.float64)
        weights = ranks**-s
        self.cdf = np.cumsum(weights / weights.sum())
        self.rng = np.random.default_rng(seed)

    def draw(self, n: int) -> npt.NDArray[np.int64]:
        return np.minimum(np.searchsorted(self.cdf, self.rng.random(n)), len(self.cdf) - 1).astype(np.int64)

    def lengths(self, n: int) -> npt.NDArray[np.int64]:
        # Log-normal around e^3.1 ~ 22 words (mean ~25), as chat turns are: mostly short, a long tail.
        raw = self.rng.lognormal(mean=3.1, sigma=0.5, size=n)
        return np.clip(np.rint(raw), 3, 200).astype(np.int64)

    def messages(self, n: int) -> list[str]:
        lengths = self.lengths(n)
        ids = self.draw(int(lengths.sum()))
        words = self.words[ids]
        out: list[str] = []
        at = 0
        for length in lengths.tolist():
            out.append(" ".join(words[at : at + length]))
            at += length
        return out

    def query(self) -> str:
        return " ".join(self.words[self.draw(3)])


def message_batches(
    text: ZipfText, n: int, start: int, agents: int, batch: int, seq: dict[str, int]
) -> Iterator[list[StoredMessage]]:
    """Messages ``start`` .. ``start + n`` spread over ``agents`` agents, ``batch`` per call."""
    base = 1_700_000_000.0
    for at in range(start, start + n, batch):
        count = min(batch, start + n - at)
        contents = text.messages(count)
        owners = text.rng.integers(agents, size=count).tolist()
        out: list[StoredMessage] = []
        for i, (content, owner) in enumerate(zip(contents, owners, strict=True)):
            agent = f"agent-{owner:05d}"
            number = seq.get(agent, 0)
            seq[agent] = number + 1
            out.append(
                StoredMessage(
                    agent_id=agent,
                    message_id=f"m{at + i:09d}",
                    seq=number,
                    role="user" if number % 2 == 0 else "assistant",
                    content=content,
                    tokens=len(content.split()),
                    created_at=base + at + i,
                )
            )
        yield out


_DOMAINS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "cooking": (
        ("The chef", "My grandmother", "Our baker", "A food critic"),
        ("slowly simmered", "praised", "burned", "seasoned"),
        ("the tomato soup", "a sourdough loaf", "the lamb stew", "fresh pasta"),
    ),
    "football": (
        ("The striker", "Our goalkeeper", "The coach", "The referee"),
        ("scored against", "complained about", "trained for", "celebrated"),
        ("the derby match", "a penalty kick", "the league final", "extra time"),
    ),
    "finance": (
        ("The central bank", "Our accountant", "The hedge fund", "A retail investor"),
        ("raised", "audited", "hedged against", "sold"),
        ("interest rates", "the quarterly report", "currency risk", "government bonds"),
    ),
    "medicine": (
        ("The surgeon", "A nurse", "The pharmacist", "Our family doctor"),
        ("prescribed", "monitored", "operated on", "diagnosed"),
        ("antibiotics", "the patient's heart rate", "a torn ligament", "type 2 diabetes"),
    ),
    "software": (
        ("The backend team", "A junior developer", "Our CI pipeline", "The database admin"),
        ("refactored", "deployed", "debugged", "rolled back"),
        ("the payment service", "a memory leak", "the schema migration", "flaky unit tests"),
    ),
    "gardening": (
        ("My neighbour", "The gardener", "Our allotment group", "A botanist"),
        ("pruned", "watered", "planted", "composted"),
        ("the rose bushes", "tomato seedlings", "the apple tree", "autumn leaves"),
    ),
    "astronomy": (
        ("The telescope", "An astronomer", "The space agency", "Amateur stargazers"),
        ("observed", "photographed", "launched", "mapped"),
        ("a distant galaxy", "Jupiter's moons", "a new satellite", "the lunar eclipse"),
    ),
    "travel": (
        ("The tourists", "Our travel agent", "A backpacker", "The airline"),
        ("booked", "cancelled", "explored", "delayed"),
        ("a flight to Tokyo", "the hotel in Lisbon", "the mountain trail", "the night train"),
    ),
    "music": (
        ("The orchestra", "A jazz pianist", "The band", "Our choir"),
        ("rehearsed", "recorded", "improvised", "performed"),
        ("a Beethoven symphony", "the new album", "a blues ballad", "the Christmas concert"),
    ),
    "law": (
        ("The judge", "Our lawyer", "The jury", "The prosecutor"),
        ("dismissed", "appealed", "reviewed", "argued"),
        ("the contract dispute", "a patent claim", "the murder case", "the tenancy agreement"),
    ),
    "weather": (
        ("The forecast", "A meteorologist", "The storm", "Heavy rain"),
        ("warned about", "predicted", "flooded", "delayed"),
        ("the coastal towns", "a heatwave", "the weekend market", "morning commuters"),
    ),
    "education": (
        ("The teacher", "A student", "The university", "Our school board"),
        ("graded", "studied", "redesigned", "failed"),
        ("the maths exam", "a history essay", "the physics curriculum", "online lectures"),
    ),
    "cars": (
        ("The mechanic", "My brother", "The dealership", "An electric car maker"),
        ("repaired", "test drove", "recalled", "charged"),
        ("the brake pads", "a used hatchback", "the battery pack", "the gearbox"),
    ),
    "pets": (
        ("Our dog", "The vet", "My cat", "The rescue shelter"),
        ("chased", "vaccinated", "adopted", "groomed"),
        ("the neighbour's rabbit", "a stray kitten", "the old labrador", "a parrot"),
    ),
    "politics": (
        ("The parliament", "The senator", "Voters", "The opposition party"),
        ("debated", "passed", "rejected", "campaigned for"),
        ("the budget bill", "a climate law", "tax reform", "the election"),
    ),
    "art": (
        ("The painter", "A museum curator", "The sculptor", "Art students"),
        ("exhibited", "restored", "sketched", "auctioned"),
        ("an oil portrait", "a marble statue", "the Renaissance fresco", "abstract prints"),
    ),
    "construction": (
        ("The builders", "An architect", "The crane operator", "Our contractor"),
        ("poured", "designed", "demolished", "inspected"),
        ("the concrete foundation", "a glass tower", "the old warehouse", "the roof beams"),
    ),
    "fitness": (
        ("The personal trainer", "A marathon runner", "My gym buddy", "The yoga class"),
        ("stretched before", "ran", "lifted", "practised"),
        ("a ten kilometre race", "heavy deadlifts", "morning sun salutations", "interval sprints"),
    ),
    "chemistry": (
        ("The chemist", "A lab technician", "The reaction", "Our research group"),
        ("synthesised", "titrated", "catalysed", "purified"),
        ("a polymer sample", "the acid solution", "an organic compound", "rare earth metals"),
    ),
    "retail": (
        ("The shop manager", "A cashier", "Online shoppers", "The supermarket"),
        ("discounted", "restocked", "returned", "ordered"),
        ("winter jackets", "the checkout queue", "fresh vegetables", "a faulty blender"),
    ),
    "family": (
        ("My sister", "Our parents", "The twins", "Grandpa"),
        ("visited", "argued with", "surprised", "phoned"),
        ("the cousins at Christmas", "a birthday party", "the wedding guests", "the new baby"),
    ),
    "energy": (
        ("The wind farm", "A solar panel installer", "The power grid", "The utility company"),
        ("generated", "installed", "overloaded", "priced"),
        ("renewable electricity", "rooftop panels", "the evening demand peak", "heating bills"),
    ),
    "history": (
        ("The historian", "Roman legions", "A medieval king", "Archaeologists"),
        ("documented", "conquered", "taxed", "excavated"),
        ("the ancient city", "a Viking settlement", "the castle ruins", "the industrial revolution"),
    ),
    "security": (
        ("The security team", "A hacker", "The firewall", "Our password manager"),
        ("blocked", "phished", "encrypted", "audited"),
        ("the login server", "employee accounts", "customer data", "a ransomware attack"),
    ),
}


_CONTEXTS = (
    "last week",
    "this morning",
    "after a long delay",
    "despite the budget cuts",
    "for the first time",
    "before the deadline",
    "in front of a large crowd",
    "without telling anyone",
    "as everyone expected",
    "during the holidays",
    "on Tuesday",
    "with surprising results",
)


def centre_sentences(n: int, seed: int = 5) -> list[str]:
    """``n`` varied sentences over many topics, to embed as cluster centres."""
    rng = np.random.default_rng(seed)
    names = sorted(_DOMAINS)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        subjects, verbs, objects = _DOMAINS[names[len(out) % len(names)]]
        parts = (subjects, verbs, objects, _CONTEXTS)
        sentence = " ".join(p[rng.integers(len(p))] for p in parts) + "."
        if sentence not in seen:
            seen.add(sentence)
            out.append(sentence)
    return out
