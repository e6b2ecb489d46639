"""SQLite schema of the embedded store: the one source of truth.

The tantivy and FAISS indexes are derived from these tables and can be rebuilt from them at
any time; nothing lives only in an index.

Rows that feed a derived index (``messages``, ``archival``) use ``AUTOINCREMENT`` ids: the
indexes track progress with a high-water mark over those ids, which only works if an id is
never reused after a delete.
"""

from __future__ import annotations

import secrets
import sqlite3

from vcm.errors import StoreUnavailable

# 2: users and domains (principals), agents.user_id / agents.domain; shared facts keyed by the
# principal's holder id (vcm.store.principals). A version-1 database is upgraded on open.
SCHEMA_VERSION = 2

# Pragmas that hold per connection (journal_mode=WAL is persistent and set once at creation).
CONNECTION_PRAGMAS = (
    "PRAGMA foreign_keys = ON",
    # NORMAL is durable in WAL mode across application crashes; only an OS crash or power
    # loss can drop the last transactions, which the eviction protocol retries anyway.
    "PRAGMA synchronous = NORMAL",
    "PRAGMA temp_store = MEMORY",
)

DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS core_memory (
    agent_id   TEXT NOT NULL,
    block_id   TEXT NOT NULL,
    role       TEXT NOT NULL,
    content    TEXT NOT NULL,
    tokens     INTEGER NOT NULL,
    pinned     INTEGER NOT NULL DEFAULT 0,
    rev        TEXT NOT NULL,
    updated_at REAL NOT NULL,
    metadata   TEXT NOT NULL DEFAULT '{}',
    batch_id   INTEGER,                 -- only for the queue_head_summary row
    PRIMARY KEY (agent_id, block_id)
) WITHOUT ROWID;

-- What forget_message / forget_document named (kind 'message' or 'document'), written with the
-- removal; a snapshot restore puts none of them back. Ids only, never content.
CREATE TABLE IF NOT EXISTS tombstones (
    agent_id     TEXT NOT NULL,
    kind         TEXT NOT NULL,
    item_id      TEXT NOT NULL,
    forgotten_at REAL NOT NULL,
    PRIMARY KEY (agent_id, kind, item_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS idempotency (
    agent_id    TEXT NOT NULL,
    scope       TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    result      TEXT NOT NULL,
    created_at  REAL NOT NULL,
    expires_at  REAL,                   -- the hot path's records ('hot' scope); NULL: kept
    PRIMARY KEY (agent_id, scope, key)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS messages (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id   TEXT NOT NULL,
    message_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    role       TEXT NOT NULL,
    content    TEXT NOT NULL,
    tokens     INTEGER NOT NULL,
    created_at REAL NOT NULL,
    name       TEXT,
    metadata   TEXT NOT NULL DEFAULT '{}',
    expires_at REAL,
    n_terms    INTEGER NOT NULL DEFAULT 0,  -- analysed length, for BM25 over the unindexed tail
    UNIQUE (agent_id, message_id)
);
CREATE INDEX IF NOT EXISTS messages_agent_id ON messages (agent_id, id);
CREATE INDEX IF NOT EXISTS messages_agent_seq ON messages (agent_id, seq);
-- The distinct authors of an agent's messages, one seek each (recall's author anchoring); a
-- database created before it gets it on open.
CREATE INDEX IF NOT EXISTS messages_agent_name ON messages (agent_id, name) WHERE name IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_expiry ON messages (expires_at) WHERE expires_at IS NOT NULL;

-- Messages deleted after the text index saw them; drained by the index writer.
CREATE TABLE IF NOT EXISTS text_index_deletes (
    id INTEGER PRIMARY KEY
);

CREATE TABLE IF NOT EXISTS edges (
    kind       TEXT NOT NULL,
    src_coll   TEXT NOT NULL,
    src_key    TEXT NOT NULL,
    dst_coll   TEXT NOT NULL,
    dst_key    TEXT NOT NULL,
    agent_id   TEXT NOT NULL,
    created_at REAL NOT NULL,
    attributes TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (src_coll, src_key, kind, dst_coll, dst_key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS edges_dst ON edges (dst_coll, dst_key, kind);

CREATE TABLE IF NOT EXISTS archival (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id          TEXT NOT NULL,
    doc_id            TEXT NOT NULL,
    chunk_index       INTEGER NOT NULL,
    embedding_version TEXT NOT NULL,
    metric            TEXT NOT NULL,
    dimension         INTEGER NOT NULL,
    embedding         BLOB NOT NULL,    -- float32, little endian, as given (not normalised)
    text              TEXT NOT NULL,
    model_id          TEXT NOT NULL,
    char_start        INTEGER NOT NULL,
    char_end          INTEGER NOT NULL,
    source            TEXT NOT NULL,
    metadata          TEXT NOT NULL DEFAULT '{}',
    created_at        REAL NOT NULL,
    valid_until       REAL,
    UNIQUE (agent_id, doc_id, chunk_index, embedding_version)
);
CREATE INDEX IF NOT EXISTS archival_space ON archival (metric, dimension, embedding_version, id);

-- One row per vector space (metric, dimension, embedding_version) ever ingested.
CREATE TABLE IF NOT EXISTS vector_spaces (
    metric            TEXT NOT NULL,
    dimension         INTEGER NOT NULL,
    embedding_version TEXT NOT NULL,
    PRIMARY KEY (metric, embedding_version)
) WITHOUT ROWID;

-- Message embeddings for vector recall, one per (message, embedding_version); written by the
-- cold path after the message is spooled; rows of a message deleted since are ignored by search.
CREATE TABLE IF NOT EXISTS message_vectors (
    agent_id          TEXT NOT NULL,
    message_id        TEXT NOT NULL,
    embedding_version TEXT NOT NULL,
    dimension         INTEGER NOT NULL,
    embedding         BLOB NOT NULL,    -- float32, unit length
    PRIMARY KEY (agent_id, embedding_version, message_id)
) WITHOUT ROWID;

-- Every change to message_vectors in commit order (op 1: added, -1: removed; row_id is
-- messages.id), so each process's in-memory per-agent message vector index catches up by
-- reading only what changed (see vcm.store.embedded.messageindex).
CREATE TABLE IF NOT EXISTS message_vector_log (
    seq               INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id          TEXT NOT NULL,
    embedding_version TEXT NOT NULL,
    row_id            INTEGER NOT NULL,
    op                INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS message_vector_log_space ON message_vector_log (agent_id, embedding_version, seq);

CREATE TABLE IF NOT EXISTS events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL UNIQUE,
    agent_id        TEXT NOT NULL,
    kind            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    created_at      REAL NOT NULL,
    actor           TEXT NOT NULL,
    idempotency_key TEXT
);
CREATE INDEX IF NOT EXISTS events_agent_time ON events (agent_id, created_at, seq);
CREATE INDEX IF NOT EXISTS events_time ON events (created_at, seq);

CREATE TABLE IF NOT EXISTS batches (
    agent_id           TEXT NOT NULL,
    batch_id           INTEGER NOT NULL,
    summary_rev        TEXT NOT NULL,
    messages_committed INTEGER NOT NULL,
    event_id           TEXT NOT NULL,
    committed_at       REAL NOT NULL,
    PRIMARY KEY (agent_id, batch_id)
) WITHOUT ROWID;

-- Agents: the configuration their hot state is rebuilt from (see vcm.durable).
CREATE TABLE IF NOT EXISTS agents (
    agent_id     TEXT PRIMARY KEY,
    config       TEXT NOT NULL,         -- JSON, opaque to the store
    token_sha256 TEXT,
    id_floor     INTEGER NOT NULL DEFAULT 0,
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL,
    incarnation  TEXT,                  -- chosen at creation; NULL: made before incarnations
    user_id      TEXT,                  -- its user (principals), NULL: none
    domain       TEXT                   -- its domain (principals), NULL: none
) WITHOUT ROWID;
-- Users and domains (vcm.store.principals): their shared facts are keyed by 'kind:name' where an
-- agent's own are keyed by the agent id.
CREATE TABLE IF NOT EXISTS principals (
    kind        TEXT NOT NULL,          -- user | domain
    name        TEXT NOT NULL,
    incarnation TEXT NOT NULL,
    created_at  REAL NOT NULL,
    PRIMARY KEY (kind, name)
) WITHOUT ROWID;
-- Every summary commit_eviction installed (the current one is also core_memory's summary row).
CREATE TABLE IF NOT EXISTS summary_versions (
    agent_id   TEXT NOT NULL,
    batch_id   INTEGER NOT NULL,
    text       TEXT NOT NULL,
    tokens     INTEGER NOT NULL,
    rev        TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (agent_id, batch_id)
) WITHOUT ROWID;
-- Point-in-time agent states (compressed, checksummed by the service that wrote them).
CREATE TABLE IF NOT EXISTS agent_snapshots (
    agent_id    TEXT NOT NULL,
    snapshot_id TEXT NOT NULL,
    kind        TEXT NOT NULL,
    reason      TEXT NOT NULL,
    payload     BLOB NOT NULL,
    sha256      TEXT NOT NULL,
    size        INTEGER NOT NULL,
    created_at  REAL NOT NULL,
    expires_at  REAL,
    PRIMARY KEY (agent_id, snapshot_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS agent_snapshots_expiry ON agent_snapshots (expires_at) WHERE expires_at IS NOT NULL;
-- Facts an agent knows (vcm.facts): typed, scoped, with evidence, status and expiry.
CREATE TABLE IF NOT EXISTS facts (
    agent_id      TEXT NOT NULL,
    fact_id       TEXT NOT NULL,
    scope         TEXT NOT NULL,
    type          TEXT NOT NULL,
    key           TEXT,
    value         TEXT NOT NULL,
    category      TEXT NOT NULL DEFAULT '',
    tags          TEXT NOT NULL DEFAULT '[]',
    importance    REAL NOT NULL,
    confidence    REAL NOT NULL,
    evidence      TEXT NOT NULL DEFAULT '[]',
    status        TEXT NOT NULL,
    conflict_with TEXT NOT NULL DEFAULT '[]',
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    last_used     REAL NOT NULL DEFAULT 0,
    access_count  INTEGER NOT NULL DEFAULT 0,
    expires_at    REAL,
    version       INTEGER NOT NULL,
    embedding     BLOB,                 -- float32, as given
    lifetime_s    REAL,                 -- what a use gives it again (NULL: fixed or no expiry)
    duplicate_of  TEXT,                 -- an UNSURE dedup candidate: the fact it may duplicate
    PRIMARY KEY (agent_id, fact_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS facts_infokey ON facts (agent_id, scope, type, key);
CREATE INDEX IF NOT EXISTS facts_updated ON facts (agent_id, updated_at);
CREATE INDEX IF NOT EXISTS facts_expiry ON facts (expires_at) WHERE expires_at IS NOT NULL;
-- Working-memory key/values with a TTL (vcm.facts state).
CREATE TABLE IF NOT EXISTS state (
    agent_id   TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,           -- JSON
    rev        TEXT NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,
    PRIMARY KEY (agent_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS state_expiry ON state (expires_at) WHERE expires_at IS NOT NULL;
-- Server-side snapshots of ranked result lists, so cursors stay stable while data arrives.
CREATE TABLE IF NOT EXISTS cursors (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    agent_id    TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    items       TEXT NOT NULL,          -- JSON [[row id, score], ...] in rank order
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS cursors_expiry ON cursors (expires_at);
"""

# meta keys
META_SCHEMA_VERSION = "schema_version"
META_CURSOR_SECRET = "cursor_secret"
META_REV_SEQ = "rev_seq"
META_TEXT_HWM = "text_hwm"  # highest messages.id the tantivy index is known to contain
META_TEXT_GEN = "text_gen"  # bumped by every index commit, so readers know when to reload
META_TEXT_DOCS = "text_docs"  # live messages, for BM25 statistics of the unindexed tail
META_TEXT_TERMS = "text_terms"  # sum of their analysed lengths
# The text generation whose commit last dropped deleted messages from the index: a searcher loaded
# at that generation or later holds no deleted row beyond those still queued in text_index_deletes.
# An older vcm sharing the file drains deletes without setting it: a query's stale searcher may
# then keep a deleted row in its ranking until reloaded (a short page, never the row: hydration
# reads SQLite), so the schema version is not bumped for it.
META_TEXT_DELETE_GEN = "text_delete_gen"


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create tables and seed meta rows; safe to run from several processes at once."""
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _statements(DDL):
            conn.execute(statement)
        _add_missing_columns(conn)
        for statement in ADDED_INDEXES:
            conn.execute(statement)
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (META_SCHEMA_VERSION,)).fetchone()
        if row is not None and int(row[0]) > SCHEMA_VERSION:
            raise StoreUnavailable(f"database schema {row[0]} is newer than this vcm ({SCHEMA_VERSION}); upgrade vcm")
        seeds = {
            META_SCHEMA_VERSION: str(SCHEMA_VERSION),
            META_CURSOR_SECRET: secrets.token_hex(32),
            META_REV_SEQ: "0",
            META_TEXT_HWM: "0",
            META_TEXT_GEN: "0",
            META_TEXT_DOCS: "0",
            META_TEXT_TERMS: "0",
            META_TEXT_DELETE_GEN: "0",
        }
        conn.executemany("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", list(seeds.items()))
        # An older database was upgraded above (ADDED_COLUMNS, new tables): it says so now, and an
        # older vcm, which would not know its shared memory, refuses it from here on.
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = ? AND CAST(value AS INTEGER) < ?",
            (str(SCHEMA_VERSION), META_SCHEMA_VERSION, SCHEMA_VERSION),
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


# Columns added after a table first shipped: (table, column, declaration). A database an earlier
# vcm created gets them on open (ALTER TABLE ... ADD COLUMN keeps every row, value NULL).
ADDED_COLUMNS = (
    ("facts", "lifetime_s", "REAL"),
    ("facts", "duplicate_of", "TEXT"),
    ("idempotency", "expires_at", "REAL"),
    ("agents", "incarnation", "TEXT"),
    ("agents", "user_id", "TEXT"),
    ("agents", "domain", "TEXT"),
)
# Indexes over added columns, created once the columns exist.
ADDED_INDEXES = (
    "CREATE INDEX IF NOT EXISTS agents_user ON agents (user_id) WHERE user_id IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS agents_domain ON agents (domain) WHERE domain IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS idempotency_expiry ON idempotency (expires_at) WHERE expires_at IS NOT NULL",
    # Every column a fact search or dedup filters on or reads, all but the embedding and the
    # evidence: their reads of an agent's facts, newest first, never visit the wide rows (1 000
    # facts: 5.0 -> 1.5 ms); the vectors come from a cache (vcm.store.embedded.factvectors).
    "CREATE INDEX IF NOT EXISTS facts_light ON facts (agent_id, updated_at, fact_id, scope, type, key, status, "
    "category, importance, confidence, created_at, duplicate_of, version, value, tags)",
    # Listings by type (the prompt's working set and sticky facts, on every build) seek their
    # types instead of filtering all of an agent's facts (1 000 facts, none of those types:
    # 4 -> 0.1 ms each).
    "CREATE INDEX IF NOT EXISTS facts_type ON facts (agent_id, type, status, updated_at)",
)


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    for table, column, decl in ADDED_COLUMNS:
        present = {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")


def _statements(script: str) -> list[str]:
    # executescript() would COMMIT our BEGIN IMMEDIATE first; split so DDL stays in one tx.
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    return statements
