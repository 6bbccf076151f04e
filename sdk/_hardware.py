"""What this machine computes natively: the one check serving and training share.

bf16 pays only where the hardware multiplies in it: a GPU, or a CPU with AVX512-BF16 or AMX
(Sapphire Rapids and later). Elsewhere it is emulated and slower than float32 (measured on a
2-core AVX-512 CPU without it: vLLM's batch of 4 in 7.3 s bf16 against 2.7 s fp32), so both
the server's weights and the trainers' mixed precision follow this one answer.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cpu_has_native_bf16", "usable_cores"]


def cpu_has_native_bf16(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> bool:
    """True when the CPU computes bf16 natively (the AVX512-BF16 or AMX-BF16 flag); False when
    it does not or ``cpuinfo`` cannot be read."""
    try:
        flags = Path(cpuinfo).read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def usable_cores() -> list[int]:
    """The CPU cores this process may run on (its affinity where the OS has one), sorted."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))
