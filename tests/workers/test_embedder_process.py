"""The embedding model in a child process (embedded mode, vcm.workers.embedder_process): the same
vectors as in-process, a lower CPU priority, a crashed child replaced, a child that goes with its
parent; and `vcm serve` in embedded mode really embeds there. The real model throughout."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from vcm.settings.memory import ChunkingSettings, EmbeddingSettings
from vcm.tasks.embedding import Embedder
from vcm.tasks.embedding_choice import batch_embedder
from vcm.tasks.ingest.late_chunking import LateChunker
from vcm.workers.embedder_process import NICE, EmbedderProcess

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["Caroline moved to Porto last spring.", "The locker code is 4417.", "He said it was hers."]
DOCUMENT = " ".join(f"Sentence {i} tells of the harbour, the boats and who sailed them." for i in range(120))


@pytest.fixture(scope="module")
def local() -> Embedder:
    # What the cold path would run in this process: the child chooses by batch_backend as well.
    return batch_embedder(EmbeddingSettings())


@pytest.fixture(scope="module")
def remote() -> Iterator[EmbedderProcess]:
    process = EmbedderProcess(EmbeddingSettings())
    yield process
    process.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_the_child_gives_the_vectors_of_the_model_in_process(local: Embedder, remote: EmbedderProcess) -> None:
    assert (remote.backend, remote.model_id, remote.dimension, remote.max_tokens, remote.batch_size) == (
        local.backend,
        local.model_id,
        local.dimension,
        local.max_tokens,
        local.batch_size,
    )
    assert np.allclose(remote.encode(TEXTS), local.encode(TEXTS), atol=1e-5)
    assert remote.encode([]).shape == (0, local.dimension)
    # The tokenizer runs in the child too (a long text's tokens come back as arrays, not lists
    # built while holding the parent's GIL).
    kwargs = {"add_special_tokens": False, "return_offsets_mapping": True}
    theirs, mine = remote.tokenizer(DOCUMENT, **kwargs), local.tokenizer(DOCUMENT, **kwargs)
    assert theirs["input_ids"].tolist() == list(mine["input_ids"])
    assert [tuple(o) for o in theirs["offset_mapping"].tolist()] == [tuple(o) for o in mine["offset_mapping"]]
    assert remote.tokenizer.pad_token_id == local.tokenizer.pad_token_id
    # Late chunking: planned with the child's tokenizer, its model windows run in the child.
    near, far = LateChunker(local), LateChunker(remote)
    plans = [near.plan(DOCUMENT, ChunkingSettings()), near.plan(TEXTS[0], ChunkingSettings())]
    assert far.plan(DOCUMENT, ChunkingSettings()) == plans[0]
    assert len(plans[0].windows) > 1  # several model windows, pooled across
    for mine, theirs in zip(near.embed_late(plans), far.embed_late(plans), strict=True):
        assert mine.shape == theirs.shape and np.allclose(mine, theirs, atol=1e-5)


def test_the_child_runs_below_the_parents_priority(remote: EmbedderProcess) -> None:
    assert remote.pid is not None
    assert os.getpriority(os.PRIO_PROCESS, remote.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICE)


def test_a_child_that_died_is_replaced_on_the_next_call(remote: EmbedderProcess) -> None:
    pid = remote.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert _wait_gone(pid, 10)
    with pytest.raises(RuntimeError, match="died"):  # the caller's task retries
        remote.encode(TEXTS)
    assert remote.encode(TEXTS).shape == (3, remote.dimension)
    assert remote.pid not in (None, pid)


def test_a_model_that_cannot_load_is_reported() -> None:
    with pytest.raises(RuntimeError, match="could not load the model"):
        EmbedderProcess(EmbeddingSettings(model="/nonexistent/model"))


def test_the_child_goes_with_its_parent() -> None:
    script = (
        "import time\n"
        "from vcm.settings.memory import EmbeddingSettings\n"
        "from vcm.workers.embedder_process import EmbedderProcess\n"
        "p = EmbedderProcess(EmbeddingSettings())\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)  # no cleanup runs: the child sees its pipe close
        parent.wait(10)
        assert _wait_gone(child, 30)
    finally:
        parent.kill()


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.slow
def test_embedded_serve_embeds_in_its_child_process(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    admin = "test-admin-token-0123456789"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    env.update(HF_HUB_OFFLINE="1", VCM_STORE_URL=f"sqlite:///{tmp_path}/vcm.db", VCM_API__ADMIN_TOKEN=admin)
    serve = subprocess.Popen(
        [sys.executable, "-m", "vcm.cli.main", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert serve.poll() is None and time.monotonic() < deadline, "vcm serve did not come up"
                time.sleep(0.3)
            r = client.post("/v1/agents", json={"agent_id": "emb"}, headers={"Authorization": f"Bearer {admin}"})
            me = {"Authorization": f"Bearer {r.json()['token']}"}
            lines = [*TEXTS, "We met at the harbour.", "Then it rained.", "The boats stayed in.", "Fine by me."]
            for text in lines:
                assert client.post(
                    "/v1/agents/emb/messages", json={"role": "user", "content": text}, headers=me
                ).is_success
            # A message is embedded once three turns follow it; vector search finds only embedded ones.
            deadline = time.monotonic() + 120
            while True:
                hits = client.get(
                    "/v1/agents/emb/recall", params={"query": "locker code", "mode": "vector"}, headers=me
                )
                found = {h["message"]["content"] for h in hits.json()["items"]}
                if TEXTS[1] in found:
                    break
                assert time.monotonic() < deadline, f"not embedded: {found}"
                time.sleep(0.5)
            embedders = [p for p in _children(serve.pid) if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()]
            assert len(embedders) == 1
            assert os.getpriority(os.PRIO_PROCESS, embedders[0]) > os.getpriority(os.PRIO_PROCESS, serve.pid)
    finally:
        serve.terminate()
        serve.wait(60)
    assert _wait_gone(embedders[0], 30)
