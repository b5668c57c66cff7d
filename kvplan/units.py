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


_DECIMAL_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9}
_BINARY_SUFFIX = {"K": 2**10, "M": 2**20, "G": 2**30}


def parse_tokens(text: str) -> int:
    """A token count as vLLM's `human_readable_int` reads one (utils/argparse_utils.py, 0.33): 32768, 32,768,
    '128k' = 128,000 and '25.6k' = 25,600 (decimal), '128K' = 131,072 and '1M' = 1,048,576 (binary, whole numbers
    only). ValueError, with what to write, for anything else."""
    value = text.strip().replace(",", "").replace("_", "")
    if len(value) > 24:
        raise ValueError("a token count is at most a few digits and a suffix (128K, 32k)")
    if value.startswith("-"):
        raise ValueError(f"{text.strip()[:40]!r}: a token count is positive (write 32768, 32k or 32K)")
    suffix = value[-1:] if value[-1:] in _DECIMAL_SUFFIX or value[-1:] in _BINARY_SUFFIX else ""
    number = value[:-1] if suffix else value
    if not number or not all(c.isdigit() or c == "." for c in number) or number.count(".") > 1 or number == ".":
        raise ValueError(f"{text.strip()[:40]!r} is not a token count: write 32768, 32k (32,000) or 32K (32,768)")
    if suffix in _BINARY_SUFFIX:
        if "." in number:
            raise ValueError(f"{text.strip()[:40]!r}: a binary suffix takes a whole number (write "
                             f"{number}{suffix.lower()} for a decimal count)")
        return int(number) * _BINARY_SUFFIX[suffix]
    if "." in number and not suffix:
        raise ValueError(f"{text.strip()[:40]!r} is not a whole number of tokens")
    return int(float(number) * _DECIMAL_SUFFIX[suffix]) if suffix else int(number)
