"""The ONNX export of a sentence-transformers model, made once and cached (see
:mod:`vcm.tasks.embedding_onnx`, which runs it).

The export is the model's transformer only, with the token-level last hidden state as its output:
late chunking needs the token states, and a sentence embedding is those states pooled, which
:mod:`vcm.tasks.embedding_onnx` does in numpy the way the model's own Pooling (and Normalize)
modules are configured; the configuration is read here, from the loaded model, and recorded.

A cache folder per model (``<cache>/<model-id>-<hash of where it came from>``) holds
``model.onnx`` (fp32; the ``openvino`` backend runs it too), ``model.int8.onnx`` (dynamic int8
quantization of it, made when first asked for) and ``export.json``: the export's settings
(format, opset, torch version, quantization), the pooling configuration, a SHA-256 of every file
of the model folder and, per backend, how closely its sentence vectors match torch's on
:data:`PROBE_TEXTS` (the smallest cosine; for ``openvino``, measured again when its version or
the precision it runs on this CPU changes). Anything different - the model's files, the opset,
torch - and the export is made again. The cache, not the model's folder, because that may be
read-only (an installed package).
Exports are made under an exclusive file lock, so processes starting together export once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vcm.errors import ConfigError
from vcm.tasks.embedding_openvino import CACHE_FOLDER as OPENVINO_CACHE

log = logging.getLogger(__name__)

FORMAT = 3  # bump when what this module writes changes meaning (2: records fast_tokenizer; 3: eager attention)
OPSET = 17
ONNX_BACKENDS = ("onnx", "onnx-int8", "openvino")
# openvino runs the float32 export (vcm.tasks.embedding_openvino): a file of its own would be a
# second export to keep in step for nothing.
FILES = {"onnx": "model.onnx", "onnx-int8": "model.int8.onnx", "openvino": "model.onnx"}
QUANTIZATION: dict[str, dict[str, Any] | None] = {
    "onnx": None,
    "openvino": None,
    # Weights only, activations quantized at run time: no calibration data needed. Per channel:
    # MiniLM's smallest probe cosine to torch 0.96 (0.85 per tensor), at about the same speed.
    "onnx-int8": {"method": "quantize_dynamic", "weight_type": "QInt8", "per_channel": True},
}
POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len_tokens", "lasttoken")
# Short and long, several languages and registers; the long one is cut at the model's window.
PROBE_TEXTS = (
    "The cat sat on the mat.",
    "ok",
    "What did Melanie paint last summer?",
    "Caroline went to the LGBTQ support group on 7 May 2023 and felt accepted there.",
    "Remind me to renew the passport before the trip to Lisbon in March.",
    "def add(a, b):\n    return a + b  # adds two numbers",
    "Der Zug nach Berlin fährt um 14:05 von Gleis 3 ab.",
    "Error: connection refused (ECONNREFUSED) at 127.0.0.1:6379",
    "I'm sorry to hear about your grandmother; I hope the funeral went as well as it could.",
    " ".join(["The quarterly report shows revenue up 12 percent while costs held flat."] * 40),
)
_SKIPPED = re.compile(r"(^|/)(\.|README)")


@dataclass(frozen=True)
class Export:
    """A ready export: the ONNX file of one backend and the facts read from the model."""

    path: Path
    folder: Path  # the model's own folder (tokenizer files)
    tokenizer_folder: Path
    model_id: str
    backend: str
    pooling: tuple[str, ...]
    normalize: bool
    dimension: int
    max_seq_length: int
    parity_min_cosine: float
    fast_tokenizer: bool = False  # its tokenizer.json tokenizes as the model's own class (plain load)


def cache_root(configured: str) -> Path:
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vcm" / "onnx"


def model_folder(source: str) -> Path:
    """The local folder of a model given by path or hub name (the hub's cache only, unless
    ``HF_HUB_OFFLINE`` is unset)."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path.resolve()
    from huggingface_hub import snapshot_download

    names = [source] if "/" in source else [f"sentence-transformers/{source}", source]
    for name in names:
        with contextlib.suppress(Exception):  # the next name, then the error below
            return Path(snapshot_download(name))
    raise ConfigError(f"embedding model {source!r} is neither a folder nor in the hub cache", setting="embedding.model")


def cache_folder(root: Path, model_id: str, folder: Path) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("_")[:80] or "model"
    digest = hashlib.sha256(str(folder).encode()).hexdigest()[:12]
    return root / f"{slug}-{digest}"


def file_checksums(folder: Path, known: Mapping[str, Any] | None = None) -> dict[str, list[Any]]:
    """``{relative path: [size, mtime_ns, sha256]}`` of the model folder's files; a file whose
    size and mtime match ``known`` keeps its recorded hash (hashing a large model at every start
    would cost seconds)."""
    out: dict[str, list[Any]] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if not path.is_file() or _SKIPPED.search(rel):
            continue
        stat = path.stat()
        seen = (known or {}).get(rel)
        if seen is not None and seen[0] == stat.st_size and seen[1] == stat.st_mtime_ns:
            out[rel] = list(seen)
            continue
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        out[rel] = [stat.st_size, stat.st_mtime_ns, digest.hexdigest()]
    return out


def _fingerprint(files: Mapping[str, list[Any]]) -> str:
    return hashlib.sha256(json.dumps({k: v[2] for k, v in files.items()}, sort_keys=True).encode()).hexdigest()


def _settings() -> dict[str, Any]:
    # The torch that made an export, from its package metadata: importing torch to read its
    # version cost every process that runs a cached export ~3 s (a CLI command that embeds took
    # 7.7 s), and running the export needs no torch.
    try:
        made_by = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        made_by = None  # no torch: as before, the export counts as stale and remaking it needs torch
    return {"format": FORMAT, "opset": OPSET, "torch": made_by}


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_export(source: str, model_id: str, backend: str, cache_dir: str = "") -> Export:
    """The export of ``backend`` for the model at ``source``: from the cache when it matches the
    model's files and this export's settings, else made now (seconds for a small model)."""
    if backend not in ONNX_BACKENDS:
        raise ConfigError(f"unknown ONNX backend {backend!r}", setting="embedding.backend")
    folder = model_folder(source)
    target = cache_folder(cache_root(cache_dir), model_id, folder)
    try:
        with _locked(target):
            meta_path = target / "export.json"
            meta = _read(meta_path)
            files = file_checksums(folder, meta.get("files") if isinstance(meta.get("files"), dict) else None)
            current = {**_settings(), "weights_sha256": _fingerprint(files)}
            if any(meta.get(k) != v for k, v in current.items()):
                if meta:
                    log.info("the ONNX export of %s is stale (model or export settings changed)", model_id)
                meta = {**current, "model": str(folder), "model_id": model_id, "backends": {}}
                for name in FILES.values():  # an int8 export must not start from a stale fp32 one
                    (target / name).unlink(missing_ok=True)
                shutil.rmtree(target / OPENVINO_CACHE, ignore_errors=True)  # OpenVINO's compiled models of it
            meta["files"] = files  # refreshed sizes and mtimes: the next start hashes nothing
            backends = meta["backends"]
            record = backends.get(backend) or {}
            stale = record.get("quantization", "?") != QUANTIZATION[backend] or record.get("runtime") != _runtime(
                backend
            )
            if stale or not (target / FILES[backend]).is_file():
                backends[backend] = _export(folder, target, backend, meta)
            _write_json(meta_path, meta)
    except OSError as exc:
        raise ConfigError(
            f"cannot write the ONNX export cache {target}: {exc}; set [embedding] onnx_cache_dir",
            setting="embedding.onnx_cache_dir",
        ) from exc
    return Export(
        path=target / FILES[backend],
        folder=folder,
        tokenizer_folder=folder / str(meta.get("transformer_path", "")),
        model_id=model_id,
        backend=backend,
        pooling=tuple(meta["pooling"]),
        normalize=bool(meta["normalize"]),
        dimension=int(meta["dimension"]),
        max_seq_length=int(meta["max_seq_length"]),
        parity_min_cosine=float(backends[backend]["parity_min_cosine"]),
        fast_tokenizer=bool(meta.get("fast_tokenizer")),
    )


def _runtime(backend: str) -> dict[str, str] | None:
    """What besides the file decides a backend's vectors, recorded with its parity: OpenVINO's
    version and the precision it runs on this CPU (bfloat16 or float32)."""
    if backend != "openvino":
        return None
    from vcm.tasks import embedding_openvino

    return embedding_openvino.runtime()


def _write_json(path: Path, value: Mapping[str, Any]) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(value, f, indent=1, sort_keys=True)
    os.chmod(f.name, 0o644)
    os.replace(f.name, path)


def _export(folder: Path, target: Path, backend: str, meta: dict[str, Any]) -> dict[str, Any]:
    """Write ``FILES[backend]`` (and the fp32 export it starts from); record the model's
    pooling in ``meta``; return the backend's record (quantization, measured parity)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    meta.update(_model_facts(model, folder))
    fp32 = target / FILES["onnx"]
    # A file here is current: a stale export's files are deleted before anything is made again.
    if not fp32.is_file():
        _export_fp32(model, fp32)
    if backend == "onnx-int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        tmp = target / (FILES[backend] + ".tmp")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
        os.replace(tmp, target / FILES[backend])
    from vcm.tasks.embedding_onnx import OnnxRunner

    runner = OnnxRunner.open(
        target / FILES[backend], folder / meta["transformer_path"], meta, threads=0, openvino=backend == "openvino"
    )
    ours = runner.encode(list(PROBE_TEXTS), batch_size=len(PROBE_TEXTS))
    with torch.inference_mode():
        theirs = model.encode(list(PROBE_TEXTS), normalize_embeddings=True, convert_to_numpy=True)
    import numpy as np

    a = ours / np.linalg.norm(ours, axis=1, keepdims=True)
    b = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
    parity = float(np.min(np.sum(a * b, axis=1)))
    log.info("exported %s as %s: smallest cosine to torch %.5f", meta.get("model_id"), backend, parity)
    record = {"file": FILES[backend], "quantization": QUANTIZATION[backend], "parity_min_cosine": parity}
    return {**record, "runtime": runtime} if (runtime := _runtime(backend)) else record


def _model_facts(model: Any, folder: Path) -> dict[str, Any]:
    """The pooling, normalisation and window of a loaded sentence-transformers model; refuses
    models with modules the ONNX backends do not run."""
    names = [type(m).__name__ for m in model]
    if not names or names[0] != "Transformer" or len(names) < 2 or names[1] != "Pooling":
        raise ConfigError(
            f"the ONNX embedding backends run Transformer + Pooling (+ Normalize) models; this one has "
            f'{" + ".join(names)}: use [embedding] backend = "torch"',
            setting="embedding.backend",
        )
    extra = [n for n in names[2:] if n != "Normalize"]
    if extra:
        raise ConfigError(
            f'the ONNX embedding backends cannot run the model\'s {", ".join(extra)} module(s): use backend "torch"',
            setting="embedding.backend",
        )
    pooling = model[1]
    mode = getattr(pooling, "pooling_mode", None)
    if mode is None and hasattr(pooling, "get_pooling_mode_str"):
        mode = pooling.get_pooling_mode_str()
    modes = [str(m) for m in (mode if isinstance(mode, list | tuple) else str(mode).split("+"))]
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown:
        raise ConfigError(f'pooling {"+".join(unknown)} is not run by the ONNX backends: use backend "torch"')
    transformer_path = ""  # the first module's folder in modules.json: usually the model's own
    with contextlib.suppress(OSError, ValueError, KeyError, IndexError, AttributeError):
        transformer_path = str(json.loads((folder / "modules.json").read_text())[0].get("path", ""))
    return {
        "pooling": modes,
        "normalize": "Normalize" in names,
        "dimension": int(model.get_embedding_dimension()),
        "max_seq_length": int(model.max_seq_length),
        "transformer_path": transformer_path,
        "fast_tokenizer": _fast_tokenizer_agrees(model.tokenizer, folder / transformer_path, model.max_seq_length),
    }


# Beyond the probes: accents, casing, CJK, emoji, zero-width and control characters, special
# tokens written out, and a text past the model's window (truncation).
TOKENIZER_PROBES = (
    "Ünïcödé ſ İ ı Straße naïve café 東京 🙂 \u200b tab\tend\r\n",
    "<|endoftext|> [CLS] [SEP] [PAD] [MASK] <s> </s> <unk>",
    "",
    "word " * 600,
)


def _fast_tokenizer_agrees(tokenizer: Any, folder: Path, max_length: int) -> bool:
    """Whether the model's ``tokenizer.json`` read as a plain fast tokenizer gives the ids, masks
    and offsets of the model's own tokenizer (AutoTokenizer's class) on the probes. Recorded
    with the export: the plain one loads without importing torch, which transformers' auto
    classes do (~2 s at the start of every process that embeds), and running an export needs no
    torch. A class that rewrites the file's settings (a BERT whose config says otherwise about
    lower-casing) disagrees here and keeps AutoTokenizer."""
    if not (folder / "tokenizer.json").is_file():
        return False
    from transformers import PreTrainedTokenizerFast

    try:
        plain = PreTrainedTokenizerFast.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        log.info("the fast tokenizer of %s does not load on its own (%s): AutoTokenizer it is", folder, exc)
        return False
    texts = [*PROBE_TEXTS, *TOKENIZER_PROBES]
    batch: dict[str, Any] = {"padding": True, "truncation": True, "max_length": max_length}
    for pair in (texts, [texts[2]], [texts[-1], texts[1]]):  # padded to another text's length, or not
        ours, theirs = plain(pair, **batch), tokenizer(pair, **batch)
        if ours["input_ids"] != theirs["input_ids"] or ours["attention_mask"] != theirs["attention_mask"]:
            return False
    spans = {"return_offsets_mapping": True, "add_special_tokens": False, "truncation": True, "max_length": max_length}
    return all(plain(t, **spans)["offset_mapping"] == tokenizer(t, **spans)["offset_mapping"] for t in texts)


def _export_fp32(model: Any, path: Path) -> None:
    import torch

    auto = model[0].auto_model.eval()
    # Attention exported in its eager form (MatMul, Softmax): the SDPA form adds masking guards
    # (IsNaN, Where) to every layer, and ONNX Runtime ran it 5-12 % slower (MiniLM: a padded pair
    # of LoCoMo turns 5.9 -> 5.7 ms p50, batches of 32 turns 1.41 -> 1.24 s for 256), with the
    # same vectors. A model that has no eager form keeps its own.
    with contextlib.suppress(AttributeError, ValueError):
        auto.set_attn_implementation("eager")

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = auto

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # type: ignore[no-any-return]

    # A padded batch: traced with an all-ones mask, the model may drop the mask from the graph.
    texts = ["a short one", "a longer text, so that the first is padded"]
    example = model.tokenizer(texts, padding=True, return_tensors="pt")
    axes = {0: "batch", 1: "tokens"}
    tmp = path.with_suffix(".tmp")
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            LastHiddenState(),
            (example["input_ids"], example["attention_mask"]),
            str(tmp),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
            opset_version=OPSET,
            # The TorchScript exporter: the torch.export-based one needs onnxscript, which vcm
            # does not install.
            dynamo=False,
        )
    os.replace(tmp, path)
