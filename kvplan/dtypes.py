"""Element types a KV cache can be stored in, with the names people write for them."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import WorkloadError, shown


@dataclass(frozen=True)
class DType:
    """A storage element type. `bits` is per element; quantized types carry their own scale overhead."""

    name: str
    bits: int
    is_float: bool

    @property
    def bytes(self) -> float:
        return self.bits / 8

    @property
    def is_sub_16bit(self) -> bool:
        """fp8 and the integer types: formats transformers stores only through a quantized cache."""
        return self.bits < 16


FLOAT32 = DType("float32", 32, True)
FLOAT16 = DType("float16", 16, True)
BFLOAT16 = DType("bfloat16", 16, True)
FLOAT8_E4M3 = DType("float8_e4m3", 8, True)
FLOAT8_E5M2 = DType("float8_e5m2", 8, True)
INT8 = DType("int8", 8, False)
INT4 = DType("int4", 4, False)
INT2 = DType("int2", 2, False)

ALL_DTYPES = (FLOAT32, FLOAT16, BFLOAT16, FLOAT8_E4M3, FLOAT8_E5M2, INT8, INT4, INT2)

_ALIASES = {
    "float32": FLOAT32, "fp32": FLOAT32, "f32": FLOAT32, "float": FLOAT32,
    "float16": FLOAT16, "fp16": FLOAT16, "f16": FLOAT16, "half": FLOAT16,
    "bfloat16": BFLOAT16, "bf16": BFLOAT16,
    "fp8": FLOAT8_E4M3, "float8": FLOAT8_E4M3, "fp8_e4m3": FLOAT8_E4M3, "float8_e4m3": FLOAT8_E4M3,
    "float8_e4m3fn": FLOAT8_E4M3, "e4m3": FLOAT8_E4M3,
    "fp8_e5m2": FLOAT8_E5M2, "float8_e5m2": FLOAT8_E5M2, "e5m2": FLOAT8_E5M2,
    "int8": INT8, "i8": INT8, "int4": INT4, "i4": INT4, "int2": INT2, "i2": INT2,
}

KV_DTYPE_CHOICES = ("fp32", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "int2")


def resolve_dtype(name: str | DType) -> DType:
    """Turn 'bf16', 'torch.bfloat16', 'float8_e4m3fn', ... into a DType, or raise a WorkloadError."""
    if isinstance(name, DType):
        return name
    key = str(name).strip().lower().removeprefix("torch.")
    try:
        return _ALIASES[key]
    except KeyError:
        raise WorkloadError(
            f"unknown dtype {shown(name)}: use one of {', '.join(KV_DTYPE_CHOICES)}"
        ) from None
