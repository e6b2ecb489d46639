"""The OpenAPI schema the TypeScript client (clients/typescript) is typed from.

``openapi()`` is the document ``vcm serve`` answers at ``/openapi.json``, built from the app in
process (the schema needs no Redis, store content or model: a lazy Redis client that never
connects and an empty data directory). The client keeps it as ``openapi.json`` and generates
``src/schema.ts`` from it with openapi-typescript; the tests fail when either drifts. Regenerate
both after changing a route or a body with::

    .venv/bin/python -m tests.clients.schema
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "typescript"
SNAPSHOT = CLIENT / "openapi.json"


def openapi() -> dict[str, Any]:
    import redis

    from vcm.api.app import create_app
    from vcm.dispatch import RecordingDispatcher
    from vcm.hotpath.state import HotState
    from vcm.service import MemoryService
    from vcm.settings import load_settings
    from vcm.store import open_store

    # Defaults only (no VCM_* environment), so that the document does not depend on who builds it.
    settings = load_settings({"api": {"admin_token": "schema-" + "0" * 32}}, environ={})
    with tempfile.TemporaryDirectory() as data:
        store = open_store(f"{data}/vcm.db")
        try:
            # Port 1: nothing listens there, and building the schema sends no command.
            hot = HotState(redis.Redis.from_url("redis://127.0.0.1:1/0", decode_responses=True), settings)
            service = MemoryService(hot, store, RecordingDispatcher(), embed=lambda texts: [])
            return create_app(service, None, settings=settings).openapi()
        finally:
            store.close()


def render(document: dict[str, Any]) -> str:
    """The snapshot's text: stable key order, so a diff shows what changed."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    SNAPSHOT.write_text(render(openapi()))
    npm = ["npm", "--prefix", str(CLIENT)]
    if not (CLIENT / "node_modules").is_dir():
        subprocess.run([*npm, "ci", "--no-audit", "--no-fund"], check=True)
    subprocess.run([*npm, "run", "--silent", "generate"], check=True)
    print(f"wrote {SNAPSHOT.relative_to(ROOT)} and clients/typescript/src/schema.ts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
