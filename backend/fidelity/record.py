"""`k3-backend fidelity record`: run the reference teacher-forced on the windows and store its BASE."""

import sys
from pathlib import Path

import mlx.core as mx
import numpy as np

from backend.fidelity import forward
from backend.fidelity.spans import SPANS
from backend.fidelity.store import BaseWriter, Header, WindowEntry, ids_digest, record_dtype, tokenizer_fingerprint
from backend.fidelity.traces import Window, corpus_windows, trace_windows

DEFAULT_WINDOW = 1025  # the card's: 1024 predicted tokens per session
DEFAULT_TOP_K = 64
DEFAULT_CHUNK = 256  # [256, 163840] float32 log-probs are 168 MB


def reference_records(lp: mx.array, targets: list[int], labels: list[int], top_k: int) -> np.ndarray:
    """Reduce one chunk of reference log-probs [c, V] to its BASE records."""
    top = mx.argpartition(-lp, kth=top_k - 1, axis=-1)[:, :top_k]
    values = mx.take_along_axis(lp, top, axis=-1)
    order = mx.argsort(-values, axis=-1)
    ids, values = mx.take_along_axis(top, order, axis=-1), mx.take_along_axis(values, order, axis=-1)
    rest = mx.logsumexp(mx.put_along_axis(lp, ids, mx.array(-mx.inf), axis=-1), axis=-1)
    target = mx.take_along_axis(lp, mx.array(targets, dtype=mx.int32)[:, None], axis=-1)[:, 0]
    mx.eval(ids, values, rest, target)
    out = np.zeros(len(targets), dtype=record_dtype(top_k))
    out["label"], out["target"], out["rest"] = labels, np.array(target), np.array(rest)
    out["ids"], out["logprobs"] = np.array(ids), np.array(values)
    return out


def collect_windows(tokenizer, traces: str | None, corpora: list[str], window: int) -> list[Window]:
    from backend.prompts import AUDIT_TOOLS

    if window < 2:
        raise ValueError("--window must be at least 2 tokens")
    if not traces and not corpora:
        raise ValueError("give --traces and/or --corpus: there is nothing to record")
    windows = trace_windows(tokenizer, traces, window, AUDIT_TOOLS) if traces else []
    for directory in corpora:
        windows += corpus_windows(tokenizer, directory, window)
    return windows


def _plan(ref: forward.Loaded, vocab: int, traces, corpora, window, top_k, chunk) -> tuple[list[Window], Header]:
    """Rank 0's windows and BASE header."""
    windows = collect_windows(ref.tokenizer, traces, corpora, window)
    if not 1 <= top_k < vocab:
        raise ValueError(f"--top-k must be in 1..{vocab - 1} for a vocabulary of {vocab}")
    if chunk < 1:
        raise ValueError("--chunk must be at least 1")
    entries = [WindowEntry(w.source, w.corpus, len(w.ids), len(w.prompt), ids_digest(w.ids)) for w in windows]
    header = Header(
        tokenizer_fingerprint(ref.tokenizer),
        vocab,
        window,
        top_k,
        chunk,
        forward.model_info(ref.path),
        list(SPANS),
        entries,
    )
    return windows, header


def record(
    model: str,
    out: str,
    *,
    traces: str | None = None,
    corpora: list[str] = (),
    window: int = DEFAULT_WINDOW,
    top_k: int = DEFAULT_TOP_K,
    chunk: int = DEFAULT_CHUNK,
    trust_remote_code: bool = False,
) -> Path | None:
    """Record the BASE of `model` on the windows; returns its path on rank 0 (None on the other ranks)."""
    ref = forward.load(model, trust_remote_code=trust_remote_code)
    vocab = forward.vocab_size(ref.model)  # a forward pass: every rank takes part
    windows, header = forward.share_result(
        lambda: _plan(ref, vocab, traces, list(corpora), window, top_k, chunk), ref.group
    )
    writer = BaseWriter(out, header) if ref.rank == 0 else None
    try:
        for n, w in enumerate(windows):
            if writer:
                writer.begin(w.ids, w.prompt)
                print(f"[{n + 1}/{len(windows)}] {w.source}: {len(w.ids)} tokens", file=sys.stderr)
            for start, lp in forward.log_probs(ref.model, w.ids, chunk):
                end = start + lp.shape[0]
                rows = reference_records(lp, w.ids[start + 1 : end + 1], w.labels[start + 1 : end + 1], top_k)
                if writer:
                    writer.add(rows)
        return writer.close() if writer else None
    except BaseException:
        if writer:
            writer.abort()
        raise
