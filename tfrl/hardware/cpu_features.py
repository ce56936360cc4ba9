"""What the CPU can do, from /proc/cpuinfo (Linux): read by the run's precision advice and by the doctor."""

from __future__ import annotations

import re

BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # the flags of CPUs with bfloat16 arithmetic


def flags() -> frozenset[str]:
    """The CPU's feature flags; empty where /proc/cpuinfo does not exist."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return frozenset()
    match = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return frozenset(match[1].split()) if match else frozenset()


def bf16_flags() -> tuple[str, ...]:
    """The bfloat16 flags (BF16_FLAGS) this CPU has, sorted."""
    return tuple(sorted(flags() & set(BF16_FLAGS)))
