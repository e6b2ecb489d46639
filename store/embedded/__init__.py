"""The embedded store adapter: SQLite + tantivy + FAISS, no services (see ``adapter``)."""

from vcm.store.embedded.adapter import EmbeddedStore

__all__ = ["EmbeddedStore"]
