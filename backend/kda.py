"""Reading a prompt through Kimi Delta Attention on the CPU in chunks: the chunked delta rule.

mlx-lm reads a prompt through a KDA layer with a Metal kernel on the GPU, and elsewhere with
``gated_delta_ops``: one compiled step per token, each a handful of small kernels. On the CPU that loop is
most of a prompt's cost (two thirds or more of prefill on the tiny checkpoint: docs/engine.md). The same
recurrence can be read a few tokens at a time (the WY form of the delta rule, as
flash-linear-attention's chunked kernels read it): everything inside a chunk is a few batched products,
computed for all chunks at once, and only the state's hand-over from one chunk to the next is sequential,
so a prompt of T tokens takes T / 8 (or T / 4) small steps instead of T.

Per head, with state S (Dv x Dk), per-channel decay g_t and the delta rule
``S_t = S_{t-1} diag(g_t) + u_t k_t^T``, ``u_t = beta_t (v_t - S_{t-1} diag(g_t) k_t)``, ``y_t = S_t q_t``.
Inside a chunk, let D_ts = g_{s+1} ... g_t (per channel; 1 for s = t), Γ_t = g_1 ... g_t, and S_0 the state the
chunk starts from:

- ``(I + A) U = beta * (V - (K * Γ) S_0^T)``, A_ts = beta_t sum_d k_t k_s D_ts for s < t;
- ``Y = (Q * Γ) S_0^T + P U``, P_ts = sum_d q_t k_s D_ts for s <= t;
- ``S_C = S_0 diag(Γ_C) + U^T (K * D_C.)``.

The decays are running products, as mlx-lm's loop multiplies them (never exp of a difference of logs,
which overflows under a strong decay); a product that underflows is a state that has decayed away in both.
(I + A) is unit lower-triangular and does not depend on S_0, so it is inverted for every chunk at once.
Padding (``mask`` false) reads as beta = 0 and g = 1, which leaves the state exactly as it was.

``mlx_internals.read_kda_in_chunks`` puts this in the place of mlx-lm's ``gated_delta_ops`` (on the versions it
was written for), which mlx-lm calls only where it has no kernel; a single token (decode) keeps mlx-lm's step. The
outputs agree with mlx-lm's to float32 rounding, not bitwise (tests/backend/test_kda.py); ``k3-backend serve
--sequential-kda`` keeps mlx-lm's loop.
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models import gated_delta

TOKEN_LOOP = gated_delta.gated_delta_ops  # mlx-lm's loop, kept before anything is installed


def chunk_size(dk: int) -> int:
    """Tokens read at once. The decays of a chunk hold size^2 x Dk floats per head and the hand-overs number
    T / size, so the best size falls with the key width; measured on the CPU (docs/engine.md): 8 for Dk 16,
    4 from Dk 32 to 128."""
    return 8 if dk <= 16 else 4


def _chunks(x: mx.array, chunks: int, size: int, fill: float) -> mx.array:
    """[B, T, H, ...] padded with ``fill`` to chunks x size tokens, as [B, H, chunks, size, ...] in float32."""
    pad = chunks * size - x.shape[1]
    x = x.astype(mx.float32)
    if pad:
        x = mx.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2), constant_values=fill)
    return mx.moveaxis(x.reshape(x.shape[0], chunks, size, *x.shape[2:]), 3, 1)


@mx.compile
def _hand_over(state, w, wk, qg, p, kd, last):
    """One chunk's sequential part: its pseudo-values, its outputs and the state it hands to the next."""
    u = w - wk @ mx.swapaxes(state, -1, -2)
    y = qg @ mx.swapaxes(state, -1, -2) + p @ u
    return y, state * last[..., None, :] + mx.swapaxes(u, -1, -2) @ kd


def chunked(q, k, v, g, beta, state=None, mask=None) -> tuple[mx.array, mx.array]:
    """mlx-lm's ``gated_delta_ops`` (same arguments and results), a chunk at a time: q, k [B, T, Hk, Dk];
    v [B, T, Hv, Dv]; g [B, T, Hv, Dk] or [B, T, Hv]; beta [B, T, Hv]; state [B, Hv, Dv, Dk]; mask [B, T]."""
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[-2:]
    dtype = q.dtype
    if T == 1:
        return TOKEN_LOOP(q, k, v, g, beta, state, mask)
    if state is None:
        state = mx.zeros((B, Hv, Dv, Dk), dtype=mx.float32)
    if (repeat := Hv // Hk) > 1:
        q, k = mx.repeat(q, repeat, -2), mx.repeat(k, repeat, -2)
    if g.ndim == 3:
        g = mx.broadcast_to(g[..., None], (*g.shape, Dk))
    if mask is not None:
        beta = mx.where(mask[:, :, None], beta, 0)
        g = mx.where(mask[:, :, None, None], g, 1)
    size = chunk_size(Dk)
    n = -(-T // size)
    q, k, v, beta = (_chunks(x, n, size, 0) for x in (q, k, v, beta))  # [B, H, n, C, ...]
    g = _chunks(g, n, size, 1)
    t, s = mx.arange(size)[:, None, None], mx.arange(size)[None, :, None]
    decays = mx.where(t >= s, mx.cumprod(mx.where(t > s, g[..., :, None, :], 1), axis=-3), 0)
    # D_ts: [B, H, n, C(t), C(s), Dk]; row t of both scores at once: [k_s D_ts]_s @ [k_t, q_t]
    scores = (k[..., None, :, :] * decays) @ mx.stack([k, q], axis=-1)
    A, P = beta[..., None] * mx.tril(scores[..., 0], -1), scores[..., 1]
    solve = mx.linalg.tri_inv(A + mx.eye(size), upper=False, stream=mx.cpu)
    gamma = mx.cumprod(g, axis=-2)
    w = solve @ (beta[..., None] * v)
    wk = solve @ (beta[..., None] * k * gamma)
    qg, kd, last = q * gamma, k * decays[..., -1, :, :], gamma[..., -1, :]
    ys = []
    for c in range(n):
        y, state = _hand_over(state, w[:, :, c], wk[:, :, c], qg[:, :, c], P[:, :, c], kd[:, :, c], last[:, :, c])
        ys.append(y)
    y = mx.moveaxis(mx.stack(ys, axis=2), 1, 3).reshape(B, n * size, Hv, Dv)[:, :T]
    return y.astype(dtype), state
