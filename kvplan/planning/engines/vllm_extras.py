"""What vLLM takes from the KV budget besides weights, activation and non-torch memory, each a line of the plan
(`Plan.extra`): its CUDA-graph estimate (kvplan.planning.engines.vllm_cudagraph), a drafter's weights
(kvplan.planning.engines.spec_decode), LoRA adapter slots (kvplan.planning.engines.lora); and the KV layers one rank holds as vLLM
sizes them for these settings (`stage_specs`: the drafter's layers, Mamba state pages and widened conv states).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...dtypes import DType, resolve_dtype
from ...gpus import GPU
from ...units import MiB, fmt_bytes
from . import lora as lora_rules
from . import spec_decode
from . import vllm_cudagraph as cudagraph
from . import vllm_runner as runner
from .lora import LoraSettings
from .spec_decode import Speculative
from .vllm_dsv4 import dsv4_layer_specs, is_dsv4
from .vllm_kv import ds_mla_layout, page_rule, rank_layer_specs, with_ds_mla_layout
from .vllm_profile import VllmSettings


@dataclass(frozen=True)
class Extras:
    """What a plan serves besides the model: a drafter, adapter slots."""

    speculative: Speculative | None = None
    lora: LoraSettings | None = None


GRAPHS = "CUDA graphs (estimate)"
GRAPHS_CAPTURED = "CUDA graphs (captured after)"   # with --kv-cache-memory-bytes: real, but not in the budget


def graphs_for(model, shape, device: GPU, s: VllmSettings, act: DType, extras: Extras, v2: bool = False):
    """A function of a stage's layers giving vLLM's CUDA-graph estimate there (None where vLLM makes none: the V2
    runner's estimate is 0 through 0.28, v1/worker/gpu/model_runner.py 0.28:843)."""
    version = s.version_tuple
    if not cudagraph.computed(version, s.enforce_eager):
        return lambda layers: None
    if v2 and version[:2] < (0, 29):
        return lambda layers: None
    sm100 = device.compute_capability is not None and device.compute_capability[0] == 10
    sizes = cudagraph.capture_sizes(s.max_num_seqs, s.max_num_batched_tokens, version, spec_tokens=s.spec_tokens,
                                    sm100=sm100, max_capture=1024 if model.model_type == "gpt_oss" else None)
    lora_cases = 2 if extras.lora is not None else 1      # graphs with and without active adapters

    def at(layers: range):
        dims = cudagraph.graph_dims(shape, model.model_type, s.tensor_parallel_size, layers, int(act.bytes))
        est = cudagraph.estimate(dims, sizes, s.max_num_seqs, s.spec_tokens, v2=v2)
        if lora_cases == 1:
            return est
        return dataclasses.replace(est, total_bytes=est.total_bytes + (est.total_bytes - max(
            est.piecewise_first, est.full_first)), formula=est.formula + " x 2 LoRA cases (first captures once)")
    return at


def runner_is_v2(model, shape, s: VllmSettings, extras: Extras) -> bool:
    """The model runner vLLM picks for this model and settings (`vllm_runner.uses_v2`)."""
    kinds = model.spec_kinds - {"none"}
    return runner.uses_v2(s.version_tuple, model.architecture, moe=shape.has_experts, quantized=shape.quant is not None,
                          hybrid="state" in kinds and len(kinds) > 1, attention_free=kinds <= {"state"},
                          speculative=extras.speculative.method if extras.speculative else None,
                          pp=s.pipeline_parallel_size)


SAMPLER_BUFFERS = "V2 sampler buffers"
RECEIVE_BUFFERS = "PP receive buffers"
MLA_COPIES = "MLA bf16 W_UK / W_UV"
DSV4_TOPK = "DeepSeek-V4 top-k index buffer"


def mla_copies_bytes(shape, tp: int, layers: range, act_bytes: int) -> int:
    """The model-dtype copies of kv_b_proj vLLM's MLA attention keeps when kv_b_proj is quantized
    (layers/attention/mla_attention.py `process_weights_after_loading`, 0.20-0.33: `get_and_maybe_dequant_weights`
    returns the weight itself when it is already in the model dtype, a new tensor otherwise, split into W_UK_T and
    W_UV; 0.33 :408 `split_kv_b_proj`): kv_lora_rank x heads / TP x (qk_nope + v_head_dim) x 2 B a layer.
    DeepSeek-V3's fp8 checkpoint: 512 x 128 x 256 x 2 B = 32 MiB a layer at TP 1, 4 MiB at TP 8 (244 MiB over 61
    layers). Loaded with the weights, so vLLM's 'Model loading took' counts it."""
    q = shape.quant
    if q is None:
        return 0
    total = 0
    for index in layers:
        a = shape.layers[index].mixer if index < len(shape.layers) else None
        if a is None or not getattr(a, "kv_lora_rank", 0):
            continue
        if ("attention", -1) in q.skip or ("attention", index) in q.skip:
            continue
        heads = -(-a.heads // tp)
        total += a.kv_lora_rank * heads * (a.head_dim - a.qk_rope_dim + a.v_head_dim) * act_bytes
    return total


def extra_lines(model, shape, s: VllmSettings, act: DType, graph, extras: Extras, layers: range,
                 moe_ranks: int, v2: bool = False, last: bool = True, received: int = 0) -> dict[str, int]:
    """The per-GPU lines beyond weights / activation / non-torch, each taken from the KV budget. `received`: a
    later pipeline stage's receive buffers where vLLM counts them as persistent memory (V2 0.27+,
    `vllm_runner.receive_buffer_term`)."""
    out: dict[str, int] = {}
    buffers = runner.persistent_bytes(s.version_tuple, v2, s.max_num_seqs, shape.vocab, s.spec_tokens) if last else 0
    if buffers:
        out[SAMPLER_BUFFERS] = buffers
    if received:
        out[RECEIVE_BUFFERS] = received
    copies = mla_copies_bytes(shape, s.tensor_parallel_size, layers, int(act.bytes))
    if copies:
        out[MLA_COPIES] = copies
    if is_dsv4(model):
        # nvidia/model.py DeepseekV4Model.__init__ (0.20.1-0.33, each read): int32 [max_num_batched_tokens,
        # index_topk] that every indexer shares, allocated with the model, so in vLLM's 'Model loading took'; Flash:
        # 8,192 x 512 x 4 = 16 MiB
        out[DSV4_TOPK] = s.max_num_batched_tokens * model.fields["index_topk"] * 4
    if extras.speculative is not None:
        out["draft model weights"] = spec_decode.draft_weight_bytes(
            model, extras.speculative, act, s.tensor_parallel_size, moe_ranks, "pad64", s.enable_expert_parallel,
            s.version_tuple)[0]
    if extras.lora is not None:
        out["LoRA adapter slots"] = lora_rules.lora_bytes(shape, int(act.bytes), s.tensor_parallel_size, moe_ranks,
                                                          extras.lora, layers, s.enable_expert_parallel)[0]
    if graph is not None and graph.total_bytes:
        applied = s.cudagraph_estimate if s.cudagraph_estimate is not None else cudagraph.applied_by_default(
            s.version_tuple)
        if s.kv_cache_memory_bytes is not None:
            out[GRAPHS_CAPTURED] = graph.total_bytes
        elif applied:
            out[GRAPHS] = graph.total_bytes
    return out


def extra_notes(model, s: VllmSettings, graph, extras: Extras, extra: dict[str, int]) -> list[str]:
    notes = []
    version = s.version_tuple
    if graph is None and cudagraph.computed(version, s.enforce_eager) and version[:2] >= (0, 20):
        notes.append("vLLM's V2 model runner makes no CUDA-graph estimate before 0.29: the graphs it captures after "
                     "sizing the KV cache come out of the (1 - utilization) headroom")
    elif graph is not None and GRAPHS not in extra and GRAPHS_CAPTURED not in extra and graph.total_bytes:
        notes.append(f"vLLM estimates {fmt_bytes(graph.total_bytes)} of CUDA graphs but does not subtract it "
                     f"({cudagraph.ENV}=0{' is its default before 0.20' if version[:2] < (0, 20) else ''}): the "
                     "graphs come out of the (1 - utilization) headroom")
    if graph is not None and graph.total_bytes:
        notes.append("CUDA-graph estimate: " + graph.formula + "; calibrated on vLLM's own estimates at v0.19 on "
                     "H100s (validation/vllm_cudagraph.md: median 0.09 GiB off)")
    if extras.speculative is not None:
        _, how = spec_decode.draft_weight_bytes(model, extras.speculative, resolve_dtype(s.dtype),
                                                s.tensor_parallel_size, s.tensor_parallel_size * s.data_parallel_size,
                                                "pad64", s.enable_expert_parallel, s.version_tuple)
        notes.append(f"speculative decoding ({extras.speculative.method}, {s.spec_tokens} drafted per step): draft weights "
                     f"{how}; its {spec_decode.layer_count(extras.speculative, model)} KV layer(s) share the pool, "
                     "so every token costs the target's bytes and the draft's; vLLM counts the draft in "
                     "'Model loading took'")
        if graph is not None and graph.total_bytes:
            # V2: 0.33 v1/worker/gpu/model_runner.py `profile_cudagraph_memory` :1069-1139 captures
            # `self.speculator.capture()` inside the estimate; V1: gpu_model_runner.py `_dummy_run` (0.19-0.33)
            notes.append("the drafter's own CUDA graphs are not in kvplan's estimate, where vLLM's holds them (V1 "
                         "captures the drafter inside the target's PIECEWISE graphs, gpu_model_runner.py _dummy_run; "
                         "V2 from 0.29 measures `speculator.capture()`): the pool may be smaller by their size")
    elif (idle := spec_decode.idle_mtp_note(model, resolve_dtype(s.dtype), resolve_dtype(s.kv_cache_dtype).bits / 8,
                                            s.tensor_parallel_size,
                                            s.tensor_parallel_size * s.data_parallel_size,
                                            s.enable_expert_parallel)):
        notes.append(idle)
    if extras.lora is not None:
        notes.append(lora_rules.lora_bytes(model.require_arch(), int(resolve_dtype(s.dtype).bytes),
                                           s.tensor_parallel_size, s.tensor_parallel_size * s.data_parallel_size,
                                           extras.lora, expert_parallel=s.enable_expert_parallel)[1] + " for the whole model (vLLM lora/layers; counted "
                     "in 'Model loading took')")
    if s.kv_cache_memory_bytes is not None:
        notes.append("--kv-cache-memory-bytes: vLLM takes that pool as given and skips its utilisation budget; "
                     "the plan fits only if weights, activation, non-torch memory, the pool and the CUDA graphs "
                     "captured after it all fit on the card")
    return notes


def suggested_pool(s: VllmSettings, requested: int, head, extra: dict[str, int], graph) -> int | None:
    """vLLM's "--kv-cache-memory=N" suggestion "to fit requested memory" (gpu_worker.py, 0.19 :443, logged from
    0.19; INFO from 0.26): the budget less the non-KV memory, the CUDA graphs captured after and a 150 MiB margin.
    From 0.27 its non-KV figure holds the applied estimate too, so an applied estimate counts twice."""
    version = s.version_tuple
    if version[:2] < (0, 19) or s.kv_cache_memory_bytes is not None:
        return None
    captured = graph.total_bytes if graph is not None else 0
    applied = extra.get(GRAPHS, 0) if version[:2] >= (0, 27) else 0
    value = (requested - head.weights_bytes - head.activation_bytes - head.non_torch_bytes
             - sum(v for k, v in extra.items() if k not in (GRAPHS, GRAPHS_CAPTURED)) - applied - captured
             - 150 * MiB)
    return max(0, value)


# model_executor/models/ with `SupportsMambaPrefixCaching` (0.19-0.28: bamba, falcon_h1, granitemoehybrid, jamba,
# mamba, mamba2, nemotron_h, zamba2; bamba's is gone by 0.26): with prefix caching these take 'all' mode, a state
# per block, where every other hybrid takes 'align' (model_executor/models/config.py `MambaModelConfig`, 0.26 :559)
MAMBA_PREFIX_CACHING = frozenset({"bamba", "falcon_h1", "granitemoehybrid", "jamba", "mamba", "falcon_mamba", "mamba2",
                                  "nemotron_h", "zamba2"})
MAMBA_MODES_FROM = (0, 19)        # the oldest release read with mamba_cache_mode (0.11: one page per request)
HYBRID_PREFIX_CACHING_FROM = (0, 26)   # config/model.py `is_prefix_caching_supported`: hybrids True from 0.26
ALIGN_FOR_ALL_FROM = (0, 29)      # MambaModelConfig: 'align' whatever the model (0.29 :623); 'all' removed in 0.32
MAMBA2_CHECKPOINT_FROM = (0, 32)  # mamba_mixer2.py exports a prefill checkpoint block (0.32+)
GDN_CHECKPOINT_FROM = (0, 33)     # qwen_gdn_linear_attn.py:739-750, with FlashInfer's GDN prefill only


def prefix_caching_default(model, version: tuple[int, int, int]) -> bool:
    """vLLM turns prefix caching on by default for attention models; for hybrids (attention beside Mamba or
    linear-attention state) only from 0.26 ('Generative hybrid models support prefix caching'); attention-free
    models stay off ('still experimental', 0.33 too)."""
    if not model.has_state:
        return True
    if model.spec_kinds <= {"state", "none"}:
        return False
    return version[:2] >= HYBRID_PREFIX_CACHING_FROM


def flashinfer_gdn_prefill(model, device: GPU | None) -> bool:
    """qwen_gdn_linear_attn.py `_resolve_gdn_prefill_backend` (0.33 :148-270): FlashInfer on SM90; on SM10x and
    SM12x only with linear_key_head_dim 128 and CUDA >= 13, which kvplan assumes (vLLM 0.33's own builds)."""
    cc = device.compute_capability if device is not None else None
    if cc is None:
        return False
    if cc == (9, 0):
        return True
    return cc[0] in (10, 12) and model.fields.get("linear_key_head_dim") == 128


def mamba_states(model, version: tuple[int, int, int], spec_tokens: int, prefix_caching: bool | None,
                 device: GPU | None = None) -> tuple[str, int]:
    """(vLLM's mamba_cache_mode, the fixed state pages a request holds in each Mamba / linear-attention layer).

    'none' (prefix caching off): 1 + k; 'align': 2 + k, + 1 prefill checkpoint block for Mamba-2 mixers (0.32+)
    and for gated DeltaNet with FlashInfer's prefill (0.33); 'all' (<= 0.28, Mamba-family models): k fixed pages
    beside one state per block (v1/kv_cache_interface.py MambaSpec.max_memory_usage_bytes, 0.26 :709-718; 0.33
    :1135-1141). Qwen3.6-27B with prefix caching on an H100 at 0.33: 3 GDN states per request, 2 at 0.32."""
    if version[:2] < MAMBA_MODES_FROM:
        return "none", 1
    on = prefix_caching_default(model, version) if prefix_caching is None else prefix_caching
    if not on:
        return "none", 1 + spec_tokens
    if version[:2] < ALIGN_FOR_ALL_FROM and model.model_type in MAMBA_PREFIX_CACHING:
        return "all", spec_tokens
    mixers = model.state_mixers
    checkpoint = (("mamba2" in mixers and version[:2] >= MAMBA2_CHECKPOINT_FROM)
                  or ("gated_deltanet" in mixers and version[:2] >= GDN_CHECKPOINT_FROM
                      and flashinfer_gdn_prefill(model, device)))
    return "align", 2 + spec_tokens + int(checkpoint)


def stage_specs(model, layers: range, tp: int, kv: DType, act: DType, version: tuple[int, int, int],
                speculative: Speculative | None = None, prefix_caching: bool | None = None,
                device: GPU | None = None) -> list:
    """The KV layers one rank of the stage owning `layers` holds, as vLLM sizes them: the drafter's layers too,
    and Mamba layers with the state pages a request holds (`mamba_states`) and k more conv columns with k
    speculative tokens (model_executor/layers/mamba/mamba_utils.py: kernel - 1 + k)."""
    if is_dsv4(model):   # its own caches, checked by check_dsv4 (no drafter, no Mamba)
        return dsv4_layer_specs(model, layers)
    specs = rank_layer_specs(model, layers, tp, kv.bits / 8, int(act.bytes), version)
    if speculative is not None:
        specs = specs + spec_decode.draft_layer_specs(model, speculative, tp, kv.bits / 8, int(act.bytes))
    if ds_mla_layout(model, kv.bits, version, device.compute_capability if device is not None else None):
        specs = with_ds_mla_layout(specs, model, kv.bits)   # the MTP drafter's MLA layers use the same backend
    specs = page_rule(specs, version)   # which pages the release pads when they do not divide the largest
    k = speculative.num_speculative_tokens if speculative is not None else 0
    if not model.has_state:
        return specs
    mode, pages = mamba_states(model, version, k, prefix_caching, device)
    if mode == "none" and pages == 1 and not k:
        return specs
    widened: dict[int, object] = {}  # the layers' specs repeat a few objects: each widened once
    for x in specs:
        if x.kind == "mamba" and id(x) not in widened:
            widened[id(x)] = dataclasses.replace(x, states=pages, states_per_block=mode == "all",
                                                 state_bytes=x.state_bytes + k * x.conv_bytes_per_column)
    return [widened.get(id(x), x) for x in specs]


def gdn_checkpoint(model, version: tuple[int, int, int], prefix_caching: bool | None, device: GPU | None) -> bool:
    """Whether the gated-DeltaNet checkpoint alignment (64 tokens) enters the hybrid block size (0.33 'align')."""
    mixers = model.state_mixers
    return ("gated_deltanet" in mixers and mamba_states(model, version, 0, prefix_caching, device)[0] == "align"
            and version[:2] >= GDN_CHECKPOINT_FROM and flashinfer_gdn_prefill(model, device))
