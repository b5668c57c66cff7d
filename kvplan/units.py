"""Byte formatting at the edges: GiB for 2**30, GB for 10**9, never mixed."""

from __future__ import annotations

GiB = 2**30
MiB = 2**20
KiB = 2**10
GB = 10**9


def fmt_int(value: int) -> str:
    return f"{value:,}"


_BINARY_UNITS = (("TiB", 2**40), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB))


def fmt_bytes(value: int) -> str:
    """1,342,177,280 -> '1.25 GiB'. Binary units, labelled as such."""
    size = abs(value)
    for unit, scale in _BINARY_UNITS:
        if size >= scale:
            return f"{value / scale:,.2f} {unit}"
    return f"{value:,} B"


def fmt_gb(value: int) -> str:
    """Decimal gigabytes, for people comparing with '80 GB' catalog figures."""
    return f"{value / GB:,.2f} GB"
