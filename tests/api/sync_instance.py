"""One client instance of an agent in its own process, driven by JSON lines on stdin (one reply a
line on stdout): what tests/api/test_sync_processes.py and scripts/bench_sync.py run twice to
have two instances on two "machines".

    python -m tests.api.sync_instance URL TOKEN

Commands (``name`` picks one of the process's clients, opened with ``open``)::

    {"op": "open", "name": "lww", "config": {"conflict": "last_write_wins", "write": "back", ...}}
    {"op": "get", "name": ..., "key": K}              -> the state entry, or {"error": {...}}
    {"op": "set", "name": ..., "key": K, "value": V}  -> the reply, or {"error": {...}}
    {"op": "sync", "name": ...}                       -> the sync result, or {"error": {...}}
    {"op": "append", "name": ..., "key": K, "n": N, "tag": T}
        N read-modify-writes adding T-0 .. T-(N-1) to the list at K; a refused write (reject) is
        tried again on a fresh read. -> {"acked": [[token, rev], ...], "refused": n}
    {"op": "seen", "name": ..., "key": K}              -> versions of K the change feed brought
    {"op": "metrics", "name": ...}
    {"op": "exit"}

``"merge": "union"`` in a config merges two lists into their sorted union.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from vcm import CacheConfig, RevConflict, VcmClient, VcmError

AGENT = "shared"


def union(local: Any, remote: Any) -> Any:
    if local is None or remote is None:
        return local if remote is None else remote
    return sorted(set(local) | set(remote))


class Instance:
    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.clients: dict[str, VcmClient] = {}
        self.seen: dict[str, list[tuple[str | None, float]]] = {}
        self.lock = threading.Lock()

    def open(self, name: str, config: dict[str, Any]) -> Any:
        if config.get("merge") == "union":
            config["merge"] = union
        client = VcmClient(self.url, self.token, cache=CacheConfig(**config))

        def note(agent_id: str, change: dict[str, Any]) -> None:
            with self.lock:
                self.seen.setdefault(f"{name}/{change['key']}", []).append((change.get("version"), time.time()))

        client.on_change(note)
        self.clients[name] = client
        return {"instance_id": client.instance_id}

    def append(self, client: VcmClient, key: str, n: int, tag: str) -> Any:
        acked: list[list[Any]] = []
        refused = 0
        for i in range(n):
            token = f"{tag}-{i}"
            for _ in range(50):
                current = client.state(AGENT, key)["value"]
                try:
                    reply = client.set_state(AGENT, key, sorted({*current, token}))
                except RevConflict:
                    refused += 1
                    continue
                acked.append([token, reply["_rev"]])
                break
        return {"acked": acked, "refused": refused}

    def run(self, cmd: dict[str, Any]) -> Any:
        op = cmd["op"]
        if op == "open":
            return self.open(cmd["name"], dict(cmd.get("config") or {}))
        client = self.clients[cmd["name"]]
        if op == "get":
            return client.state(AGENT, cmd["key"])
        if op == "set":
            return client.set_state(AGENT, cmd["key"], cmd["value"])
        if op == "sync":
            return client.sync()
        if op == "append":
            return self.append(client, cmd["key"], int(cmd["n"]), cmd["tag"])
        if op == "seen":
            with self.lock:
                return self.seen.get(f"{cmd['name']}/{cmd['key']}", [])
        if op == "metrics":
            return client.sync_metrics()
        raise ValueError(f"unknown op {op}")


def main() -> int:
    instance = Instance(sys.argv[1], sys.argv[2])
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "exit":
            for client in instance.clients.values():
                client.close()
            print(json.dumps({"ok": True}), flush=True)
            return 0
        try:
            reply = {"ok": instance.run(cmd)}
        except VcmError as exc:
            reply = {"error": exc.to_dict()}
        print(json.dumps(reply, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
