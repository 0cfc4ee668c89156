"""`k3-backend fidelity compare`: the candidate on the BASE's tokens, against the stored reference.

Per predicted token: KL(reference || candidate) over the full output distribution as far as the BASE
keeps it (store.py states the error bound; the per-token bound is summed into `tail_bound`), whether the
candidate's top token is the reference's, and both models' log-probability of the actual next token.
These are tallied per corpus (perplexity ratio) and, on trace windows, per span.
"""

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from backend.fidelity import forward
from backend.fidelity.spans import SPANS
from backend.fidelity.store import Base, BaseError, tokenizer_fingerprint
from backend.fidelity.traces import TRACES

ALL = "all"
SMALL_KLD = 0.01  # the card's "share of tokens under 0.01 KLD"


def candidate_rows(lp: mx.array, records: np.ndarray, targets: list[int]) -> dict[str, np.ndarray]:
    """Per-token figures for one chunk of candidate log-probs [c, V] against its reference records.

    The [c, V] work (gathering the reference's top-k, the candidate's rest mass and tail minimum) runs in
    mlx; the KLD itself runs on [c, k] in float64 with both coarse distributions renormalised, so float32
    normalisation error does not leave a first-order KLD floor (~1e-7) between near-identical models.
    """
    ids = mx.array(np.ascontiguousarray(records["ids"]))
    q_top = mx.take_along_axis(lp, ids, axis=-1)
    q_rest = mx.logsumexp(mx.put_along_axis(lp, ids, mx.array(-mx.inf), axis=-1), axis=-1)
    q_tail_min = mx.min(mx.put_along_axis(lp, ids, mx.array(mx.inf), axis=-1), axis=-1)
    agree = mx.argmax(lp, axis=-1) == ids[:, 0]
    target = mx.take_along_axis(lp, mx.array(targets, dtype=mx.int32)[:, None], axis=-1)[:, 0]
    mx.eval(q_top, q_rest, q_tail_min, agree, target)
    p_top, p_rest = _normalised(records["logprobs"], records["rest"])
    q_top64, q_rest64 = _normalised(np.array(q_top), np.array(q_rest))
    r = np.exp(p_rest)
    with np.errstate(invalid="ignore"):  # 0 * inf where the reference put no mass outside its top-k
        rest_term = np.where(r > 0, r * (p_rest - q_rest64), 0.0)
        # log of the largest renormalised reference tail probability minus log of the smallest candidate one
        spread = np.minimum(p_top[:, -1] - p_rest, 0.0) - (np.array(q_tail_min, np.float64) - np.array(q_rest))
        tail = np.where(r > 0, r * spread, 0.0)
    kld = (np.exp(p_top) * (p_top - q_top64)).sum(axis=-1) + rest_term
    return {
        # KL_S is a KL divergence, so >= 0; a negative value is rounding between identical distributions.
        "kld": np.maximum(kld, 0.0),
        "tail": np.maximum(tail, 0.0),
        "rest": r,
        "agree": np.array(agree),
        "label": np.asarray(records["label"]),
        "nll_cand": -np.array(target).astype(np.float64),
        "nll_ref": -records["target"].astype(np.float64),
    }


def _normalised(top: np.ndarray, rest: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-k and rest log-probs in float64, shifted so that top-k + rest sum to exactly 1."""
    top, rest = np.asarray(top, np.float64), np.asarray(rest, np.float64)
    peak = top.max(axis=-1)
    total = np.logaddexp(peak + np.log(np.exp(top - peak[:, None]).sum(axis=-1)), rest)
    return top - total[:, None], rest - total


@dataclass
class Tally:
    """Running sums for one row of a table; KLDs are kept (4 bytes a token) for the median."""

    tokens: int = 0
    nll_ref: float = 0.0
    nll_cand: float = 0.0
    agree: int = 0
    tail: float = 0.0
    rest: float = 0.0
    klds: list[np.ndarray] = field(default_factory=list)

    def add(self, rows: dict[str, np.ndarray], mask: np.ndarray) -> None:
        self.tokens += int(mask.sum())
        self.nll_ref += float(rows["nll_ref"][mask].sum())
        self.nll_cand += float(rows["nll_cand"][mask].sum())
        self.agree += int(rows["agree"][mask].sum())
        self.tail += float(rows["tail"][mask].sum())
        self.rest += float(rows["rest"][mask].sum())
        self.klds.append(rows["kld"][mask].astype(np.float32))

    def summary(self) -> dict:
        if not self.tokens:
            return {"tokens": 0}
        kld = np.concatenate(self.klds).astype(np.float64)
        ppl_ref, ppl_cand = float(np.exp(self.nll_ref / self.tokens)), float(np.exp(self.nll_cand / self.tokens))
        return {
            "tokens": self.tokens,
            "ppl_ref": ppl_ref,
            "ppl_cand": ppl_cand,
            "ppl_ratio": ppl_cand / ppl_ref,
            "kld_mean": float(kld.mean()),
            "kld_median": float(np.median(kld)),
            "top1_agreement": self.agree / self.tokens,
            "kld_under_0.01": float((kld < SMALL_KLD).mean()),
            "tail_bound_mean": self.tail / self.tokens,
            "rest_mass_mean": self.rest / self.tokens,
        }


def check_candidate(base: Base, cand: forward.Loaded, vocab: int, window: int | None) -> None:
    """Refuse a BASE the candidate cannot be compared on, saying why."""
    h = base.header
    if tokenizer_fingerprint(cand.tokenizer) != h.tokenizer:
        raise BaseError(
            f"{base.path}: recorded with another tokenizer than {cand.path}'s (vocabulary hash differs); "
            "the token ids would mean different text"
        )
    if vocab != h.vocab_size:
        raise BaseError(f"{base.path}: the reference has {h.vocab_size} outputs, {cand.path} has {vocab}")
    if window is not None and window != h.window:
        raise BaseError(f"{base.path}: recorded with --window {h.window}, not {window}; re-record the BASE")


def _open(base_path: str, cand: forward.Loaded, vocab: int, window: int | None, generate: int) -> Base:
    base = Base(base_path)
    check_candidate(base, cand, vocab, window)
    if generate and not any(w.prompt for w in base.header.windows):
        raise BaseError(f"{base.path}: --generate needs trace sessions with an opening prompt; this BASE has none")
    return base


def _score(cand: forward.Loaded, base: Base | None, plan: dict) -> tuple[dict[str, Tally], dict[str, Tally]]:
    """Run the candidate on every window; on rank 0 (which has the BASE) tally per corpus and per span."""
    corpora: dict[str, Tally] = {}
    spans = {name: Tally() for name in (*SPANS, ALL)}
    for i, ids in enumerate(plan["windows"]):
        for start, lp in forward.log_probs(cand.model, ids, plan["chunk"]):
            if base is None:
                mx.eval(lp)
                continue
            end = start + lp.shape[0]
            rows = candidate_rows(lp, base.records(i)[start:end], ids[start + 1 : end + 1])
            everything = np.ones(len(rows["kld"]), dtype=bool)
            corpus = base.header.windows[i].corpus
            for name in (corpus, ALL):
                corpora.setdefault(name, Tally()).add(rows, everything)
            if corpus == TRACES:
                spans[ALL].add(rows, everything)
                for k, name in enumerate(SPANS):
                    spans[name].add(rows, rows["label"] == k)
    return dict(sorted(corpora.items(), key=lambda kv: kv[0] == ALL)), spans


def compare(
    model: str,
    base_path: str,
    *,
    window: int | None = None,
    generate: int = 0,
    max_tokens: int = 512,
    seed: int = 0,
    trust_remote_code: bool = False,
) -> dict | None:
    """The report of `model` against the BASE (a dict on rank 0; None on the other ranks)."""
    if generate < 0 or max_tokens < 1:
        raise ValueError("--generate must be >= 0 and --max-tokens positive")
    cand = forward.load(model, trust_remote_code=trust_remote_code)
    vocab = forward.vocab_size(cand.model)  # a forward pass: every rank takes part
    opened: list[Base] = []  # rank 0's BASE; the other ranks only get the token ids to run

    def make_plan() -> dict:
        base = _open(base_path, cand, vocab, window, generate)
        opened.append(base)
        n = len(base.header.windows)
        return {
            "chunk": base.header.chunk,
            "windows": [base.ids(i) for i in range(n)],
            "prompts": [base.prompt(i) for i in range(n)],
        }

    plan = forward.share_result(make_plan, cand.group)
    base = opened[0] if opened else None
    corpora, spans = _score(cand, base, plan)
    behaviour = None
    if generate:
        from backend.fidelity.generate import sample_sessions

        behaviour = sample_sessions(cand, [p for p in plan["prompts"] if p], generate, max_tokens, seed)
    if base is None:
        return None
    h = base.header
    return {
        "base": {
            "path": str(base.path),
            "reference": h.model,
            "window": h.window,
            "top_k": h.top_k,
            "windows": len(h.windows),
            "chunk": h.chunk,
        },
        "candidate": forward.model_info(cand.path) | {"ranks": cand.group.size()},
        "corpora": {name: t.summary() for name, t in corpora.items()},
        "spans": {name: t.summary() for name, t in spans.items()},
        "generate": behaviour,
    }
