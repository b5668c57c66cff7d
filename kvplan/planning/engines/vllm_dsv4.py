"""DeepSeek-V4's caches as vLLM 0.33.0 registers them, one rank's worth (every cache is one replicated KV head:
`max_tp_shards=1`, so TP does not shrink them). Each layer registers, in vllm/models/deepseek_v4/:
- attention.py `DeepseekV4Attention.__init__` -> v1/attention/backends/mla/sparse_swa.py `DeepseekV4SWACache`: the
  sliding window, a SlidingWindowMLASpec of 64-token blocks (its `block_size=64` default), 584 B a token
  (`packed_bytes_per_token`: 448 fp8 NoPE + 64 bf16 RoPE = 128 B + 8 B of UE8M0 scales), the page padded to 576 B;
- CSA / HCA layers (compress ratio 4 / 128): attention.py `get_kv_cache_spec`, an MLAAttentionSpec of the model's
  block with `tokens_per_state` = the ratio, 584 B an entry (`state_content_bytes`), `alignment=576`; and
  compressor.py `CompressorStateCache`, a float32 SlidingWindowMLASpec of 2 x coff x head_dim per token (kv and
  score states; coff 2 where windows overlap, ratio 4), window coff x ratio, blocks of 4 tokens (ratio 4) or 8
  (ratio 128), padded to 576 B;
- CSA layers: attention.py `DeepseekV4Indexer`: its key cache `DeepseekV4IndexerCache` (MLAAttentionSpec,
  tokens_per_state 4, 128 fp8 + 128 // 128 x 4 B scale = 132 B an entry; 68 B with indexer_kv_dtype mxfp4, which
  kvplan does not take) and its compressor's state (CompressorStateCache over index_head_dim).
Every alignment is 576 because the FlashMLA path writes `cache_dtype = "fp8_ds_mla"` back onto the cache config
(attention.py `_resolve_dsv4_kv_cache_dtype`), which the indexer and compressor specs read.
DeepseekV4ForCausalLM joined vLLM in 0.20.0 (model_executor/models/registry.py; not in 0.19.1). The grouping these
specs go through (`vllm_kv.packed_groups`) is 0.33.0's and 0.32.0's: 0.32's kv_cache_utils.py
`_get_packed_kv_cache_groups` differs from 0.33's kv_cache_planning.py only in tagging EAGLE groups;
`_get_kv_cache_bytes_per_block`, `_approximate_gcd`, `get_max_concurrency_for_kv_cache_config`, the spec classes
and the DeepSeek-V4 cache layers are the same source (its DeepseekV4SWACache lacks only the block stride alignment
0.33 leaves at None). 0.31.0 has 0.32.0's grouping, block price and start-up check for these caches (its
`_get_kv_cache_bytes_per_block` differs only in GLM-5-Next's layout and in rounding to block stride alignments,
None here; the cache layers are 0.32's source). 0.20.1-0.26 register the same caches but group them in layer
tuples, padding the sliding pages to the compressed ones (`vllm_kv.tuple_groups`, DSV4_TUPLES below); 0.29-0.30
change `_get_packed_kv_cache_groups` and the cache layers (no max_tp_shards) and 0.27-0.28 overlay unpadded groups:
not read line by line, so refused."""

from __future__ import annotations

import dataclasses

from ...errors import WorkloadError
from ...model.layers import CompressedAttentionSpec, SlidingWindowSpec
from ...model.spec import ModelSpec
from .vllm_dsv4_peak import compiled_margin, marlin_margin, release
from .vllm_kv import SLOTS, TUPLES, VllmLayerSpec, tuple_blocks_per_request

DSV4_FROM = (0, 20)      # the release DeepSeek-V4 joined vLLM
DSV4_READ = ((0, 31), (0, 32), (0, 33))   # the releases whose KV grouping kvplan mirrors
# 0.22-0.26: the same caches (0.22.0-0.26.0 models/deepseek_v4/attention.py, compressor.py, sparse_swa.py: one
# 584 B fp8_ds_mla entry a token or a compressed token, 576 B alignment with fp8_ds_mla, blocks 64 / 4 / 8 / the
# model's), grouped in layer tuples (vllm_kv.tuple_groups) with one block id costing TUPLES' or SLOTS' bytes.
# 0.20.1 and 0.21.0 too: the same kv_cache_utils.py functions as 0.22.0 (their check's message says "models's"), the
# same caches (model_executor/layers/deepseek_v4_attention.py, deepseek_compressor.py, sparse_swa.py); 0.20.0 not
# read. 0.27-0.28 overlay the groups (0.27.1 `_get_packed_kv_cache_layout`, unpadded pages), 0.29-0.30 group
# otherwise: refused.
DSV4_TUPLES = {(0, 20): TUPLES, (0, 21): TUPLES, (0, 22): TUPLES, (0, 23): SLOTS, (0, 24): SLOTS, (0, 25): SLOTS,
               (0, 26): SLOTS}
TUPLES_FROM = (0, 20, 1)   # 0.20.0, the release DeepSeek-V4 joined, not read
ENTRY_BYTES = 584        # fp8_ds_mla entry of a 512-wide head (448 + 64 x 2 + 8), attention.py / sparse_swa.py
PAGE_ALIGNMENT = 576     # `alignment=576 if uses_fp8_ds_mla_layout`
SWA_BLOCK = 64           # DeepseekV4SWACache(block_size=64)
STATE_BLOCKS = {4: 4, 128: 8}   # CompressorStateCache: block_size 4 for ratio 4, 8 for ratio 128 (asserted)
INDEXER_QUANT_BLOCK = 128       # DeepseekV4Indexer.quant_block_size: one fp32 scale per 128 keys
BLOCK = 256              # FLASHMLA_SPARSE_DSV4 / DEEPSEEK_V4_INDEXER `get_supported_kernel_block_sizes` [256]


def is_dsv4(model: ModelSpec) -> bool:
    return model.model_type.startswith("deepseek_v4")


def dsv4_layout(version: tuple[int, int, int]) -> str:
    """The packed layout of the release: "" for 0.31-0.33 (`vllm_kv.packed_groups`), else TUPLES / SLOTS."""
    return DSV4_TUPLES.get(version[:2], "")


def check_dsv4(model: ModelSpec, version: tuple[int, int, int], capability, kv_bits: int, block: int | None,
               speculative, pp: int = 1, parallel: tuple[int, bool] = (1, False), act=None,
               pool_given: bool = False) -> None:
    """Refuse, in one line, what kvplan cannot size exactly for DeepSeek-V4 on vLLM. `parallel`: (data-parallel
    size, expert parallelism); `act`: the activation dtype; `pool_given`: --kv-cache-memory-bytes was passed."""
    if version[:2] < DSV4_FROM:
        raise WorkloadError(f"vLLM {'.'.join(map(str, version))} has no DeepSeek-V4 (DeepseekV4ForCausalLM joined "
                            "in 0.20.0): pick vLLM 0.33")
    if (version[:2] not in DSV4_READ and version[:2] not in DSV4_TUPLES) or version[:3] < TUPLES_FROM:
        raise WorkloadError(f"kvplan sizes DeepSeek-V4's vLLM cache from the groupings of 0.20.1-0.26 and 0.31-0.33 "
                            f"only (0.27-0.30 group its pages otherwise; 0.20.0 not read), not "
                            f"{'.'.join(map(str, version))}: pick --engine-version 0.33.0, or --engine hf")
    if dsv4_layout(version) and kv_bits != 8:
        # 0.20.1-0.22.0 assert an fp8 cache (attention.py: 'DeepseekV4 only supports fp8 kv-cache format'); 0.23-0.26
        # give 'auto' a plain bf16 row (`_resolve_dsv4_kv_cache_dtype`) whose pages kvplan has not read
        raise WorkloadError(f"kvplan sizes DeepSeek-V4 on vLLM {'.'.join(map(str, version[:2]))} with an fp8 cache "
                            "(fp8_ds_mla) only: pass --kv-cache-dtype fp8")
    if dsv4_layout(version) and pp > 1:   # a stage's share of the layer tuples is not read
        raise WorkloadError(f"kvplan plans DeepSeek-V4 on vLLM {'.'.join(map(str, version[:2]))} without pipeline "
                            "parallelism only: use --pp 1, or --engine-version 0.33.0")
    if capability is None or capability[0] not in (9, 10):
        # SM 12.x defaults to FLASHINFER_MLA_SPARSE_DSV4 (nvidia/model.py `_select_dsv4_attn_cls`): plain rows,
        # 512 B alignment, not read; below SM 9.0 FlashMLA does not run
        raise WorkloadError("kvplan sizes DeepSeek-V4 on vLLM's FlashMLA path (Hopper or Blackwell SM 10.x GPUs) "
                            "only: pick an H100 / H200 / B200-class GPU, or --engine hf")
    _check_profile(capability, parallel, act, pool_given, version)
    if kv_bits not in (8, 16):
        raise WorkloadError("DeepSeek-V4 on vLLM's FlashMLA path caches fp8_ds_mla: use --kv-cache-dtype auto or fp8")
    if block is not None and block != BLOCK:
        raise WorkloadError(f"DeepSeek-V4's FlashMLA and indexer kernels take {BLOCK}-token blocks: use "
                            f"--block-size {BLOCK} or leave it out")
    if speculative is not None:   # the MTP layer adds caches and extra_retained_tokens: not read
        raise WorkloadError("kvplan does not plan DeepSeek-V4's MTP drafter on vLLM: plan it without speculative "
                            "decoding")


def _check_profile(capability, parallel: tuple[int, bool], act, pool_given: bool, version=(0, 33, 0)) -> None:
    """What the profile-run figure (vllm_dsv4_peak.py) was read for: bf16, one TP group (expert parallelism inside
    it before 0.32, where Marlin's MoE runs), Hopper's MoE kernel."""
    if act is not None and act.name != "bfloat16":   # kernels/mhc/tilelang.py asserts bfloat16 activations
        raise WorkloadError("vLLM's DeepSeek-V4 hyper-connection kernels take bfloat16 activations: use --dtype auto "
                            "or bfloat16")
    if parallel[0] > 1:   # DP shards the MoE's tokens (0.31-0.33 nvidia/model.py `_use_sequence_parallel`): not read
        raise WorkloadError("kvplan sizes DeepSeek-V4's vLLM profile run without data parallelism: plan one engine "
                            "with tensor / pipeline parallelism (each data-parallel engine is one)")
    if parallel[1] and release(version).humming:
        # 0.32+: EP picks Humming's grouped GEMM (fused_humming_moe.py `get_humming_moe_gemm_type`), not read;
        # before, Marlin's buffers with whole experts (vllm_dsv4_peak.py), planned
        raise WorkloadError(f"kvplan sizes DeepSeek-V4's vLLM {'.'.join(map(str, version[:2]))} profile run without "
                            "expert parallelism (it picks Humming's grouped MoE kernel, not read): leave out "
                            "--enable-expert-parallel, or plan vLLM 0.31")
    if capability[0] == 10 and not pool_given:
        # fused_moe/oracle/mxfp4.py `_get_priority_backends`: FLASHINFER_TRTLLM_MXFP4_MXFP8 first on SM 10.x
        raise WorkloadError("kvplan sizes DeepSeek-V4's vLLM profile run on Hopper, whose MoE runs Humming's "
                            "(before 0.32 Marlin's) kernel; on SM 10.x it runs FlashInfer's TRTLLM kernel, whose "
                            "scratch kvplan has not read: plan an H100 / H200, or pass vLLM's 'Available KV cache "
                            "memory' as --kv-cache-memory-bytes")


def dsv4_layer_specs(model: ModelSpec, layer_ids: range) -> list[VllmLayerSpec]:
    """The caches the layers register (vLLM registers the indexer's first, then the window, the compressed entries
    and the compressor state; the order moves groups, not sizes). DeepSeek-V4-Flash: 43 windows, 41 compressed
    layers (21 CSA + 20 HCA) of 2 caches each, 21 indexers of 2: 43 + 82 + 42 = 167 specs."""
    specs = []
    for index in layer_ids:
        for spec in model.layers[index]:
            if isinstance(spec, SlidingWindowSpec):
                specs.append(dataclasses.replace(_window(spec.k_head_dim, spec.sliding_window), layer=index))
            elif isinstance(spec, CompressedAttentionSpec):
                specs += [dataclasses.replace(x, layer=index) for x in _compressed(spec)]
    return specs


def _window(head_dim: int, window: int) -> VllmLayerSpec:
    if head_dim != 512:   # the 584-byte entry is the layout of a 512-wide head with a 64-wide RoPE
        raise WorkloadError(f"kvplan sizes DeepSeek-V4's fp8_ds_mla entries for head_dim 512, not {head_dim}: plan "
                            "it with --engine hf")
    # 64 x 584 = 37,376 B -> 65 x 576 = 37,440 B a page
    return VllmLayerSpec("sliding", ENTRY_BYTES, window=window, own_block=SWA_BLOCK, alignment=PAGE_ALIGNMENT,
                         packed=True)


def _state(head_dim: int, ratio: int, overlap: bool) -> VllmLayerSpec:
    coff = 2 if overlap else 1
    # CSA: 4 tokens x 2 x 2 x 512 x 4 B = 32,768 -> 32,832 B; its indexer's: 4 x 2 x 2 x 128 x 4 = 8,192 -> 8,640 B;
    # HCA: 8 x 2 x 512 x 4 = 32,768 -> 32,832 B
    return VllmLayerSpec("sliding", 2 * coff * head_dim * 4, window=coff * ratio, own_block=STATE_BLOCKS[ratio],
                         alignment=PAGE_ALIGNMENT, packed=True)


def _compressed(spec: CompressedAttentionSpec) -> list[VllmLayerSpec]:
    ratio = spec.compress_rate
    if ratio not in STATE_BLOCKS or spec.overlap != (ratio == 4):
        raise WorkloadError(f"vLLM's DeepSeek-V4 compressor takes ratios 4 (overlapping) and 128, not {ratio}: plan "
                            "it with --engine hf")
    # the model's block: CSA 256 // 4 x 584 = 37,376 -> 37,440 B, HCA 2 x 584 = 1,168 -> 1,728 B
    out = [_window(spec.head_dim, spec.sliding_window),
           VllmLayerSpec("mla", ENTRY_BYTES, tokens_per_state=ratio, alignment=PAGE_ALIGNMENT, packed=True),
           _state(spec.head_dim, ratio, spec.overlap)]
    if spec.index_head_dim:
        keys = spec.index_head_dim + spec.index_head_dim // INDEXER_QUANT_BLOCK * 4   # 132 B: 64 x 132 -> 8,640 B
        out += [VllmLayerSpec("mla", keys, tokens_per_state=ratio, alignment=PAGE_ALIGNMENT, packed=True),
                _state(spec.index_head_dim, ratio, spec.overlap)]
    return out


def packed_notes(groups, max_model_len: int, batched_tokens: int, inflight: int) -> list[str]:
    """Each group's layers, block, page and per-token bytes, and the blocks one max_model_len request takes."""
    from .vllm_kv import cdiv, max_usage_bytes   # noqa: PLC0415 (same stage)
    bs = groups.block_size
    parts, blocks = [], []
    for group in groups.groups:
        first = group[0]
        tokens = first.block_tokens(bs)
        here = [x for x in group if groups.held is None or x.layer in groups.held]   # PP: this stage's share
        page = sum(x.page_bytes(bs) for x in here)
        need = max(cdiv(max_usage_bytes(x, bs, max_model_len, batched_tokens, inflight), x.page_bytes(bs))
                   for x in group)
        blocks.append(need)
        what = (f"window {first.window}" if first.kind == "sliding" and first.own_block == SWA_BLOCK
                else f"compressor state (window {first.window})" if first.kind == "sliding"
                else "compressed entries + indexer keys")
        parts.append(f"{what}: {len(here)} layers, {tokens}-token blocks of {page:,} B ({page // tokens:,} B a "
                     f"token), {need:,} blocks a request")
    priced = {TUPLES: "0.20.1-0.22: the compressed group's pages x the most layer tuples",
              SLOTS: "0.23-0.26: each page size x the most layers of it in a group"}.get(
        groups.layout, f"the widest group{'' if groups.held is None else ' on this stage'}")
    return [f"DeepSeek-V4 on vLLM {'0.20.1-0.26' if groups.layout else '0.31-0.33'}: {len(groups.groups)} KV-cache "
            f"groups packed side by side in one block id of {groups.bytes_per_block:,} B ({priced}; "
            "block-outermost layout): " + "; ".join(parts)
            + f"; a {max_model_len:,}-token request takes {' + '.join(f'{b:,}' for b in blocks)} = {sum(blocks):,} "
            "blocks (each sliding cache holds its window plus the tokens in flight, capped at max_model_len)"
            + (f", which the concurrency counts as {tuple_blocks_per_request(groups, blocks):,} (each group's blocks "
               "x its pages over the first group's pages)" if groups.layout else ""),
            "every DeepSeek-V4 cache is one KV head that vLLM replicates on each TP rank (max_tp_shards=1), in "
            "DeepSeek's fp8_ds_mla layout whatever --kv-cache-dtype says ('auto' becomes fp8: attention.py "
            "`_resolve_dsv4_kv_cache_dtype`)"]


def workspace_warning(model: ModelSpec, s, sm: int) -> str | None:
    """What the DeepSeek-V4 activation figure (vllm_dsv4_peak.py) cannot see, bounded: on Hopper the MoE kernel
    vLLM runs (Humming's, held; Marlin's fallback asks the shared workspace for more: the upper end); on SM 10.x,
    planned only from a given pool, FlashInfer's own MoE scratch in the over-the-card check."""
    if sm == 10:
        return ("vLLM's DeepSeek-V4 MoE on SM 10.x runs FlashInfer's TRTLLM kernel, whose scratch kvplan has not "
                "read: the activation figure leaves it out, so the check that weights, activation and the given pool "
                "fit the card passes by up to that much too easily; compare with vLLM's start-up log")
    if s.kv_cache_memory_bytes is not None:
        return None
    rel = release(s.version_tuple)
    if not rel.humming:
        return _marlin_warning(model, s, rel)
    margin = marlin_margin(model, s.max_model_len, s.max_num_batched_tokens, s.tensor_parallel_size,
                           s.version_tuple)
    return (f"vLLM's DeepSeek-V4 profile run is sized from vLLM 0.33.0's source, no start-up log checks it: kvplan's "
            "activation figure holds a CSA layer's live set at the indexer's logits stand-in "
            "(VLLM_SPARSE_INDEXER_MAX_LOGITS_MB at its 512 default) and the shared workspace with the buffers of "
            "Humming's MoE kernel, which vLLM picks on Hopper; if it falls back to Marlin's ('Using 'MARLIN' Mxfp4 "
            f"MoE backend' in its log) the workspace is {margin / 2**20:,.1f} MiB larger: the profile run takes 0 to "
            f"{margin / 2**20:,.1f} MiB more than kvplan's activation figure and the pool is high by as much (the "
            "CUDA-graph estimate beside it is kvplan's generic one, not read for DeepSeek-V4's breakable graphs); "
            "pass vLLM's 'Available KV cache memory' as --kv-cache-memory-bytes to plan the KV from it")


def _marlin_warning(model: ModelSpec, s, rel) -> str:
    """0.20.1-0.31 (Marlin's MoE, the one Hopper kernel there: nothing left to bound) and, for 0.20.1-0.22, the
    compiled forward: the figure is its eager live set, the floor what the profile must hold anyway."""
    v = ".".join(map(str, s.version_tuple[:2]))
    head = (f"vLLM {v}'s DeepSeek-V4 profile run is sized from its source (a CSA layer's largest live set, at the "
            "indexer's 512 MiB logits stand-in or at the pad of q, and the shared workspace with Marlin's MoE "
            "buffers, the one Hopper MXFP4 kernel of this release)")
    tail = ("; the CUDA-graph estimate beside it is kvplan's generic one; pass vLLM's 'Available KV cache memory' as "
            "--kv-cache-memory-bytes to plan the KV from it")
    if not rel.compiled:
        return head + tail
    margin = compiled_margin(model, s.max_num_batched_tokens, s.tensor_parallel_size, s.version_tuple)
    return (head + f"; {v} compiles the model (@support_torch_compile) around the attention's eager custom op: "
            "kvplan holds the eager live set, and inductor may free the previous layer's output and residual "
            f"before the indexer's moment, so the profile run takes 0 to {margin / 2**20:,.1f} MiB less than "
            "kvplan's activation figure and the pool is low by up to as much" + tail)
