"""Which backend runs the cold path's batches (``[embedding] batch_backend``): messages spooled,
archival ingestion, an eviction's summary and facts. The serving process's queries keep
``[embedding] backend`` (:func:`vcm.tasks.embedding.resolved_backend`).

Batches are long inputs, where the matrix products are nearly all of the time, so on a CPU that
multiplies bfloat16 natively a bfloat16 backend runs them at up to twice float32's rate: OpenVINO
(:mod:`vcm.tasks.embedding_openvino`), else torch (:mod:`vcm.tasks.embedding_bf16`). Either is
used only while its vectors share the queries' embedding version, so recall finds every vector a
batch writes.
"""

from __future__ import annotations

import logging

from vcm.errors import ConfigError
from vcm.settings.memory import EmbeddingSettings
from vcm.tasks import embedding_bf16, embedding_openvino
from vcm.tasks.embedding import Embedder, cache_key, forget, get_embedder, resolved_backend
from vcm.tasks.embedding_onnx import PARITY_COSINE

log = logging.getLogger(__name__)

# Query backends whose vectors are the model's own float32 ones (the model's embedding version).
FP32_BACKENDS = ("torch", "onnx")
# The bfloat16 backends, in the order "auto" tries them: OpenVINO runs batches ~20 % faster than
# torch in bfloat16 (batches of 32 LoCoMo turns 166 against 205 ms) and releases the interpreter
# lock for the whole run.
BF16_BACKENDS = (embedding_openvino.BACKEND, embedding_bf16.BACKEND)

# batch_embedder's choice per settings: the cold path asks on every model call, and a fallback
# would otherwise be re-decided (and logged) each time.
_chosen: dict[tuple[str, ...], Embedder] = {}


def batch_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder of the cold path's batches (:func:`_choose`), chosen once per settings."""
    key = (*cache_key(settings), settings.batch_backend)
    found = _chosen.get(key)
    if found is None:
        found = _chosen[key] = _choose(settings)
    return found


def native(backend: str) -> bool:
    """Whether ``backend`` finds bfloat16 arithmetic in this CPU (emulated, bfloat16 is several
    times slower than float32, so "auto" never picks it there)."""
    if backend == embedding_openvino.BACKEND:
        return embedding_openvino.native_bf16()
    return embedding_bf16.native_bf16()


def _choose(settings: EmbeddingSettings) -> Embedder:
    """``"same"``: ``backend``'s embedder. A backend by name: that one (:func:`_by_name`).
    ``"auto"``: the first of :data:`BF16_BACKENDS` the CPU runs natively whose vectors share the
    model's version, else ``backend``'s; only under a float32 ``backend`` (:data:`FP32_BACKENDS`),
    since a bfloat16 one batches as it queries and onnx-int8's queries read a version of their
    own. Under ``backend = "auto"`` that resolved to onnx, OpenVINO is not tried again: auto
    tried it first and found it missing, failing to load or off the model's version."""
    choice = settings.batch_backend
    if choice == "same" or (choice != "auto" and choice == settings.backend):
        return get_embedder(settings)
    if choice != "auto":
        return _by_name(settings, choice)
    backend = resolved_backend(settings)
    if settings.device != "cpu" or backend not in FP32_BACKENDS:
        return get_embedder(settings)
    for candidate in BF16_BACKENDS:
        if candidate == embedding_openvino.BACKEND and settings.backend == "auto":
            continue
        if not native(candidate):
            continue
        wanted = settings.model_copy(update={"backend": candidate})
        try:
            found = get_embedder(wanted)
        except Exception:  # a runtime that cannot load this model: the next, or the queries' backend
            log.warning("%s batches not used: the model did not load", candidate, exc_info=True)
            continue
        if found.model_id == found.base_model_id:
            return found
        log.warning("%s batches of %s not used: cosine %.4f to float32", candidate, found.base_model_id,
                    getattr(found, "parity", 0.0))  # fmt: skip
        forget(wanted)  # not kept: nothing will run it
    return get_embedder(settings)


def _by_name(settings: EmbeddingSettings, choice: str) -> Embedder:
    """The batch backend ``choice``, refused (a :class:`ConfigError` naming the setting) when its
    vectors would not be the queries' version. The queries' version is the model's own under
    ``auto`` (it only picks a backend that keeps it), ``torch`` and ``onnx``, and under a bfloat16
    backend while its parity holds; onnx-int8's is its own."""
    if settings.backend not in ("auto", *FP32_BACKENDS, *BF16_BACKENDS):
        raise ConfigError(f"[embedding] batch_backend = {choice!r} needs a float32 or bfloat16 backend, "
                          f"not {settings.backend!r} (its queries read a version of their own)")  # fmt: skip
    if settings.backend in BF16_BACKENDS:
        queries = get_embedder(settings)
        if queries.model_id != queries.base_model_id:
            raise ConfigError(f"[embedding] batch_backend = {choice!r}: the queries' backend {settings.backend!r} "
                              f"reads a version of its own ({queries.model_id}); use \"same\"")  # fmt: skip
    try:
        found = get_embedder(settings.model_copy(update={"backend": choice}))
    except ImportError as exc:
        raise ConfigError(f"[embedding] batch_backend = {choice!r} needs the {exc.name or choice} package",
                          setting="embedding.batch_backend") from exc  # fmt: skip
    if found.model_id != found.base_model_id:
        parity = getattr(found, "parity", 0.0)
        raise ConfigError(
            f"[embedding] batch_backend = {choice!r}: this model's bfloat16 vectors match float32 to cosine "
            f'{parity:.4f} (below {PARITY_COSINE}), so recall queries could not find them; use "same"'
        )
    return found
