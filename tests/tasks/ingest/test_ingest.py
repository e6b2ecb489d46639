"""Archival ingestion (vcm.tasks.ingest.documents) into a real embedded store with the real bundled model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from vcm.errors import ConfigError, IdempotencyMismatch, PolicyRefused, ValidationError
from vcm.settings import Settings, load_settings
from vcm.store import open_store
from vcm.store.audit_names import EventKind
from vcm.store.port import MemoryStore
from vcm.tasks.embedding import Embedder, get_embedder
from vcm.tasks.ingest.checks import decode_document, document_id, json_text
from vcm.tasks.ingest.documents import DocumentIngester, ingest_document
from vcm.tasks.ingest.files import PathOutcome, discover, ingest_paths

AGENT = "agent-1"
PAGE = "Larry Page grew up in Michigan and studied computer science at Stanford. He founded it in 1998."
GARDEN = (
    "Tomatoes need full sun and regular watering. Basil grows well next to them. "
    "Prune the side shoots every week.\nHarvest when the fruit is deep red."
)


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return get_embedder(load_settings(environ={}).embedding)


@pytest.fixture
def cfg() -> Settings:
    return load_settings({"chunking": {"target_tokens": 16}}, environ={})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    s = open_store(str(tmp_path / "vcm.db"))
    try:
        yield s
    finally:
        s.close()


def _archival_count(store: MemoryStore) -> int:
    return int(store.stats(AGENT)["archival_chunks"])


# --- one document -------------------------------------------------------------------------


def test_late_ingest_writes_chunks_with_provenance(store: MemoryStore, embedder: Embedder, cfg: Settings) -> None:
    result = ingest_document(
        store, embedder, AGENT, "bio", PAGE, source="wiki/page.txt", metadata={"topic": "people"}, settings=cfg
    )
    version = f"{embedder.model_id}:late:v1"
    assert (result.mode, result.embedding_version, result.written, result.skipped) == ("late", version, 2, False)
    assert result.windows == 1 and result.tokens > 0
    chunks = store.get_archival(AGENT, "bio")
    assert [c.chunk_index for c in chunks] == [0, 1]
    for c in chunks:
        assert PAGE[c.char_start : c.char_end] == c.text
        assert (c.metric, c.model_id, c.embedding_version, c.source) == (
            "cosine",
            embedder.model_id,
            version,
            "wiki/page.txt",
        )
        assert c.dimension == embedder.dimension
        assert c.metadata["topic"] == "people"
        assert c.metadata["vcm"]["mode"] == "late"
    assert chunks[1].text == "He founded it in 1998."
    # The stored vectors are searchable: the context-bearing pronoun chunk answers its question.
    query = embedder.encode(["When did Larry Page found it?"])[0]
    page = store.search_archival(AGENT, query.tolist(), k=2, embedding_version=version)
    assert {h.chunk.chunk_index for h in page.items} == {0, 1}


def test_reingest_is_idempotent_and_skips_the_model(store: MemoryStore, embedder: Embedder, cfg: Settings) -> None:
    first = ingest_document(store, embedder, AGENT, "bio", PAGE, settings=cfg)
    again = ingest_document(store, embedder, AGENT, "bio", PAGE, settings=cfg)
    assert first.written == 2
    assert (again.written, again.skipped, again.chunks) == (0, True, 2)
    assert _archival_count(store) == 2
    # Another embedding version is a separate set of rows, and is itself idempotent.
    other = ingest_document(store, embedder, AGENT, "bio", PAGE, settings=cfg, embedding_version="exp:late:v2")
    assert other.written == 2
    assert (
        ingest_document(store, embedder, AGENT, "bio", PAGE, settings=cfg, embedding_version="exp:late:v2").written == 0
    )
    assert _archival_count(store) == 4


def test_changed_chunking_under_the_same_version_is_refused(
    store: MemoryStore, embedder: Embedder, cfg: Settings
) -> None:
    ingest_document(store, embedder, AGENT, "bio", PAGE, settings=cfg)
    finer = load_settings({"chunking": {"target_tokens": 8}}, environ={})
    with pytest.raises(IdempotencyMismatch) as info:
        ingest_document(store, embedder, AGENT, "bio", PAGE, settings=finer)
    assert "version_suffix" in info.value.message
    assert _archival_count(store) == 2
    bumped = load_settings({"chunking": {"target_tokens": 8}, "ingest": {"version_suffix": "v2"}}, environ={})
    assert ingest_document(store, embedder, AGENT, "bio", PAGE, settings=bumped).written > 2


def test_naive_mode_is_refused_with_its_audit_row_and_alarm(
    store: MemoryStore, embedder: Embedder, cfg: Settings
) -> None:
    before = (
        REGISTRY.get_sample_value("vcm_compliance_violations_total", {"rule": "late_chunking", "outcome": "blocked"})
        or 0.0
    )
    with pytest.raises(PolicyRefused) as info:
        ingest_document(store, embedder, AGENT, "bio", PAGE, mode="naive", settings=cfg, source="x.txt")
    assert "allow_naive" in info.value.message
    assert _archival_count(store) == 0
    (row,) = store.query_events(AGENT, [EventKind.COMPLIANCE_VIOLATION]).items
    assert row.payload["blocked"] is True and row.payload["doc_id"] == "bio"
    after = REGISTRY.get_sample_value(
        "vcm_compliance_violations_total", {"rule": "late_chunking", "outcome": "blocked"}
    )
    assert after == before + 1


def test_naive_mode_records_a_compliance_violation_once(store: MemoryStore, embedder: Embedder, cfg: Settings) -> None:
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"allow_naive": True})})
    result = ingest_document(store, embedder, AGENT, "bio", PAGE, mode="naive", settings=cfg, source="x.txt")
    assert result.embedding_version == f"{embedder.model_id}:naive:v1"
    assert result.written == 2
    ingest_document(store, embedder, AGENT, "bio", PAGE, mode="naive", settings=cfg, source="x.txt")
    events = store.query_events(AGENT, [EventKind.COMPLIANCE_VIOLATION]).items
    assert len(events) == 1
    assert events[0].payload["doc_id"] == "bio" and events[0].payload["mode"] == "naive"
    # Late ingestion records none.
    ingest_document(store, embedder, AGENT, "garden", GARDEN, settings=cfg)
    assert len(store.query_events(AGENT, [EventKind.COMPLIANCE_VIOLATION]).items) == 1


def test_bound_ingester_returns_a_json_ready_result(store: MemoryStore, embedder: Embedder, cfg: Settings) -> None:
    ingest = DocumentIngester(store, embedder, cfg)
    out = ingest(AGENT, "bio", PAGE, source="api", metadata={"k": "v"})
    assert json.loads(json.dumps(out)) == out
    assert (out["doc_id"], out["written"], out["mode"]) == ("bio", 2, "late")
    assert ingest(AGENT, "bio", PAGE, source="api", metadata={"k": "v"})["written"] == 0


@pytest.mark.parametrize(
    ("text", "overrides", "needle"),
    [
        ("", {}, "empty"),
        ("  \n\t  ", {}, "empty"),
        ("abc\x00def", {}, "NUL"),
        ("bad \udc80 surrogate", {}, "surrogate"),
        (PAGE, {"ingest": {"max_document_bytes": 10}}, "max_document_bytes"),
        (42, {}, "string"),
    ],
)
def test_bad_text_is_refused_and_writes_nothing(
    store: MemoryStore, embedder: Embedder, text: Any, overrides: dict[str, Any], needle: str
) -> None:
    settings = load_settings(overrides, environ={})
    with pytest.raises(ValidationError) as info:
        ingest_document(store, embedder, AGENT, "doc", text, settings=settings)
    assert info.value.code == "VALIDATION_ERROR" and needle in info.value.message
    assert _archival_count(store) == 0


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"doc_id": ""}, "doc_id"),
        ({"doc_id": "x" * 600}, "doc_id"),
        ({"agent_id": " "}, "agent_id"),
        ({"mode": "sentence"}, "mode"),
        ({"metadata": {"vcm": 1}}, "reserved"),
        ({"metadata": {"when": object()}}, "JSON"),
        ({"metadata": {"x": float("nan")}}, "JSON"),
        ({"valid_until": float("inf")}, "valid_until"),
    ],
)
def test_bad_arguments_are_refused(
    store: MemoryStore, embedder: Embedder, cfg: Settings, kwargs: dict[str, Any], needle: str
) -> None:
    args: dict[str, Any] = {"agent_id": AGENT, "doc_id": "doc", **kwargs}
    with pytest.raises(ValidationError) as info:
        ingest_document(store, embedder, args.pop("agent_id"), args.pop("doc_id"), PAGE, settings=cfg, **args)
    assert needle in info.value.message
    assert store.stats()["archival_chunks"] == 0


def test_chunks_over_the_model_window_are_a_config_error(store: MemoryStore, embedder: Embedder) -> None:
    with pytest.raises(ConfigError):
        ingest_document(
            store,
            embedder,
            AGENT,
            "doc",
            PAGE,
            settings=load_settings({"chunking": {"target_tokens": 400}}, environ={}),
        )


# --- files and folders --------------------------------------------------------------------


def _tree(root: Path) -> Path:
    docs = root / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / ".hidden").mkdir()
    (docs / "a.md").write_text("# Notes\n" + PAGE, encoding="utf-8")
    (docs / "sub" / "b.txt").write_text(GARDEN, encoding="utf-8")
    (docs / "sub" / "bom.txt").write_bytes("\ufeffUTF-8 with a byte order mark is fine.".encode())
    (docs / "sub" / "latin1.txt").write_bytes("Caf\xe9 cr\xe8me".encode("latin-1"))
    (docs / "empty.txt").write_text("   \n", encoding="utf-8")
    (docs / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (docs / "code.py").write_text("print('not picked up by the folder walk')\n", encoding="utf-8")
    (docs / ".hidden" / "secret.md").write_text("hidden", encoding="utf-8")
    return docs


def test_ingest_paths_reports_each_file_and_continues_past_bad_ones(
    tmp_path: Path, store: MemoryStore, embedder: Embedder, cfg: Settings
) -> None:
    docs = _tree(tmp_path)
    seen: list[tuple[str, int, int]] = []

    def progress(outcome: PathOutcome, done: int, total: int) -> None:
        seen.append((outcome.status, done, total))

    report = ingest_paths(store, embedder, AGENT, [docs, tmp_path / "missing.md"], settings=cfg, progress=progress)
    by_name = {Path(o.path).name: o for o in report.outcomes}
    assert set(by_name) == {"a.md", "b.txt", "bom.txt", "latin1.txt", "empty.txt", "binary.txt", "missing.md"}
    assert {n for n, o in by_name.items() if o.status == "ingested"} == {"a.md", "b.txt", "bom.txt"}
    for name, needle in [("latin1.txt", "not UTF-8"), ("empty.txt", "empty"), ("binary.txt", "binary")]:
        error = by_name[name].error
        assert error is not None and error["code"] == "VALIDATION_ERROR" and needle in error["message"]
    assert by_name["missing.md"].error is not None and "does not exist" in by_name["missing.md"].error["message"]
    assert [d for _, d, _ in seen] == list(range(1, 8)) and {t for _, _, t in seen} == {7}
    summary = report.to_dict()
    assert (summary["ingested"], summary["unchanged"], summary["failed"]) == (3, 0, 4)
    assert summary["chunks_written"] == _archival_count(store) > 3
    # Provenance: the doc id is the relative path plus the content hash; source is the path.
    a = by_name["a.md"]
    assert a.doc_id is not None and a.doc_id.startswith("docs/a.md@")
    stored = store.get_archival(AGENT, a.doc_id)
    assert stored[0].source == "docs/a.md" and stored[0].metadata["path"] == "docs/a.md"
    assert stored[0].text.startswith("# Notes")
    bom = store.get_archival(AGENT, by_name["bom.txt"].doc_id or "")
    assert bom[0].text.startswith("UTF-8")  # the BOM is not part of the text


def test_ingest_paths_skips_unchanged_files_and_ingests_changed_ones(
    tmp_path: Path, store: MemoryStore, embedder: Embedder, cfg: Settings
) -> None:
    docs = _tree(tmp_path)
    ingest_paths(store, embedder, AGENT, [docs], settings=cfg)
    before = _archival_count(store)
    again = ingest_paths(store, embedder, AGENT, [docs], settings=cfg)
    assert again.count("unchanged") == 3 and again.count("ingested") == 0 and again.chunks_written == 0
    assert _archival_count(store) == before
    (docs / "sub" / "b.txt").write_text(GARDEN + " Compost in autumn.", encoding="utf-8")
    third = ingest_paths(store, embedder, AGENT, [docs], settings=cfg)
    assert [Path(o.path).name for o in third.outcomes if o.status == "ingested"] == ["b.txt"]
    assert _archival_count(store) > before


def test_ingest_paths_batches_documents_smaller_than_the_folder(
    tmp_path: Path, store: MemoryStore, embedder: Embedder
) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(5):
        (folder / f"n{i}.txt").write_text(f"Note {i}. " + GARDEN, encoding="utf-8")
    settings = load_settings(
        {"ingest": {"batch_documents": 2, "allow_naive": True}, "chunking": {"target_tokens": 16}}, environ={}
    )
    report = ingest_paths(store, embedder, AGENT, [folder], settings=settings, mode="naive")
    assert report.count("ingested") == 5
    assert len(store.query_events(AGENT, [EventKind.COMPLIANCE_VIOLATION]).items) == 5


def test_json_files_contribute_their_string_values(
    tmp_path: Path, store: MemoryStore, embedder: Embedder, cfg: Settings
) -> None:
    path = tmp_path / "faq.json"
    path.write_text(json.dumps({"q": "Who founded it?", "a": {"text": PAGE, "n": 3}}), encoding="utf-8")
    report = ingest_paths(store, embedder, AGENT, [path], settings=cfg)
    [outcome] = report.outcomes
    assert outcome.status == "ingested" and outcome.doc_id is not None
    chunks = store.get_archival(AGENT, outcome.doc_id)
    assert chunks[0].text.startswith("Who founded it?") and chunks[0].metadata["format"] == "json"


def test_a_json_file_nested_too_deep_fails_alone(
    tmp_path: Path, store: MemoryStore, embedder: Embedder, cfg: Settings
) -> None:
    """json's decoder raised RecursionError past about a thousand levels: not a coded error, so
    the whole batch failed and the files beside it went unreported."""
    (tmp_path / "deep.json").write_text("[" * 5000 + '"x"' + "]" * 5000, encoding="utf-8")
    (tmp_path / "nested.json").write_text("[" * 900 + json.dumps({"a": GARDEN}) + "]" * 900, encoding="utf-8")
    (tmp_path / "notes.txt").write_text(GARDEN, encoding="utf-8")
    files = [tmp_path / n for n in ("deep.json", "nested.json", "notes.txt")]
    report = ingest_paths(store, embedder, AGENT, files, settings=cfg)
    by_name = {Path(o.path).name: o for o in report.outcomes}
    assert {n: o.status for n, o in by_name.items()} == {
        "deep.json": "failed", "nested.json": "ingested", "notes.txt": "ingested"
    }  # fmt: skip
    error = by_name["deep.json"].error
    assert error is not None and error["code"] == "VALIDATION_ERROR" and "nested too deeply" in error["message"]


# --- pure helpers ---------------------------------------------------------------------------


def test_helpers() -> None:
    assert document_id("docs/a.md", b"x") == document_id("docs/a.md", b"x") != document_id("docs/a.md", b"y")
    assert len(document_id("p" * 1000, b"x")) <= 512
    assert decode_document("f", "é".encode()) == "é"
    with pytest.raises(ValidationError):
        decode_document("f", b"\xff\xfe")
    assert json_text("f", '["a", {"b": "c", "d": [1, "e"]}]') == "a\nc\ne"
    with pytest.raises(ValidationError):
        json_text("f", "{not json")


def test_discover_orders_and_filters(tmp_path: Path) -> None:
    docs = _tree(tmp_path)
    found = [rel for _, rel in discover([docs, docs / "code.py", docs / "a.md"], [".md", "txt"])]
    assert found == [
        "docs/a.md",
        "docs/binary.txt",
        "docs/empty.txt",
        "docs/sub/b.txt",
        "docs/sub/bom.txt",
        "docs/sub/latin1.txt",
        "code.py",  # named explicitly: taken whatever its ending, named by itself; a.md only once
    ]
    rooted = [rel for _, rel in discover([docs / "sub"], [".txt"], root=docs)]
    assert rooted == ["sub/b.txt", "sub/bom.txt", "sub/latin1.txt"]


def test_ingest_paths_refuses_special_files_and_links_out_of_the_root(
    tmp_path: Path, store: MemoryStore, embedder: Embedder, cfg: Settings
) -> None:
    import os

    root = tmp_path / "root"
    root.mkdir()
    (root / "ok.md").write_text("# Fine\n\nA note inside the root.")
    outside = tmp_path / "secret.md"
    outside.write_text("# Secret\n\nNot for the agent.")
    (root / "link.md").symlink_to(outside)
    os.mkfifo(root / "pipe.md")  # reading a FIFO would block forever
    report = ingest_paths(store, embedder, AGENT, [root / "ok.md", root / "link.md", root / "pipe.md"],
                          root=root, settings=cfg)  # fmt: skip
    by_name = {Path(o.path).name: o for o in report.outcomes}
    assert by_name["ok.md"].status == "ingested"
    assert by_name["link.md"].error is not None and "outside the allowed root" in by_name["link.md"].error["message"]
    assert by_name["pipe.md"].error is not None and "not a regular file" in by_name["pipe.md"].error["message"]
    assert _archival_count(store) == len(store.get_archival(AGENT, by_name["ok.md"].doc_id or ""))
    # Without --root, a link is read like any file the user may read (documented in `vcm ingest --help`).
    loose = ingest_paths(store, embedder, AGENT, [root / "link.md"], settings=cfg)
    assert loose.outcomes[0].status == "ingested"


def test_progress_hears_of_the_store_write_before_it_and_can_stop_it(
    store: MemoryStore, embedder: Embedder, cfg: Settings
) -> None:
    heard: list[tuple[int, int]] = []

    class Stop(Exception):
        pass

    def progress(done: int, total: int) -> None:
        heard.append((done, total))
        if len(heard) == 2:  # embedded, not yet stored: the job runner's last check
            raise Stop

    with pytest.raises(Stop):
        ingest_document(store, embedder, AGENT, "bio", PAGE, settings=cfg, progress=progress)
    assert heard[0] == heard[1] and heard[0][0] == 0 and heard[0][1] > 0
    assert _archival_count(store) == 0
    heard.clear()
    ingest_document(store, embedder, AGENT, "bio", PAGE, settings=cfg, progress=lambda d, t: heard.append((d, t)))
    assert heard == [(0, heard[0][1]), (0, heard[0][1]), (heard[0][1], heard[0][1])]
