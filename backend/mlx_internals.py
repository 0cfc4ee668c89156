"""Every place the daemon reaches past mlx's and mlx-lm's public API, each used only on the versions it was written
for.

Four things the daemon does need a private part of mlx or mlx-lm:

- the compiled decode step (backend/decode.py) replaces mlx-lm's ``GenerationBatch._step``, reads its caches'
  private fields and routes kimi_k3's ``scaled_dot_product_attention`` through its own;
- the chunked prompt reading of KDA layers (backend/kda.py) replaces mlx-lm's ``gated_delta_ops``, process-wide;
- ``k3-launch`` (backend/launcher.py) replaces ``select`` in ``mlx._distributed_utils.launch``;
- a checkpoint is found or downloaded with ``mlx_lm.utils._download``, the way mlx-lm's own ``load`` does.

Private names change between releases without notice, and a changed one would not fail loudly: a step that
reads a renamed field decodes wrong tokens, or a swap lands on a function nobody calls any more. So each override
is listed here (``OVERRIDES``) with the exact mlx and mlx-lm versions it was written and tested for (the bitwise
test of tests/backend/test_decode.py, the agreement tests of tests/backend/test_kda.py), and checked against the
installed versions (``INSTALLED``) each time it is about to be used. On any other version it is not used: the
daemon takes mlx-lm's public path instead (mlx-lm's own decode step, its token loop, ``mlx.launch`` as it is,
``huggingface_hub.snapshot_download``), slower but right, and says so in one log line (the first time an override
does not fit: it names every one that does not). pyproject.toml bounds mlx and mlx-lm below their next minor, and
tests/backend/test_mlx_internals.py fails when the installed versions are outside those bounds or not known here:
moving to a new release is running those tests on it and adding its version to the overrides they pass for.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

log = logging.getLogger(__name__)

MLX, MLX_LM = "mlx", "mlx-lm"  # the distributions, as pip and pyproject.toml name them


def _installed(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


INSTALLED = {MLX: _installed(MLX), MLX_LM: _installed(MLX_LM)}  # read at every use (tests set other versions)


@dataclass(frozen=True)
class Override:
    """One private part the daemon uses: what it is, the public path taken instead, and the versions it is for."""

    uses: str
    instead: str
    written_for: tuple[tuple[str, frozenset[str]], ...]  # (distribution, versions): all must hold

    def versions(self) -> str:
        """The versions it was written for, as a person reads them ("mlx 0.32.4, mlx-lm 0.32.2")."""
        return ", ".join(f"{name} {' or '.join(sorted(versions))}" for name, versions in self.written_for)

    def mismatches(self) -> list[str]:
        """The installed versions this override was not written for ("mlx-lm 0.33.0"), none when it fits."""
        return [
            f"{name} {INSTALLED.get(name)}"
            for name, versions in self.written_for
            if INSTALLED.get(name) not in versions
        ]


_TESTED_MLX = frozenset({"0.32.4"})
_TESTED_MLX_LM = frozenset({"0.32.2"})

COMPILED_STEP = Override(
    "the compiled decode step (mlx-lm's GenerationBatch._step and kimi_k3's attention, backend/decode.py)",
    "mlx-lm's own decode step",
    ((MLX, _TESTED_MLX), (MLX_LM, _TESTED_MLX_LM)),  # bitwise mlx-lm's only with mlx's CPU reductions as they are
)
CHUNKED_KDA = Override(
    "the chunked KDA prompt reading (mlx-lm's gated_delta.gated_delta_ops, backend/kda.py)",
    "mlx-lm's token loop",
    ((MLX, _TESTED_MLX), (MLX_LM, _TESTED_MLX_LM)),
)
LAUNCH_SELECT = Override(
    "k3-launch's select (mlx._distributed_utils.launch.select, backend/launcher.py)",
    "mlx.launch as it is (its forwarding threads may keep a core busy)",
    ((MLX, _TESTED_MLX),),
)
DOWNLOAD = Override(
    "mlx_lm.utils._download (backend/dist.py)",
    "huggingface_hub.snapshot_download with mlx-lm's file patterns",
    ((MLX_LM, _TESTED_MLX_LM),),
)
OVERRIDES = (COMPILED_STEP, CHUNKED_KDA, LAUNCH_SELECT, DOWNLOAD)

_told = False  # whether the fallback was logged: one line per process


def _installed_line() -> str:
    return f"mlx {INSTALLED.get(MLX)}, mlx-lm {INSTALLED.get(MLX_LM)}"


def report() -> str:
    """The installed versions and whether the overrides fit them, for `k3-backend doctor` (nothing is logged)."""
    off = [o for o in OVERRIDES if o.mismatches()]
    if not off:
        return f"{_installed_line()}: the overrides fit"
    return f"{_installed_line()}: {len(off)} of {len(OVERRIDES)} overrides off, mlx-lm's public paths (slower)"


def usable(override: Override) -> bool:
    """Whether ``override`` fits the installed versions. The first time one does not, one log line names every
    override that does not fit, the versions it was written for and the public path taken instead."""
    global _told
    fits = not override.mismatches()
    if not fits and not _told:
        _told = True
        off = "; ".join(f"{o.uses}, written for {o.versions()}: {o.instead}" for o in OVERRIDES if o.mismatches())
        log.warning("%s: mlx-lm's public paths instead of %s", _installed_line(), off)
    return fits


def decode_generator(model, *, compiled: bool, two_streams: bool, **options):
    """The BatchGenerator the engine decodes with: mlx-lm's with the compiled step (``two_streams``: its long
    attention on two CPU streams) when asked for and written for these versions, else mlx-lm's own."""
    from mlx_lm.generate import BatchGenerator

    if not compiled or not usable(COMPILED_STEP):
        return BatchGenerator(model, **options)
    from mlx_lm.models import kimi_k3

    from backend import decode

    kimi_k3.scaled_dot_product_attention = decode.attention  # takes another path for the compiled step's caches only
    return decode.Generator(model, two_streams=two_streams, **options)


def read_kda_in_chunks(enabled: bool = True) -> bool:
    """Read prompts through KDA layers with the chunked rule (``enabled``, and written for these versions) or
    mlx-lm's token loop; process-wide, because mlx-lm's ``gated_delta_update`` calls the loop through its module.
    Returns whether the chunked rule is in place."""
    from mlx_lm.models import gated_delta

    from backend import kda

    chunked = enabled and usable(CHUNKED_KDA)
    gated_delta.gated_delta_ops = kda.chunked if chunked else kda.TOKEN_LOOP
    return chunked


def launch(select) -> None:
    """Run ``mlx.launch`` (its arguments from ``sys.argv``) with ``select`` in place of the one its forwarding
    threads wait in; on other versions, mlx.launch as its console script runs it."""
    if usable(LAUNCH_SELECT):
        from mlx._distributed_utils import launch as mlx_launch

        mlx_launch.select = select
        mlx_launch.main()
        return
    (entry,) = metadata.entry_points(group="console_scripts", name="mlx.launch")
    entry.load()()


def checkpoint_dir(model: str | os.PathLike) -> Path:
    """The local directory of a checkpoint: itself, or the Hugging Face snapshot of the repo it names, downloaded
    with the files mlx-lm's ``load`` fetches."""
    if usable(DOWNLOAD):
        from mlx_lm.utils import _download

        return _download(str(model))
    path = Path(model)
    if path.exists():
        return path
    import mlx_lm.utils
    from huggingface_hub import snapshot_download

    patterns = getattr(mlx_lm.utils, "DEFAULT_ALLOW_PATTERNS", None)  # None: every file of the repo
    return Path(snapshot_download(str(model), allow_patterns=patterns))
