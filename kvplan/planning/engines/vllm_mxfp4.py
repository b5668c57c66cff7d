"""vLLM's padding of MXFP4 expert weights (gpt-oss): the MoE kernels want aligned sizes, so vLLM allocates
the experts with a padded intermediate (per TP rank) and hidden size, and the padding is real memory.

`Mxfp4MoEMethod.create_weights` (vllm/model_executor/layers/quantization/mxfp4.py) allocates per expert
w13 [2 I', H' / 2] uint8 + scales [2 I', H' / 32] + bias [2 I'] bf16 and w2 [H', I' / 2] + [H', I' / 32] +
bias [H'], where I' = round_up(I / tp, a) and H' = round_up(H, b) depend on the kernel backend:

    Marlin MoE (every CUDA GPU outside Blackwell datacenter parts)    a = 128, b = 256
    FlashInfer BF16 MoE (B200 / GB200, FlashInfer installed)          a = 256, b = 256

gpt-oss-20b on an A100 (I = H = 2880, 32 experts, 24 layers, TP1): I' 2944, H' 3072, +0.86 GiB of weights;
vLLM 0.19 printed "Model loading took 13.72 GiB" where the unpadded checkpoint is 12.84 GiB. On H100s the
published gpt-oss-120b logs (vLLM 0.10-0.11, 65.97 GiB) show the same Marlin sizes; a vLLM built with
OpenAI's triton_kernels uses its Triton layout on Hopper instead (I' = round_up(I / tp, 64), H unpadded).
"""

from __future__ import annotations

from ...gpus import GPU
from ...model.arch import ArchShape, MoEDims
from ...model.ranks import experts_per_rank
from ...units import fmt_bytes

MARLIN = ("Marlin MoE kernel", 128, 256)
FLASHINFER_SM100 = ("FlashInfer MXFP4 MoE (SM100)", 256, 256)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def backend(gpu: GPU) -> tuple[str, int, int] | None:
    """(name, intermediate alignment, hidden alignment) of the MoE kernel vLLM picks, or None when kvplan does
    not know (AMD, custom GPUs)."""
    if gpu.compute_capability is None:
        return None
    return FLASHINFER_SM100 if gpu.compute_capability[0] == 10 else MARLIN


def _layout_bytes(experts: int, inter: int, hidden: int) -> int:
    w13 = 2 * inter * (hidden // 2 + hidden // 32 + 2)
    w2 = hidden * (inter // 2 + inter // 32 + 2)
    return experts * (w13 + w2)


def padding_bytes(shape: ArchShape, gpu: GPU, tp: int, layers: range, moe_ranks: int | None = None,
                  expert_parallel: bool = False) -> tuple[int, str]:
    """Extra bytes the padded MXFP4 experts of `layers` take on one rank, and the line explaining them.
    (0, "") when the model has no MXFP4 experts or the GPU's kernel is unknown. The experts lie as vLLM 0.33
    fused_moe/config.py FusedMoEParallelConfig.make lays them: without EP each one sharded over the MoE ranks (TP x
    DP, `flatten_tp_across_dp_and_pcp`), with EP whole, the heaviest rank ceil(E / EP) of them (`tp_size=1`)."""
    ranks = moe_ranks or tp
    quant = shape.quant
    if quant is None or quant.method != "mxfp4" or ("experts", -1) in quant.skip:
        return 0, ""
    kernel = backend(gpu)
    moe = [(i, shape.layers[i].ffn) for i in layers if isinstance(shape.layers[i].ffn, MoEDims)]
    if kernel is None or not moe:
        return 0, ""
    name, inter_align, hidden_align = kernel
    hidden = shape.hidden
    total, example = 0, None
    for index, ffn in moe:
        if ("experts", index) in quant.skip:
            continue
        inter = ffn.expert.intermediate // (1 if expert_parallel else ranks)
        held = experts_per_rank(ffn.experts, ranks) if expert_parallel else ffn.experts
        padded = (_round_up(inter, inter_align), _round_up(hidden, hidden_align))
        extra = _layout_bytes(held, *padded) - _layout_bytes(held, inter, hidden)
        total += extra
        example = example or (inter, hidden, *padded)
    if not total:
        return 0, ""
    inter, hidden, inter_p, hidden_p = example
    line = (f"MXFP4 experts padded for vLLM's {name} on {gpu.name}: intermediate per rank {inter:,} -> {inter_p:,}, "
            f"hidden {hidden:,} -> {hidden_p:,}: +{fmt_bytes(total)} ({total:,} B)")
    return total, line
