"""`doctor`'s checks of what breaks a real pair without an error: the wired-memory cap, a different checkpoint
on one Mac, an RDMA set-up that cannot work.

Each check is a pure decision on values (unit-tested on values recorded on Macs) and a reader of those values
on this host:

- **Wired memory.** MLX keeps the weights in wired memory, which macOS caps (``iogpu.wired_limit_mb``; by
  default about 84 % of RAM on a 128 GB Mac). Metal reports the cap as the device's recommended maximum working
  set (``mx.device_info()["max_recommended_working_set_size"]``), which follows the sysctl when it is set;
  the sysctl is read first, to say where the cap comes from, and the device's figure is the default. A rank
  needs its share of the weights plus memory.HEADROOM for caches under the cap, or the load swaps or fails.
  Other systems have no such cap.
- **Same checkpoint.** A half-copied or older checkpoint on one Mac loads and gives wrong logits, silently.
  Every rank reports `fingerprint.checkpoint_parts` (config, index and tokenizer files by content, weight files
  by size and sampled content), and the ranks' reports are compared: the differing files are named.
- **RDMA** (with a `jaccl` hostfile): macOS 26.2 or later, and at least one RDMA device (`ibv_devices`).
- **Same mlx and mlx-lm.** Every rank reports its versions and whether the daemon's overrides of their internals
  fit them (backend/mlx_internals.py: on other versions a rank takes mlx-lm's public paths, slower); ranks that
  run different versions fail the check.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

from backend import memory
from backend.fingerprint import FingerprintError, checkpoint_parts
from backend.memory import GIB

MIB = 1 << 20
RDMA_MACOS = (26, 2)


@dataclass(frozen=True)
class Verdict:
    name: str
    result: str
    ok: bool


# --- wired memory ------------------------------------------------------------------------------------------


def wired_memory(system: str, weights_per_rank: int, headroom: float, device: dict, sysctl_mb: int | None) -> Verdict:
    """Whether this rank's weights plus ``headroom`` (a share of them) fit under the GPU wired-memory cap."""
    name = "wired memory cap"
    if system != "Darwin":
        return Verdict(name, f"does not apply on {system}: only macOS caps the memory the GPU may wire", True)
    recommended = device.get("max_recommended_working_set_size")
    if sysctl_mb:
        cap, source = sysctl_mb * MIB, f"iogpu.wired_limit_mb={sysctl_mb}"
    elif isinstance(recommended, int) and recommended > 0:
        cap, source = recommended, "macOS default (iogpu.wired_limit_mb not set)"
    else:
        return Verdict(name, "MLX reports no Metal working set and iogpu.wired_limit_mb is unreadable", False)
    need = int(weights_per_rank * (1 + headroom))
    result = (
        f"{cap / GIB:.1f} GiB ({source}) for {weights_per_rank / GIB:.1f} GiB of weights + {headroom:.0%} = "
        f"{need / GIB:.1f} GiB"
    )
    if cap >= need:
        return Verdict(name, result, True)
    size = device.get("memory_size")
    hint = (
        f"; raise it on this Mac: sudo sysctl iogpu.wired_limit_mb={max(need, memory.usable(size)) // MIB}"
        if isinstance(size, int) and size > need
        else "; this Mac has too little memory for its share"
    )
    return Verdict(name, result + hint, False)


def read_wired() -> tuple[str, dict, int | None]:
    """(system, MLX's device information, iogpu.wired_limit_mb or None) on this host."""
    import mlx.core as mx

    system = platform.system()
    if system != "Darwin":
        return system, {}, None
    device = dict(mx.device_info())
    try:
        out = subprocess.run(["sysctl", "-n", "iogpu.wired_limit_mb"], capture_output=True, text=True, timeout=10)
        sysctl_mb = int(out.stdout.strip()) if out.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        sysctl_mb = None
    return system, device, sysctl_mb


# --- the same checkpoint on every rank ----------------------------------------------------------------------


def checkpoint_report(model: str) -> dict[str, str] | str:
    """This rank's `checkpoint_parts`, or why there are none."""
    try:
        return checkpoint_parts(model)
    except FingerprintError as exc:
        return str(exc)


def same_checkpoint(reports: list[dict[str, str] | str]) -> Verdict:
    """Compare every rank's report with rank 0's; name the ranks and files that differ."""
    name = "same checkpoint on every rank"
    if len(reports) == 1:
        return Verdict(name, "one rank: nothing to compare", True)
    problems = [f"rank {r}: {report}" for r, report in enumerate(reports) if isinstance(report, str)]
    if problems:
        return Verdict(name, "; ".join(problems), False)
    first = reports[0]
    diffs = []
    for r, report in enumerate(reports[1:], 1):
        files = sorted(f for f in first.keys() | report.keys() if first.get(f) != report.get(f))
        if files:
            shown = ", ".join(f"{f} ({_part(first.get(f))} vs {_part(report.get(f))})" for f in files[:5])
            more = f" and {len(files) - 5} more" if len(files) > 5 else ""
            diffs.append(f"rank {r} differs from rank 0 in {shown}{more}")
    if diffs:
        return Verdict(name, "; ".join(diffs), False)
    return Verdict(name, f"{len(first)} files identical on {len(reports)} ranks", True)


def _part(part: str | None) -> str:
    if part is None:
        return "missing"
    if part.startswith("size="):  # a weight file: its size and the hash of its sampled ranges
        size, _, sampled = part.partition(" sampled=")
        return f"{size}, sampled sha256 {sampled[:12]}" if sampled else size
    return f"sha256 {part[:12]}"


# --- RDMA --------------------------------------------------------------------------------------------------


def rdma(system: str, macos: str | None, devices: list[str] | None) -> Verdict:
    """Whether this rank can use jaccl: macOS 26.2+ and an RDMA device."""
    name = "RDMA (jaccl)"
    if system != "Darwin":
        return Verdict(name, f"does not apply on {system}: jaccl is Thunderbolt 5 RDMA between Macs", True)
    try:
        version = tuple(int(x) for x in (macos or "").split(".")[:2])
    except ValueError:
        version = ()
    wanted = ".".join(map(str, RDMA_MACOS))
    if len(version) < 1 or version < RDMA_MACOS:
        return Verdict(name, f"macOS {macos or 'unknown'}: RDMA needs macOS {wanted} or later", False)
    if not devices:
        return Verdict(
            name, f"macOS {macos}, no RDMA device: enable it in Recovery (rdma_ctl enable) and reboot", False
        )
    return Verdict(name, f"macOS {macos}, devices {', '.join(devices)}", True)


def parse_ibv_devices(output: str) -> list[str]:
    """Device names from `ibv_devices` (a header, a rule, then one device per line)."""
    names = []
    for line in output.splitlines():
        fields = line.split()
        if fields and fields[0] not in ("device", "------"):
            names.append(fields[0])
    return names


def read_rdma() -> tuple[str, str | None, list[str] | None]:
    """(system, macOS version, RDMA devices) on this host; None where they cannot be read."""
    system = platform.system()
    if system != "Darwin":
        return system, None, None
    macos = platform.mac_ver()[0] or None
    try:
        out = subprocess.run(["ibv_devices"], capture_output=True, text=True, timeout=10)
        devices = parse_ibv_devices(out.stdout) if out.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        devices = []
    return system, macos, devices


def same_mlx(reports: list[str]) -> Verdict:
    """Whether every rank runs the same mlx and mlx-lm (``reports``: each rank's ``mlx_internals.report()``)."""
    name = "mlx and mlx-lm versions"
    if len(set(reports)) == 1:
        return Verdict(name, f"{reports[0]} (on {len(reports)} ranks)", True)
    return Verdict(name, "ranks differ: " + "; ".join(f"rank {r}: {v}" for r, v in enumerate(reports)), False)


def uses_jaccl(env: dict[str, str] | None = None) -> bool:
    """Whether this launch is jaccl's: `mlx.launch` gives jaccl ranks their coordinator."""
    env = os.environ if env is None else env
    return bool(env.get("MLX_JACCL_COORDINATOR"))


def rank_verdicts(model: Path | None, ranks: int) -> list[Verdict]:
    """This rank's checks: the wired-memory cap for --model's weights plus memory.HEADROOM (the share `doctor`'s
    fit check and `serve`'s prompt-cache sizing use too), and RDMA under jaccl."""
    verdicts = []
    weights = sum(f.stat().st_size for f in model.glob("*.safetensors")) if model is not None else 0
    if weights:  # no weights here: the fit check already says so
        system, device, sysctl_mb = read_wired()
        verdicts.append(wired_memory(system, weights // ranks, memory.HEADROOM, device, sysctl_mb))
    if uses_jaccl():
        verdicts.append(rdma(*read_rdma()))
    return verdicts
