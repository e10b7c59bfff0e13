"""Message sizes as nccl-tests' ``-b/-e/-f`` flags write them (binary units), and its sweep.

Shared by the collectives benchmark, the GPU health check and the validation's flags.
"""

from __future__ import annotations

import re

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"8"``, ``"512K"``, ``"1M"``, ``"16G"`` (binary units; ``B``/``iB`` suffix allowed) -> bytes."""
    m = _SIZE_RE.match(text)
    if m is None:
        raise ValueError(
            f"{text!r} is not a size (allowed: an integer with an optional K, M, G or T suffix, "
            "binary units, e.g. 8, 512K, 1M, 16G)"
        )
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def format_size(nbytes: int) -> str:
    """Bytes as the shortest exact binary-unit string (``1048576`` -> ``"1M"``)."""
    for unit in ("T", "G", "M", "K"):
        scale = _UNITS[unit]
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


def size_sweep(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """nccl-tests' sweep: ``min``, ``min*f``, ... while not above ``max``."""
    if min_bytes < 1 or factor < 2 or min_bytes > max_bytes:
        raise ValueError(f"bad sweep {min_bytes}..{max_bytes} x{factor}")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes
