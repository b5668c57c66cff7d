"""DeepSeek-V4's profile run on vLLM 0.20.1-0.26 and 0.31-0.33 (issue #23), one rank: the torch peak of
`profile_run`'s dummy forward and the shared workspace it leaves allocated, which together are vLLM's non-KV memory
beyond the weights.

How vLLM measures (0.33 utils/mem_utils.py `memory_profiling`, the same in 0.32): non-KV memory = what free memory
fell by since start-up plus (torch peak - torch allocated after the profile), i.e. the peak the profile reached
over what was allocated before it; a tensor kept allocated (the workspace) counts once either way. The V2 runner's
`profile_run` (v1/worker/gpu/model_runner.py) runs `_dummy_run(max_num_batched_tokens, skip_attn=True)`: no
attention metadata, so each DeepSeek-V4 layer takes its profile path (`attn_metadata is None` / not a dict). The
nvidia model (models/deepseek_v4/nvidia/model.py) has no @support_torch_compile and runs eagerly (breakable CUDA
graphs, config/vllm.py DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES sets CompilationMode.NONE), so a tensor lives
while a Python name holds it.

The peak is a max over the forward, not a sum. Layer by layer, the largest moment is a CSA layer (compress ratio
4) inside the indexer (model_executor/layers/sparse_attn_indexer.py `sparse_attn_indexer`, profile branch), which
allocates a 512 MiB logits stand-in (envs.py VLLM_SPARSE_INDEXER_MAX_LOGITS_MB) and, at TP > 1, the top-k row
exchange's 2 x tokens x index_topk x 4 B (`_reserve_row_shard_exchange_transient`; on by default:
indexer.py `tp_prefill_row_sharding_supported` holds unless the CUDA-graph mode is FULL). Live beside them:
- DeepseekV4Model.forward's names for the last layer's output [N, H] and its residual [N, hc, H] (plus post_mix
  [N, hc] and res_mix [N, hc, hc] in float32), which the caller keeps while the layer runs;
- the layer's new residual, mixes and attention input from `mhc_fused_post_pre_tilelang` (kernels/mhc/tilelang.py:
  fresh tensors, not in place);
- DeepseekV4Attention.forward (attention.py): `_alloc_attn_out` [N, padded heads, head_dim] bf16, qr_kv [N, q_lora
  + head_dim], the normed qr and kv (`fused_q_kv_rmsnorm` writes new ones), the compressor's float32 kv_score
  [N, 2 x 2 x head_dim], the indexer's [N, 2 x 2 x index_head_dim] and its weights [N, index_n_heads] bf16;
- `_prepare_and_attn`: q padded to the FlashMLA head count (`_fused_qnorm_rope_kv_insert`'s profile branch pads
  with F.pad; nvidia/flashmla.py `get_padded_num_q_heads`: 64, or 128 above 64 heads) and the indexer's fp8 q
  [N, index_n_heads, index_head_dim] with its float32 weights (common/ops/fused_indexer_q.py).
The other moments are smaller: a CSA layer's q projection before the pad holds the unpadded q [N, heads x
head_dim] instead of the logits (`pad_moment`); HCA and window layers have no indexer; the MoE half holds the two
residuals, the FFN input and the MoE's own tensors, its intermediates being in the workspace. DeepSeek-V4-Flash at
TP 4, 8,192 tokens: 2,404.2 MiB at the indexer, 1,988.2 MiB at the pad.

The workspace (v1/worker/workspace.py `get_simultaneous`: one buffer per rank, each view rounded up to 256 B, grown
to the largest request and kept) holds the largest of: FlashMLA's prefill reservation (flashmla.py `forward_mqa`,
profile branch), the indexer's K gather (`sparse_attn_indexer`), and the MoE kernel's two buffers
(fused_moe/modular_kernel.py `_allocate_buffers`). On Hopper vLLM picks Humming's indexed MoE kernel for
DeepSeek-V4's MXFP4 experts (fused_moe/oracle/mxfp4.py `_get_priority_backends`: TRTLLM and DeepGEMM are SM 10
kernels, `prioritize_humming` puts Humming ahead of Marlin on SM 9.0; fused_humming_moe.py
`get_humming_moe_gemm_type`: indexed without expert parallelism); Marlin is its fallback, and its larger buffers
are the one residual kvplan cannot see (`marlin_request`). 0.32.0's sources for all of the above are 0.33.0's but
for the Humming input dtype (0.33 `_humming_input_schema` runs Hopper's MXFP8 activations as block FP8, 1 B; 0.32
passes no activation key, so bf16, 2 B).

The older releases (`Dsv4Release`, what differs, each read): 0.31.0's attention.py, compressor.py,
nvidia/flashmla.py and utils/mem_utils.py are 0.32.0's byte for byte, its nvidia/model.py differs only in the
MegaMoE / FlashInfer-EP MoE paths (SM 10.x, opt-in backends), its kernels/mhc only in ROCm's AITER path, and
three things differ: its indexer has no TP top-k row exchange (`_reserve_row_shard_exchange_transient` joined
in 0.32), its indexer gather holds max_model_len x 40 keys whatever the length (mla/indexer.py
`get_max_prefill_buffer_size`; 0.32 scales it by sparse_mla_prefill_workspace_factor), and its MoE on Hopper is
Marlin's (oracle/mxfp4.py `select_deepseek_v4_mxfp4_moe_backend` -> `_get_priority_backends`: TRTLLM MXFP8,
DeepGEMM MXFP4 (both SM 10 kernels), Marlin; no `prioritize_humming`), which kvplan then holds, so no residual.
0.23.0-0.26.0 run an eager forward (no @support_torch_compile; breakable CUDA graphs: nvidia/model.py sets
VLLM_USE_BREAKABLE_CUDAGRAPH) with the same tensors: DeepseekV4Attention.forward allocates `o_padded` [N, padded
heads, head_dim] and the same input GEMMs, q_norm / kv_norm, kv scores and F.pad of q (attention.py 0.23-0.26, one
source but for names), `mhc_fused_post_pre_tilelang` makes fresh residual / mixes / input (kernels/mhc/
tilelang.py), the indexer's profile branch is 0.31's (sparse_attn_indexer.py: K gather + radix scratch + the 512 MiB
stand-in), the MoE is Marlin's (the same priority list, 0.31's `workspace_shapes`), and FlashMLA's profile branch
(nvidia/flashmla.py `forward_mqa`, `attn_metadata is None`) reserves only the (4, M, 512) bf16 gather, no int32
indices. One order differs: `attention_impl` hands the whole indexer, its op included, to an aux stream, and
`execute_in_parallel` (utils/multi_stream_utils.py) runs the aux callables before the default one, so the stand-in
is allocated before q exists and the padded q comes after the indexer's fp8 q and weights are gone (`pad_moment`,
the larger moment there); 0.31+ return the indexer's inputs and run the op after the pad. 0.22.0 has 0.23's
attention flow inside one custom op (torch.ops.vllm.deepseek_v4_attention) and compiles the model around it
(@support_torch_compile on DeepseekV4Model): kvplan plans the eager live set and bounds what inductor may free
(`compiled_margin`). 0.20.1-0.21.0 (model_executor/layers/deepseek_v4_attention.py) run the same custom op, compiled
likewise, but `maybe_execute_in_parallel` runs the default q projection first, so the unpadded q is live at the
stand-in, and the dummy run returns before the pad; their stand-in, Marlin priority and workspace shapes, and
FlashMLA's gather reservation are 0.22's.

Expert parallelism without data parallelism (0.20.1-0.31): FusedMoE gives each of the TP ranks whole experts
(E / TP of them, intermediate width I) instead of every expert's I / TP slice; tokens stay replicated (nvidia/
model.py `_use_sequence_parallel`, 0.31: only MegaMoE or DP > 1 shard them) and Marlin still runs (the Standard
activation format: no all-to-all without DP), so only Marlin's I changes: max(I, H) and max(2I, H) are H for
Flash and Pro either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import WorkloadError
from ...model.layers import CompressedAttentionSpec
from ...model.spec import ModelSpec
from ...units import MiB
from .vllm_profile import ActivationBreakdown

LOGITS_STAND_IN = 512 * MiB   # envs.py VLLM_SPARSE_INDEXER_MAX_LOGITS_MB (512), uint8 elements = bytes
RADIX_TOPK_BYTES = 1024 * 1024   # model_executor/layers/indexer_topk.py RADIX_TOPK_WORKSPACE_SIZE
ALIGN = 256                   # workspace.py get_simultaneous: `round_up(actual, 256)` per view
PREFILL_CHUNK = 4             # DeepseekV4Attention.PREFILL_CHUNK_SIZE
INDEXER_ROWS_PER_TOKEN = 576 * 2 // 132   # indexer.py get_max_prefill_buffer_size: 8 fp8 keys per bf16 latent
BF16, F32 = 2, 4              # kernels/mhc/tilelang.py asserts bfloat16 activations and float32 mixes


@dataclass(frozen=True)
class Dsv4Release:
    """What the profile run differs in between the releases kvplan reads (module docstring)."""

    row_exchange: bool = True      # 0.32+: the indexer reserves the TP top-k row exchange
    flashmla_indices: bool = True  # 0.31+: FlashMLA's profile reservation adds int32 [N, width] + [N]
    humming: bool = True           # 0.32+: Humming's MoE kernel on Hopper; before, Marlin's
    flat_indexer: bool = False     # <= 0.31: the indexer gather holds max_model_len x 40 keys at any length
    compiled: bool = False         # 0.20.1-0.22: @support_torch_compile; the eager live set is an upper end
    # q when the indexer op allocates its stand-in: "padded" (0.31+: the op runs after the pad), "none" (0.22-0.26:
    # the op runs inside the aux-stream indexer, which execute_in_parallel starts before the q projection),
    # "unpadded" (0.20.1-0.21: maybe_execute_in_parallel runs the default q projection first; no pad in profile)
    q_at_indexer: str = "padded"
    humming_input_bytes: int = 1   # 0.33: block-FP8 inputs; 0.32: bf16


def release(version: tuple[int, int, int]) -> Dsv4Release:
    v = version[:2]
    if v >= (0, 32):
        return Dsv4Release(humming_input_bytes=1 if v >= (0, 33) else 2)
    q_at = "padded" if v >= (0, 31) else "none" if v >= (0, 22) else "unpadded"
    return Dsv4Release(row_exchange=False, flashmla_indices=v >= (0, 31), humming=False, flat_indexer=True,
                       compiled=v <= (0, 22), q_at_indexer=q_at)


LATEST = Dsv4Release()


@dataclass(frozen=True)
class Dsv4Rank:
    """What one rank's profile forward is sized by. Flash at TP 4, 8,192 tokens: 16 of 64 heads (padded to 64),
    hidden 4,096 x hc_mult 4, q_lora 1,024, an indexer of 64 heads x 128 picking 512, experts 2,048 / 4 = 512 wide."""

    tokens: int
    hidden: int
    hc: int
    heads: int
    padded_heads: int
    head_dim: int
    q_lora: int
    index_heads: int
    index_dim: int
    topk: int
    window: int
    expert_dim: int
    experts_per_token: int
    tp: int
    rel: Dsv4Release = field(default=LATEST)


def padded_heads(heads: int) -> int:
    """nvidia/flashmla.py `get_padded_num_q_heads`: the FP8 decode kernel takes 64 or 128 query heads."""
    if heads > 128:
        raise WorkloadError(f"vLLM's DeepSeek-V4 FlashMLA takes at most 128 query heads a rank, not {heads}: use a "
                            "larger tensor-parallel size")
    return 64 if heads <= 64 else 128


def rank_dims(model: ModelSpec, tokens: int, tp: int, version: tuple[int, int, int] = (0, 33, 0),
              expert_parallel: bool = False) -> Dsv4Rank:
    """`expert_parallel`: each rank holds whole experts (width I), not every expert's I / TP slice."""
    f = model.fields
    try:
        heads, experts = f["num_attention_heads"], f["moe_intermediate_size"]
        window = next(s.window for layer in model.layers for s in layer if s.window)
        return Dsv4Rank(tokens, f["hidden_size"], f["hc_mult"], heads // tp, padded_heads(heads // tp),
                        f["head_dim"], f["q_lora_rank"], f["index_n_heads"], f["index_head_dim"], f["index_topk"],
                        window, experts if expert_parallel else experts // tp, f["num_experts_per_tok"], tp,
                        release(version))
    except (KeyError, StopIteration) as missing:
        raise WorkloadError(f"kvplan sizes DeepSeek-V4's vLLM profile run from its config's {missing} field, which "
                            f"{model.name} lacks: plan it with --engine hf") from None


def layer_ratio(model: ModelSpec, index: int) -> int:
    """A layer's compress ratio as DeepseekV4Attention sets it (`max(1, rate)`: window-only layers are 1)."""
    rates = [s.compress_rate for s in model.layers[index] if isinstance(s, CompressedAttentionSpec)]
    return rates[0] if rates else 1


def _carried(d: Dsv4Rank) -> int:
    """One layer boundary's stream: output [N, H] bf16, residual [N, hc, H] bf16, post_mix [N, hc] and res_mix
    [N, hc, hc] float32. Flash: 8,192 x (4,096 x 2 + 4 x 4,096 x 2 + 4 x 4 + 16 x 4) = 336,199,680 B."""
    return d.tokens * (d.hidden * BF16 + d.hc * d.hidden * BF16 + d.hc * F32 + d.hc * d.hc * F32)


def _attention_inputs(d: Dsv4Rank) -> dict[str, int]:
    """What DeepseekV4Attention.forward holds on a CSA layer before its indexer runs (attention.py)."""
    n = d.tokens
    return {
        "attention output buffer": n * d.padded_heads * d.head_dim * BF16,       # _alloc_attn_out
        "qr_kv": n * (d.q_lora + d.head_dim) * BF16,                             # fused_wqa_wkv
        "normed qr, kv": n * (d.q_lora + d.head_dim) * BF16,                     # fused_q_kv_rmsnorm
        "compressor kv_score": n * 2 * 2 * d.head_dim * F32,                     # torch.mm(..., out_dtype=f32)
        "indexer kv_score": n * 2 * 2 * d.index_dim * F32,
        "indexer weights": n * d.index_heads * BF16,                             # weights_proj, unquantized
        "indexer fp8 q + weights": n * d.index_heads * (d.index_dim + F32),      # fused_indexer_q_rope_quant
    }


def csa_moment(d: Dsv4Rank, caller: bool = True) -> dict[str, int]:
    """The live set inside a CSA layer's indexer, by tensor. `caller`: the layer is not its stage's first (whose
    caller holds only the runner's own buffers). Flash TP 4: 336,199,680 x 2 + 536,870,912 + 25,165,824 +
    25,165,824 + 67,108,864 + 16,777,216 + 1,048,576 + 69,206,016 + 536,870,912 (q) + 536,870,912 (logits) +
    33,554,432 (row exchange) = 2,521,038,848 B = 2,404.2 MiB."""
    rows = {"caller's output and residual": _carried(d) if caller else 0, "layer's residual and input": _carried(d)}
    rows.update(_attention_inputs(d))
    q_at = d.rel.q_at_indexer   # what the default stream's q is when the indexer op runs (Dsv4Release)
    if q_at == "padded":
        rows["q (padded heads)"] = d.tokens * d.padded_heads * d.head_dim * BF16
    elif q_at == "unpadded":
        rows["q (unpadded)"] = d.tokens * d.heads * d.head_dim * BF16
    rows["indexer logits stand-in"] = LOGITS_STAND_IN
    rows["top-k row exchange"] = 2 * d.tokens * d.topk * 4 if d.tp > 1 and d.rel.row_exchange else 0
    return rows


def pad_moment(d: Dsv4Rank, caller: bool = True) -> int:
    """A CSA layer while F.pad copies q [N, heads, head_dim] to the padded heads (indexer and compressor ran first on
    their aux streams: multi_stream_utils.py `execute_in_parallel`, default_first False). Flash TP 4: 2,404.2 -
    512 - 32 + 128 (the unpadded q) = 1,988.2 MiB. 0.22-0.26 run the whole indexer op on its aux stream first, so
    its fp8 q and weights are gone by the pad, and q is not in the indexer's moment: Flash TP 4 1,860.2 - 512 -
    66 + 512 + 128 = 1,922.2 MiB, the larger of the two there. 0.20.1-0.21's dummy run returns before the pad
    (deepseek_v4_attention.py `attention_impl`): no pad moment."""
    moment = csa_moment(d, caller)
    base = sum(moment.values()) - moment["indexer logits stand-in"] - moment["top-k row exchange"]
    unpadded = d.tokens * d.heads * d.head_dim * BF16 if d.heads < d.padded_heads else 0
    if d.rel.q_at_indexer == "padded":   # 0.31+: the padded q already in the moment
        return base + unpadded
    if d.rel.q_at_indexer == "none":     # 0.22-0.26
        return base - moment["indexer fp8 q + weights"] + d.tokens * d.padded_heads * d.head_dim * BF16 + unpadded
    return base


def _views(*sizes: int) -> int:
    return sum(-(-size // ALIGN) * ALIGN for size in sizes)


def flashmla_request(d: Dsv4Rank, max_model_len: int, ratio: int) -> int:
    """flashmla.py `forward_mqa`'s profile branch: (4, M, head_dim) bf16 with M = cdiv(max_model_len, ratio) (0 on
    window layers) + window + N, int32 [N, round_up(top-k + window, 128)] indices and [N] lengths. Flash CSA at
    4,096 / 8,192: 4 x 9,344 x 512 x 2 + 8,192 x 640 x 4 + 8,192 x 4 = 59,277,312 B."""
    compressed = -(-max_model_len // ratio) if ratio > 1 else 0
    width = -(-((d.topk if ratio > 1 else 0) + d.window) // 128) * 128
    gather = PREFILL_CHUNK * (compressed + d.window + d.tokens) * d.head_dim * BF16
    if not d.rel.flashmla_indices:   # 0.20.1-0.26: the gather alone
        return _views(gather)
    return _views(gather, d.tokens * width * 4, d.tokens * 4)


def indexer_request(d: Dsv4Rank, max_model_len: int, ratio: int) -> int:
    """sparse_attn_indexer's profile branch: fp8 keys [T, index_head_dim] + [T, 4] scales + the radix top-k
    scratch, T = max_model_len x 8 x factor // ratio (attention.py DeepseekV4Indexer.max_total_seq_len; factor 5 up
    to 256K tokens, else 2: config/vllm.py). Flash at 4,096: T = 40,960, 5,242,880 + 163,840 + 1,048,576 B."""
    factor = 5 if max_model_len <= 256 * 1024 or d.rel.flat_indexer else 2   # <= 0.31: 40 = 8 x 5 always
    rows = max_model_len * INDEXER_ROWS_PER_TOKEN * factor // ratio
    return _views(rows * d.index_dim, rows * 4, RADIX_TOPK_BYTES)


def humming_request(d: Dsv4Rank, act_bytes: int) -> int:
    """fused_humming_moe.py `get_buffer_metas` / `_workspace_shapes` for the indexed GEMM (M = N tokens, K = H,
    I = the expert width a rank holds): workspace1 = max(output [M, K] bf16, down input [M x top-k, I], gate-up input
    [M, K]) in the input dtype, workspace2 = max(down output [M x top-k, K], gate-up output [M x top-k, 2I]) bf16
    (humming schema: c_dtype is the model dtype); `_allocate_buffers` asks for both at once. Flash TP 4:
    max(67,108,864, 25,165,824, 33,554,432) + max(402,653,184, 100,663,296) = 469,762,048 B."""
    rows = d.tokens * d.experts_per_token
    first = max(d.tokens * d.hidden * BF16, rows * d.expert_dim * act_bytes, d.tokens * d.hidden * act_bytes)
    return _views(first, max(rows * d.hidden * BF16, rows * 2 * d.expert_dim * BF16))


def marlin_request(d: Dsv4Rank) -> int:
    """marlin_moe.py MarlinExperts.workspace_shapes: [M x top-k, max(I, K)] and [M x top-k x max(2I, K)] bf16.
    Flash TP 4: 49,152 x 4,096 x 2 x 2 = 805,306,368 B."""
    rows = d.tokens * d.experts_per_token
    return _views(rows * max(d.expert_dim, d.hidden) * BF16, rows * max(2 * d.expert_dim, d.hidden) * BF16)


def humming_input_bytes(version: tuple[int, int, int]) -> int:
    """0.33 fused_moe/oracle/mxfp4.py `_humming_input_schema`: Hopper runs the checkpoint's MXFP8 activations as
    block FP8 (1 B); 0.32's Mxfp4MoEMethod takes no activation key, so Humming keeps bf16 (2 B)."""
    return 1 if version[:2] >= (0, 33) else 2


def workspace_bytes(model: ModelSpec, d: Dsv4Rank, max_model_len: int, layers: range, moe: int) -> int:
    """The shared workspace after the profile: its largest request. `moe`: the MoE kernel's."""
    present = {layer_ratio(model, i) for i in layers}
    attention = max(flashmla_request(d, max_model_len, r) for r in present)
    index = max((indexer_request(d, max_model_len, r) for r in present if r == 4), default=0)
    return max(attention, index, moe)


def moe_request(d: Dsv4Rank, version: tuple[int, int, int], sm: int) -> int:
    """The MoE kernel's workspace request: Humming's on Hopper (Marlin's before 0.32); none on SM 10.x, whose
    TRTLLM kernel is monolithic (fused_moe/experts/trtllm_mxfp4_moe.py `workspace_shapes` (0,), (0,): FlashInfer
    keeps its own scratch)."""
    if sm == 10:
        return 0
    return humming_request(d, humming_input_bytes(version)) if d.rel.humming else marlin_request(d)


def dsv4_activation(model: ModelSpec, base: ActivationBreakdown, max_model_len: int, tokens: int, tp: int,
                    layers: range, version: tuple[int, int, int], sm: int,
                    expert_parallel: bool = False) -> ActivationBreakdown:
    """vLLM's non-KV memory beyond the weights for a stage: max(the forward's peak, the sampler's) + the workspace
    + the receive buffers `base` holds in the profile's peak. The forward's peak is the larger CSA moment; a stage
    without a CSA layer has no indexer, and kvplan refuses to guess its peak. A later stage's [N, hc_mult, H] receive
    buffer (vllm_runner.receive_buffers) is placed where the runner makes it, as for every model: DeepSeek-V4 runs PP
    on the V2 runner only (0.31+), whose `load_model` makes it before the profile, so it is persistent memory
    (`receive_buffer_term`, a line of its own) and `base.pp_buffer_bytes` is 0 here."""
    d = rank_dims(model, tokens, tp, version, expert_parallel)
    csa = [i for i in layers if layer_ratio(model, i) == 4]
    if not csa:
        raise WorkloadError("kvplan sizes DeepSeek-V4's vLLM profile run on stages that hold a CSA (ratio 4) layer: "
                            "use fewer pipeline stages")
    moment = csa_moment(d, caller=csa[-1] > layers.start)   # a stage's first layer has no caller-held stream
    padding = pad_moment(d, caller=csa[-1] > layers.start)
    forward = max(sum(moment.values()), padding)
    at = ("at the indexer's 512 MiB logits stand-in" if forward > padding
          else "while F.pad copies q to the padded heads, after the indexer op")
    workspace = workspace_bytes(model, d, max_model_len, layers, moe_request(d, version, sm))
    received = base.pp_buffer_bytes
    total = max(forward, base.sampler_bytes) + received + workspace
    formula = (f"max(DeepSeek-V4 forward {forward / MiB:,.1f} MiB (a CSA layer {at}; at the stand-in: "
               f"{_largest(moment)}), sampler {base.sampler_bytes / MiB:,.1f} MiB) + shared workspace "
               f"{workspace / MiB:,.1f} MiB (the largest of FlashMLA's prefill gather, the indexer's key gather and "
               "the MoE kernel's buffers)" + (f" + PP receive buffers {received / MiB:,.1f} MiB"
                                              if received else ""))
    return ActivationBreakdown(forward, base.sampler_bytes, received, total, formula)


def _largest(moment: dict[str, int]) -> str:
    top = sorted(moment.items(), key=lambda kv: -kv[1])[:4]
    return ", ".join(f"{name} {value / MiB:,.1f}" for name, value in top) + " MiB, ..."


def marlin_margin(model: ModelSpec, max_model_len: int, tokens: int, tp: int, version: tuple[int, int, int]) -> int:
    """How much larger the workspace is if vLLM runs Marlin's MoE kernel instead of Humming's (the fallback
    `_get_priority_backends` lists next). Flash TP 4 at 4,096 / 8,192: 805,306,368 - 469,762,048 = 335,544,320 B.
    0 before 0.32, where Marlin is the kernel kvplan holds."""
    d = rank_dims(model, tokens, tp, version)
    if not d.rel.humming:
        return 0
    every = range(model.num_layers)
    held = workspace_bytes(model, d, max_model_len, every, moe_request(d, version, 9))
    return workspace_bytes(model, d, max_model_len, every, marlin_request(d)) - held



def compiled_margin(model: ModelSpec, tokens: int, tp: int, version: tuple[int, int, int]) -> int:
    """0.20.1-0.22 (compiled): how much less than the eager live set the profile may hold. Their attention runs
    eagerly inside one custom op (torch.ops.vllm.deepseek_v4_attention, whose inputs x and o_padded stay live), the
    residual stream it feeds is needed after it (the post mix), so the one thing inductor may free before the
    indexer's moment that the eager names hold is the previous layer's output and residual, consumed by
    mhc_fused_post_pre. Flash TP 2 at 16,384 tokens: 16,384 x (4,096 x 2 + 4 x 4,096 x 2 + 4 x 4 + 16 x 4) =
    672,399,360 B."""
    d = rank_dims(model, tokens, tp, version)
    return _carried(d) if d.rel.compiled else 0
