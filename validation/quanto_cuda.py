"""optimum-quanto on CUDA without compiling its CUDA extension.

quanto unpacks int2 / int4 data with `torch.ops.quanto.unpack`, whose CUDA kernel lives in an extension that
is compiled on first use (`torch.utils.cpp_extension.load` over unpack.cu plus the AWQ and Marlin GEMM
kernels). On a fresh GPU machine that build takes minutes of nvcc, longer than the whole gpu suite's time
budget, for a kernel the KV cache only uses to dequantize a layer.

`use_torch_unpack()` hands quanto's CUDA extension a plain-torch `unpack` instead, so the extension is never
built. The bit layout is quanto's own (its torch fallback in optimum/quanto/library/unpack.py): value i of a
byte sits in bits [i x bits, (i + 1) x bits), and the unpacked rows are laid one block after another. What
the cache stores (the packed uint8 data, scales, shifts) does not change; the dequantization's scratch is
`8 / bits` masked copies of the packed layer (a layer of Llama-3.1-8B at 8k tokens, int4: 2 x 4.2 MB) beside
the kernel's single output. tests/test_validation.py checks it against quanto's compiled CPU kernel.
"""

from __future__ import annotations

import types

import torch


def unpack(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """int2 / int4 values packed in uint8 bytes, unpacked to one uint8 per value (quanto's layout)."""
    if bits not in (2, 4):
        raise ValueError(f"quanto packs 2 or 4 bits, not {bits}")
    per_byte = 8 // bits
    mask = (1 << bits) - 1
    return torch.cat([(packed >> (bits * i)) & mask for i in range(per_byte)]).to(torch.uint8)


def use_torch_unpack() -> bool:
    """Route quanto's CUDA `unpack` to `unpack` above. True when quanto's CUDA extension was registered and
    had not been built yet (so nothing compiles); False when quanto is absent or has no CUDA extension."""
    try:
        from optimum.quanto.library.extensions import get_extension, is_extension_available
    except ImportError:
        return False
    if not is_extension_available("quanto_cuda"):
        return False
    ext = get_extension("quanto_cuda")
    if ext._lib is None:       # the extension's lazy `lib` property builds it on first access otherwise
        ext._lib = types.SimpleNamespace(unpack=unpack)
    return True
