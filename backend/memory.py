"""A rank's memory: what is usable, what the weights take, and the headroom left for caches.

`doctor` checks that a checkpoint's weights per rank fit with HEADROOM to spare; `serve` sizes its prompt
cache from the same headroom (the memory left after this rank's weights), so the two never disagree about
what a Mac can hold. No psutil: sysconf, and /proc/meminfo on Linux.
"""

from __future__ import annotations

import os
from pathlib import Path

GIB = 1 << 30
HEADROOM = 0.10  # of the weights per rank, at least: KV and prompt caches, prefill activations
OS_RESERVE = 16 * GIB  # memory left to macOS and everything else on a Mac
PROMPT_CACHE_SHARE = 0.5  # of the headroom: the rest is for the running requests' caches and prefill
MIN_PROMPT_CACHE_BYTES = 256 << 20


def memory() -> tuple[int, int | None]:
    """(physical memory, available memory or None) in bytes."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return total, int(line.split()[1]) * 1024
    except OSError:
        pass
    return total, None


def usable(total: int) -> int:
    """What the model may use of ``total`` bytes: all but OS_RESERVE (all of a machine too small to spare it)."""
    return total - OS_RESERVE if total > 2 * OS_RESERVE else total


def headroom(weights_per_rank: int, total: int | None = None) -> int:
    """Bytes left on this rank once its share of the weights is loaded (negative: they do not fit)."""
    return usable(memory()[0] if total is None else total) - weights_per_rank


def fits(weights_per_rank: int, total: int | None = None) -> bool:
    """The weights fit with at least HEADROOM of them to spare."""
    return headroom(weights_per_rank, total) >= HEADROOM * weights_per_rank


def prompt_cache_bytes(weights_per_rank: int, total: int | None = None) -> int:
    """The default prompt-cache budget: PROMPT_CACHE_SHARE of the headroom, never below MIN_PROMPT_CACHE_BYTES."""
    return max(MIN_PROMPT_CACHE_BYTES, int(PROMPT_CACHE_SHARE * headroom(weights_per_rank, total)))
