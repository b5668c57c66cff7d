"""vLLM's plan, end to end: settings in, the per-GPU budget, the KV pool, vLLM's own "GPU KV cache size" and
"Maximum concurrency" figures, the verdict and the `vllm serve` command out.

    KV pool = gpu_memory_utilization x physical memory - weights - activation peak - non-torch memory

(`vllm/v1/worker/gpu_worker.py::determine_available_memory`); the profile's terms are in `vllm_profile`, the
KV accounting (groups, blocks, capacity) in `vllm_kv`, the multimodal encoder cache in `vllm_mm`.
"""

from __future__ import annotations

import shlex
from functools import lru_cache
from math import ceil

from ...dtypes import DType, resolve_dtype
from ...errors import WorkloadError
from ...gpus import GPU
from ...model.arch import MLPDims, MoEDims
from ...model.ranks import vocab_refusal
from ...model.spec import ModelSpec
from ...units import fmt_bytes
from ...weights.split import gpu_weight_bytes, rope_cache_bytes, with_online_quant
from ..inputs import model_argument, positive
from ..result import Plan, StageMemory
from . import lora as lora_rules
from . import spec_decode
from . import vllm_cudagraph as cudagraph
from .lora import LoraSettings
from .spec_decode import Speculative
from .unread import newer_release, refuse_unread
from .vllm_extras import (GRAPHS_CAPTURED, MAMBA_MODES_FROM, Extras, extra_lines, extra_notes, gdn_checkpoint,
                          graphs_for, prefix_caching_default, runner_is_v2, stage_specs, suggested_pool)
from .vllm_dsv4 import (BLOCK as DSV4_BLOCK, check_dsv4, dsv4_layer_specs, dsv4_layout, is_dsv4, packed_notes,
                        workspace_warning)
from .vllm_dsv4_peak import dsv4_activation
from .vllm_kv import (DS_MLA_BYTES, KVRules, bytes_per_token, cdiv, ds_mla_layout, hybrid_alignment, hybrid_block_size,
                      kv_groups, max_usage_bytes, packed_need_bytes, pool_capacity, project_packed,
                      rank_layer_specs)
from .vllm_runner import (RECEIVE_READ, max_concurrent_batches, receive_buffer_term, receive_buffers,
                          sampler_entry_bytes)
from .vllm_mm import (TOWERS_SKIPPED_EARLY, TOWERS_SKIPPED_FROM, encoder_cache_bytes, limit_flags,
                      unsized_profile)
from .vllm_mxfp4 import padding_bytes as mxfp4_padding_bytes
from .vllm_profile import (LATEST, NVLS_GPUS, OLDEST, V1_ENGINE, ActivationModel, VllmSettings, activation_peak,
                           batch_defaults, non_torch_bytes, parse_version, pp_layer_split)

# vllm/config/cache.py `BlockSize`: the choices `vllm serve --block-size` accepts (256 was added later; hybrid
# models' internal page sizes such as Qwen3-Next's 528 are vLLM's own choice, never this flag's).
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


def plan_vllm(model: ModelSpec, device: GPU, *, tp: int, pp: int, util: float, max_len: int, act: DType, kv: DType,
              quantization: str | None, version: tuple[int, int, int], max_num_batched_tokens: int | None,
              max_num_seqs: int | None, block_size: int | None, usage_context: str, limit: int | None,
              dp: int = 1, expert_parallel: bool = False, enforce_eager: bool = False,
              cudagraph_estimate: bool | None = None, kv_cache_memory_bytes: int | None = None,
              speculative: Speculative | None = None, lora: LoraSettings | None = None,
              auto_len: bool = False, nvls: bool | None = None, prefix_caching: bool | None = None) -> Plan:
    """vLLM's start-up for these settings (checked by kvplan.planning.inputs); None = vLLM's default. `auto_len`:
    --max-model-len -1 (`auto`): the longest length up to `max_len` whose one request fits, as vLLM picks it."""
    refuse_unread(model, "vllm")
    if is_dsv4(model):   # before the generic checks, whose words would not name what kvplan leaves out
        check_dsv4(model, version, device.compute_capability, kv.bits, block_size, speculative, pp,
                   parallel=(dp, expert_parallel), act=act, pool_given=kv_cache_memory_bytes is not None)
    if block_size is not None and block_size not in VLLM_BLOCK_SIZES:
        raise WorkloadError(f"vLLM's --block-size takes {', '.join(map(str, VLLM_BLOCK_SIZES))} (256 in newer "
                            f"releases), not {block_size}: pick one of those or leave it out (16; 64 for MLA)")
    if version[:2] < OLDEST[:2]:
        raise WorkloadError(f"kvplan plans vLLM from {'.'.join(map(str, OLDEST[:2]))} on, not "
                            f"{'.'.join(map(str, version))}: pick a newer engine version")
    check_fp8_card(with_online_quant(model.require_arch(), quantization), device, version,
                   online=model.require_arch().quant is None)
    check_fp8_kv_card(device, kv, version)
    if expert_parallel and not model.require_arch().has_experts:
        raise WorkloadError(f"{model.name} has no routed experts: leave expert parallelism out")
    if model.require_arch().top_dims and (why := vocab_refusal(model.name, model.require_arch().vocab, tp, "pad64",
                                                                 "vLLM")):
        raise WorkloadError(why)
    if speculative is not None and pp > 1:
        raise WorkloadError("kvplan sizes speculative decoding without pipeline parallelism: use PP 1")
    if speculative is not None:
        speculative = spec_decode.check(model, speculative)
        spec_decode.check_vllm_draft_state(model, speculative)
    if lora is not None and (why := lora_rules.unsupported(model.require_arch())):
        raise WorkloadError(f"{why}: plan {model.name} without LoRA")

    def settings(length: int) -> VllmSettings:
        default_tokens, default_seqs = batch_defaults(device.memory_bytes, device.name, usage_context, version,
                                                      length)
        return VllmSettings(tp, pp, util, length, max_num_batched_tokens or default_tokens,
                            max_num_seqs or default_seqs, block_size, kv.name, act.name, ".".join(map(str, version)),
                            usage_context, dp, expert_parallel, enforce_eager, cudagraph_estimate,
                            kv_cache_memory_bytes, speculative.num_speculative_tokens if speculative else 0, nvls,
                            prefix_caching)

    extras = Extras(speculative, lora)
    given = _given_flags(max_num_batched_tokens, block_size)
    if not auto_len:
        return given(_plan(model, device, settings(max_len), act, kv, quantization, limit, extras))
    # vLLM 0.14+ (config/model.py, `_maybe_auto_fit_max_model_len`): plan the config's length, then the longest
    # one request fits in that pool (0.29+: less the null block), and start with it
    first = _plan(model, device, settings(max_len), act, kv, quantization, limit, extras)
    longest = first.max_model_len_that_fits
    if longest <= 0:
        return given(first)
    final = _plan(model, device, settings(longest), act, kv, quantization, limit, extras)
    return given(final.model_copy(update={"notes": [f"max_model_len auto: {longest:,} tokens, the longest one "
                                                    f"request fits (of the config's {max_len:,})"] + final.notes}))


def _given_flags(max_num_batched_tokens: int | None, block_size: int | None):
    """The command carries the batch and block the plan was sized with when the user set them: without the flag
    vLLM takes its own (Llama-3.1-8B on an H100 at --max-num-batched-tokens 2048: 453,248 KV tokens planned, where
    the default 8,192 gives 452,096)."""
    flags = [f" --{flag} {value}" for flag, value in (("max-num-batched-tokens", max_num_batched_tokens),
                                                       ("block-size", block_size)) if value is not None]

    def given(p: Plan) -> Plan:   # an LLM-class command carries the batch already (vllm_command)
        extra = "".join(f for f in flags if f.split()[0] not in p.vllm_command.split())
        return p.model_copy(update={"vllm_command": p.vllm_command + extra}) if extra else p
    return given


def _plan(model, device: GPU, s: VllmSettings, act: DType, kv: DType, quantization, limit: int | None,
          extras: Extras = Extras()) -> Plan:
    shape = with_online_quant(model.require_arch(), quantization)
    version = s.version_tuple
    tp, pp, dp = s.tensor_parallel_size, s.pipeline_parallel_size, s.data_parallel_size
    moe_ranks = tp * dp   # vLLM's FusedMoE: experts over TP x DP ranks, whole (EP) or TP-sharded (no EP)
    text_only = limit == 0
    # a text-only start-up skips the tower's weights from 0.15 (`_mark_tower_model`); Mistral 3 did so before
    early = shape.vit is not None and shape.vit[0] in TOWERS_SKIPPED_EARLY
    towers = not (text_only and (version[:2] >= TOWERS_SKIPPED_FROM or early))
    kept, kept_line = encoder_cache_bytes(shape, version, s.max_num_batched_tokens, int(act.bytes), text_only,
                                          s.max_num_seqs, s.max_model_len, limit)
    splits = pp_layer_split(model.num_layers, pp)
    dims = _activation_dims(shape, tp, act)
    stages, budgets = [], []
    block = s.block_size or _default_block(model, device)
    caching = s.enable_prefix_caching
    all_specs = stage_specs(model, range(model.num_layers), tp, kv, act, version, extras.speculative, caching, device)
    alignment = hybrid_alignment(version, model.is_mla, gdn_checkpoint(model, version, caching, device))
    block = hybrid_block_size(all_specs, block, alignment)   # the widened conv state of drafting counts
    rows = min(s.max_num_batched_tokens, s.max_num_seqs)
    v2 = runner_is_v2(model, shape, s, extras)
    rules = KVRules.of(version, max_concurrent_batches(version, pp, v2))
    graphs = graphs_for(model, shape, device, s, act, extras, v2)
    padding_lines = []
    for index, layers in enumerate(splits):
        first, last = index == 0, index == len(splits) - 1
        padding, line = mxfp4_padding_bytes(shape, device, tp, layers, moe_ranks, s.enable_expert_parallel)
        if line:
            padding_lines.append(f"stage {index}: {line}" if len(splits) > 1 else line)
        weights = (gpu_weight_bytes(model, shape, act, tp, layers, first, last, towers, moe_ranks,
                                    vocab_rule="pad64", expert_parallel=s.enable_expert_parallel)
                   + rope_cache_bytes(model, act, per_layer_type=True) + padding)
        # a later stage's receive buffers: in the profile's peak (V0 / V1), persistent (V2 0.27+) or missed (V2
        # 0.22-0.26); the first stage has none (vllm_runner.receive_buffer_term)
        received = (0, "") if first else receive_buffers(model, version, s.max_num_batched_tokens, int(act.bytes))
        term = receive_buffer_term(version, v2)
        activation = activation_peak(dims, s.max_num_batched_tokens, rows, has_sampler=last, version=version,
                                     kept=kept if first else 0,
                                     entry_bytes=sampler_entry_bytes(version, v2, int(act.bytes)), v2=v2,
                                     receive=received if term == "peak" else (0, ""))
        if is_dsv4(model):   # its hyper-connection stream, attention buffers and shared workspace
            activation = dsv4_activation(model, activation, s.max_model_len, s.max_num_batched_tokens, tp, layers,
                                         version, device.compute_capability[0], s.enable_expert_parallel)
        other = non_torch_bytes(tp, pp, version, device.name, s.nvls)
        extra = extra_lines(model, shape, s, act, graphs(layers), extras, layers, moe_ranks, v2, last,
                            received[0] if term == "persistent" else 0)
        if s.kv_cache_memory_bytes is not None:
            pool = s.kv_cache_memory_bytes
        else:
            pool = _requested(s, device) - weights - activation.total_bytes - other - sum(
                v for k, v in extra.items() if k != GRAPHS_CAPTURED)
        specs = stage_specs(model, layers, tp, kv, act, version, extras.speculative, caching, device)
        # packed (DeepSeek-V4): vLLM groups the whole model's layers, then cuts each group to the stage's
        groups = (project_packed(kv_groups(all_specs, block, dsv4_layout(version)), layers)
                  if any(x.packed for x in specs)
                  else kv_groups(specs, block))
        cap = pool_capacity(groups, pool, s.max_model_len, s.max_num_batched_tokens, inflight=rules.inflight,
                            tokens_from_concurrency=rules.tokens_from_concurrency, per_group=rules.per_group)
        stages.append(StageMemory(stage=index, layers=f"{layers.start}-{layers.stop - 1}", weights_bytes=weights,
                                  activation_bytes=activation.total_bytes, non_torch_bytes=other,
                                  kv_pool_bytes=max(0, pool), kv_bytes_per_token=bytes_per_token(specs),
                                  num_blocks=cap.num_blocks))
        budgets.append((cap, groups, specs, activation, pool, extra))  # a negative pool: the weights overflow
    # PP: every stage gets the smallest stage's number of blocks
    binding = min(range(len(stages)), key=lambda i: stages[i].num_blocks)
    cap, groups, specs, activation, pool, extra = budgets[binding]
    need = (packed_need_bytes(groups, s.max_model_len, s.max_num_batched_tokens, rules.inflight) if groups.packed
            else sum(max_usage_bytes(x, block, s.max_model_len, s.max_num_batched_tokens, rules.inflight)
                     for x in specs))
    head = stages[binding]
    graph = graphs(splits[binding])
    used = head.weights_bytes + head.activation_bytes + head.non_torch_bytes + sum(extra.values()) + max(0, pool)
    over_card = max(0, used - device.memory_bytes) if s.kv_cache_memory_bytes is not None else 0
    fits = pool >= need and cap.num_blocks >= cap.blocks_per_request > 0 and not over_card
    # vLLM's start-up check is in bytes (v1/core/kv_cache_planning.py `check_enough_kv_cache_memory`, 0.33), the
    # blocks a request takes are rounded per group (0.27+): a hybrid pool can pass the first and still hold under
    # one max_model_len request (Qwen3.5-27B over 2 RTX 5090s, auto length: 55 blocks of the 56 a request needs)
    short_blocks = max(0, cap.blocks_per_request - cap.num_blocks) * groups.bytes_per_block if pool >= need else 0
    fit_len = _max_len_that_fits(specs, block, pool, s, rules.inflight, groups if groups.packed else None)
    notes = (_version_notes(version, v2) + _vllm_notes(model, s, kv, groups, specs, version, rules.inflight)
             + padding_lines + ([kept_line] if kept_line else []) + extra_notes(model, s, graph, extras, extra)
             + _receive_notes(model, s, act, v2))
    if short_blocks:
        notes.append(f"vLLM starts (its check is in bytes) with a max concurrency of {cap.max_concurrency:.2f}: one "
                     f"{s.max_model_len:,}-token request takes {cap.blocks_per_request:,} blocks and the pool holds "
                     f"{cap.num_blocks:,}, so it needs {fmt_bytes(short_blocks)} more, or a shorter max_model_len")
    cc = device.compute_capability
    if ds_mla_layout(model, kv.bits, version, cc):
        backend = "FLASHMLA_SPARSE" if cc[0] == 9 else "FLASHINFER_MLA_SPARSE_SM120"
        notes.append(f"sparse MLA on the {device.name}: vLLM's {backend} backend caches the latent in DeepSeek's "
                     f"fp8_ds_mla layout, {DS_MLA_BYTES} B a token a layer (512 fp8 + 4 fp32 scales + 64 bf16 RoPE), "
                     "not 576" + (" x 2 B: it quantizes even an 'auto' cache" if kv.bits == 16 else " B"))
    if shape.quant is not None and shape.quant.method == "fp8" and cc is not None and cc < (8, 9):
        # no FP8 tensor cores below 8.9 (T4, A10, A100; L40 is 8.9): `Fp8LinearMethod` stores the weights in fp8 and
        # runs Marlin's weight-only kernel ('For GPUs that lack FP8 hardware support, we can leverage the Marlin
        # kernel'; utils/marlin_utils_fp8.py `is_fp8_marlin_supported`: 8.0 to 0.13, 7.5 from 0.14.0)
        notes.append(f"FP8 weights on the {device.name} (compute capability {cc[0]}.{cc[1]}, no FP8 tensor cores) run "
                     "through vLLM's weight-only Marlin kernel: stored in fp8 as planned, computed in 16-bit")
    if shape.quant is not None and shape.quant.method == "mxfp4" and cc == (9, 0):
        notes.append("Hopper: sized for the Marlin MoE kernel (published H100 logs of gpt-oss); a vLLM with "
                     "OpenAI's triton_kernels uses the Triton layout instead, with less padding")
    if tp > 1 and not ((device.name in NVLS_GPUS) if s.nvls is None else s.nvls):
        notes.append("NCCL memory without NVLink SHARP is an assumption (0.25 GiB), not a measurement"
                     + (" (NVLS off: run with NCCL_NVLS_ENABLE=0)" if s.nvls is False else ""))
    if dp > 1:
        notes.append(f"{dp} data-parallel engines, each with its own KV pool: the figures are one engine's, "
                     f"{dp} x {cap.max_concurrency:,.2f} = {dp * cap.max_concurrency:,.2f} requests in all; the DP "
                     "group's NCCL buffers (and DeepEP's, with --all2all-backend deepep_*) are not modelled")
    suggested = suggested_pool(s, _requested(s, device), head, extra, graph)
    formula = _formula(s, device, head, extra, pool, activation, groups, cap, block)
    return Plan(
        model=model.name, engine="vllm", engine_version=s.version, gpu=device.name,
        gpu_memory_bytes=device.memory_bytes, num_gpus=tp * pp * dp,
        tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp,
        expert_parallel_size=moe_ranks if s.enable_expert_parallel else 1,
        max_model_len=s.max_model_len, gpu_memory_utilization=s.gpu_memory_utilization, dtype=act.name,
        kv_cache_dtype=kv.name, block_size=block, max_num_batched_tokens=s.max_num_batched_tokens,
        max_num_seqs=s.max_num_seqs, weights_bytes=head.weights_bytes, activation_bytes=head.activation_bytes,
        non_torch_bytes=head.non_torch_bytes, kv_pool_bytes=max(0, pool), kv_bytes_per_token=head.kv_bytes_per_token,
        kv_cache_tokens=cap.kv_cache_tokens, num_blocks=cap.num_blocks, max_concurrency=round(cap.max_concurrency, 4),
        fits=fits, shortfall_bytes=max(0, need - pool, over_card, short_blocks), max_model_len_that_fits=fit_len, stages=stages,
        extra=extra, kv_cache_memory_bytes=s.kv_cache_memory_bytes, suggested_kv_cache_memory_bytes=suggested,
        vllm_command=vllm_command(shlex.quote(model_argument(model)), s, kv, quantization, extras)
        + (f" {limit_flags(version, limit)}" if limit is not None and shape.towers else ""),
        formula=formula, notes=notes, kv_layers=tuple(specs), kv_rules=rules,
        warnings=newer_release("vLLM", version, LATEST) + [
            w for w in (unsized_profile(shape, text_only), workspace_warning(model, s, cc[0]) if is_dsv4(model) else None)
            if w],
    )


def _receive_notes(model, s: VllmSettings, act: DType, v2: bool) -> list[str]:
    """What the plan says of a later stage's receive buffers where vLLM's budget misses them or kvplan has not read
    the model's (vllm_runner.receive_buffers)."""
    if s.pipeline_parallel_size <= 1:
        return []
    version = s.version_tuple
    size, how = receive_buffers(model, version, s.max_num_batched_tokens, int(act.bytes))
    notes = []
    if receive_buffer_term(version, v2) == "uncounted":
        later = "stage 1" if s.pipeline_parallel_size == 2 else f"stages 1-{s.pipeline_parallel_size - 1}"
        notes.append(f"{later} hold{'s' if s.pipeline_parallel_size == 2 else ''} {fmt_bytes(size)} of receive "
                     f"buffers ({how}) that "
                     f"vLLM {version[0]}.{version[1]}'s V2 runner makes after measuring the weights and before the "
                     "profile, so its budget does not count them: they come out of the (1 - utilization) headroom")
    if model.architecture not in RECEIVE_READ:
        notes.append(f"receive buffers of {model.architecture or model.model_type} not read from vLLM: planned as "
                     "hidden_states + residual, [max_num_batched_tokens, hidden_size] each")
    return notes


def _requested(s: VllmSettings, device: GPU) -> int:
    """The budget before it is spent: ceil(utilization x memory) (v1/worker/utils.py `requested_memory`)."""
    return ceil(s.gpu_memory_utilization * device.memory_bytes)


def _formula(s: VllmSettings, device: GPU, head: StageMemory, extra: dict[str, int], pool: int, activation,
             groups, cap, block: int) -> list[str]:
    spent = "".join(f" - {name} {fmt_bytes(value)}" for name, value in extra.items() if name != GRAPHS_CAPTURED)
    if s.kv_cache_memory_bytes is not None:
        first = f"KV pool = --kv-cache-memory-bytes {s.kv_cache_memory_bytes:,} B = {fmt_bytes(pool)}"
    else:
        first = (f"KV pool = ceil({s.gpu_memory_utilization} x {fmt_bytes(device.memory_bytes)}) - weights "
                 f"{fmt_bytes(head.weights_bytes)} - activation {fmt_bytes(head.activation_bytes)} - non-torch "
                 f"{fmt_bytes(head.non_torch_bytes)}{spent} = {fmt_bytes(pool)}")
    tokens = (f"tokens = int({cap.max_concurrency:.4f} x {s.max_model_len:,}) = {cap.kv_cache_tokens:,}"
              if s.version_tuple[:3] >= (0, 20, 1) else f"tokens = {cap.kv_cache_tokens:,} ({block}-token blocks)")
    return [
        first,
        f"activation = {activation.formula}",
        f"blocks = {max(0, pool):,} // {groups.bytes_per_block:,} B per block = {cap.num_blocks:,}; {tokens}",
        f"max concurrency = {cap.num_blocks:,} / {cap.blocks_per_request:,} blocks per {s.max_model_len:,}-token "
        f"request = {cap.max_concurrency:.2f}",
    ]


def _version_notes(version: tuple[int, int, int], v2: bool = False) -> list[str]:
    """Which accounting era the version falls in and which model runner this model gets (a version past the newest
    kvplan read gets its rules, and the plan a warning: unread.newer_release)."""
    v = version[:2]
    era = ("V0 engine (profiles one max_model_len prompt)" if v < V1_ENGINE else
           "V1 engine, no CUDA-graph estimate" if v < (0, 18) else
           "V1 engine; CUDA-graph estimate computed, subtracted only with "
           f"{cudagraph.ENV}=1" if v < (0, 20) else
           "V1 engine; CUDA-graph estimate subtracted by default" if v < (0, 22) else
           ("V2 model runner for this model, which makes no CUDA-graph estimate before 0.29" if v2 else
            "V1 model runner for this model; CUDA-graph estimate subtracted by default") if v < (0, 29) else
           ("V2 model runner; CUDA-graph estimate subtracted by default" if v2 else
            "V1 model runner for this model (a feature V2 lacks); CUDA-graph estimate subtracted by default"))
    notes = [f"vLLM {'.'.join(map(str, version))}: {era}"]
    if v >= (0, 27):
        notes.append("from 0.27 the budget counts every byte allocated after vLLM's start-up snapshot "
                     "(utils/mem_utils.py memory_profiling)" + (", the V2 runner's sampler buffers included" if v2
                                                                else ""))
    if v >= (0, 33):
        # 0.33 v1/worker/gpu_worker.py `init_device` :518-528: "Create the handles now, before the snapshot, so they
        # count as baseline like the NCCL buffers" (a torch.mm and a biased linear on a 16 x 16 tensor)
        notes.append("vLLM 0.33 creates its cuBLAS handles before that snapshot (gpu_worker.py init_device), so their "
                     "workspace leaves the budget; kvplan's non-torch figure (measured on 0.18-0.19) still holds it, "
                     "so the pool may be up to that figure larger")
    return notes


FP8_ON_SM75_FROM = (0, 14)   # Fp8Config.get_min_capability: 80 in 0.13.0, 75 in 0.14.0


def check_fp8_card(shape, device: GPU, version: tuple[int, int, int], online: bool) -> None:
    """vLLM refuses a quantization method below its minimum compute capability (config/model.py
    `_verify_quantization` -> `verify_quantization`: 'The quantization method fp8 is not supported for the current
    GPU'). FP8 (`Fp8Config.get_min_capability`, model_executor/layers/quantization/fp8.py) needs 8.0 in 0.11.0-0.13.0
    (returns 80) and 7.5 from 0.14.0 (returns 75; read in 0.14.0, 0.16.0, 0.18.0, 0.19.0, 0.33.0): a T4 (7.5) runs fp8
    at 0.14+, a V100 (7.0) never does. `shape`: the one planned, online
    quantization applied (`online`: from --quantization, not the checkpoint)."""
    cc = device.compute_capability
    if shape.quant is None or shape.quant.method != "fp8" or cc is None:
        return
    need = (8, 0) if version[:2] < FP8_ON_SM75_FROM else (7, 5)
    later = f", or vLLM {'.'.join(map(str, FP8_ON_SM75_FROM))}+ (7.5)" if need == (8, 0) and cc >= (7, 5) else ""
    if cc < need:
        raise WorkloadError(f"vLLM {'.'.join(map(str, version[:2]))} runs FP8 weights on compute capability "
                            f"{need[0]}.{need[1]} and newer, and the {device.name} has {cc[0]}.{cc[1]}: pick a newer "
                            "card" + later
                            + (", or leave --quantization fp8 out" if online else ""))


def check_fp8_kv_card(device: GPU, kv: DType, version: tuple[int, int, int]) -> None:
    """An fp8 KV cache below SM80 has no backend from vLLM 0.24: FlashAttention needs 8.0
    (flash_attn.py `supports_compute_capability`), FlashInfer's floor was raised from 7.5 to 8.0 (flashinfer.py:
    'currently broken on SM75'), and Triton attention refuses fp8 KV below 8.9 ('FP8 KV cache is not supported by
    the Triton attention backend ... requires SM89+', triton_attn.py 0.24-0.33). A T4 or V100 runs float16 KV."""
    cc = device.compute_capability
    if kv.name.startswith("float8") and cc is not None and cc < (8, 0) and version[:2] >= (0, 24):
        raise WorkloadError(f"vLLM {'.'.join(map(str, version[:2]))} has no attention backend with an fp8 KV cache "
                            f"on the {device.name} (compute capability {cc[0]}.{cc[1]}; Triton's needs 8.9, "
                            "FlashAttention and FlashInfer 8.0): use --kv-cache-dtype auto (float16)")


def _default_block(model: ModelSpec, device: GPU) -> int:
    """vLLM's block size when --block-size is not given: 16, and 64 for MLA where FlashMLA runs (Hopper and
    newer; and GPUs kvplan knows no SM version for). FlashMLA needs SM90: on Ampere / Ada vLLM runs Triton MLA
    with 16-token blocks (DeepSeek-V2-Lite on L4s: 807,792 tokens = 50,487 x 16, not a multiple of 64)."""
    if is_dsv4(model):
        # the lcm of its backends' kernel blocks (platforms/interface.py, 0.33); 0.22-0.26: the first backend's
        # preferred block, DeepseekSparseSWABackend.get_preferred_block_size 256 (sparse_swa.py; #51041's 0.26.0
        # log: 'Setting kv cache block size to 256 for DEEPSEEK_SPARSE_SWA backend.')
        return DSV4_BLOCK
    if not model.is_mla:
        return 16
    cc = device.compute_capability
    return 16 if cc is not None and cc < (9, 0) else 64


@lru_cache(maxsize=256)  # the widest layer of the whole model, walked once per shape, not once per plan
def _activation_dims(shape, tp: int, act: DType) -> ActivationModel:
    dense, moe, topk = 0, 0, 0
    for layer in shape.layers:
        if isinstance(layer.ffn, MoEDims):
            moe = max(moe, layer.ffn.expert.intermediate)
            topk = max(topk, layer.ffn.top_k)
            if layer.ffn.shared:
                dense = max(dense, layer.ffn.shared.intermediate)
        elif isinstance(layer.ffn, MLPDims):
            dense = max(dense, layer.ffn.intermediate)
    return ActivationModel(shape.hidden, cdiv(dense, tp), cdiv(moe, tp), topk, shape.vocab, int(act.bytes))


def _max_len_that_fits(specs, block: int, pool: int, s: VllmSettings, inflight: int = 1, packed=None) -> int:
    """vLLM's `estimate_max_model_len`: the longest single request the pool holds (binary search); a packed layout
    (DeepSeek-V4) by its groups' blocks, the null block held back (0.33 `_estimate_max_model_len_from_groups`)."""
    def fits(length: int) -> bool:
        if packed is not None:
            return packed_need_bytes(packed, length, s.max_num_batched_tokens, inflight) <= pool
        return sum(max_usage_bytes(x, block, length, s.max_num_batched_tokens, inflight) for x in specs) <= pool

    if pool <= 0 or not fits(1):
        return 0
    lo, hi = 1, s.max_model_len
    if fits(hi):
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _vllm_notes(model: ModelSpec, s: VllmSettings, kv: DType, groups, specs=(),
                version: tuple[int, int, int] = (0, 0, 0), inflight: int = 1) -> list[str]:
    notes = [COLD_COMPILE] if _compiles_in_profile(s, version) else []
    if groups.packed:
        return notes + packed_notes(groups, s.max_model_len, s.max_num_batched_tokens, inflight)
    kv_heads = model.fields.get("engine_kv_heads") or model.kv_heads
    if kv_heads and not model.is_mla and kv_heads < s.tensor_parallel_size:
        notes.append(f"{kv_heads} KV heads < TP {s.tensor_parallel_size}: vLLM replicates them, 1 head per rank")
    if model.is_mla and s.tensor_parallel_size > 1:
        notes.append("MLA latent is replicated on every TP rank: per-GPU KV does not shrink with TP")
    if not groups.uniform:
        notes.append(f"hybrid KV groups ({len(groups.groups)} groups of {len(groups.groups[0])} layers"
                     + (f", {groups.padding_layers} padding layers" if groups.padding_layers else "")
                     + "): 'GPU KV cache size' is " + ("max concurrency x max_model_len" if KVRules.of(
                         version, 1).tokens_from_concurrency else "per group")
                     + ", concurrency counts sliding layers' capped blocks")
        longer = sorted({(x.kind, x.block_scale) for g in groups.groups for x in g if x.block_scale > 1})
        if longer:   # gemma-4-E4B-it: sliding blocks of 32 tokens beside the full layers' 16
            notes.append("unequal attention pages made equal (unify_kv_cache_spec_page_size): "
                         + ", ".join(f"{kind} layers' blocks hold {groups.block_size * k} tokens" for kind, k in longer)
                         + f", the others {groups.block_size}")
    state = next((x for x in specs if x.kind == "mamba"), None)
    if state is not None:
        held = (f"one state per {groups.block_size}-token block of a request" + (f" + {state.states}" if state.states
                else "") if state.states_per_block else f"{state.states} state page(s) per request")
        mode = "'all'" if state.states_per_block else "'none'" if mode_off(s, model) else "'align'"
        notes.append(f"Mamba/linear state: {held}, in each layer (mamba_cache_mode {mode}, prefix caching "
                     + ("off" if mode == "'none'" else "on")
                     + (", vLLM's default" if s.enable_prefix_caching is None else "")
                     + "); vLLM's token figure is not a token capacity")
    return notes


# vLLM compiles the model in the profile run's first forward pass when ~/.cache/vllm holds no compile for this
# config: the cache directory is named by VllmConfig.compute_hash() (compilation/backends.py, 0.27.1), whose factors
# include max_model_len (config/model.py ModelConfig.compute_hash), the batch limits and the LoRA config. Inductor's
# workspace then counts in the profile's peak: one RunPod RTX 4090 worker, Qwen3-8B, vLLM 0.27.1, printed 1.18 GiB
# of peak activation and 35,792 tokens compiling, 0.19 GiB and 43,040 tokens on its cache hits
# (validation/vllm_holdout.csv, fs58522340114). With torch >= 2.10 the compile runs ahead of the forward in the same
# window (0.27.1 compilation/decorators.py: `aot_compile`, then the forward under `monitor_profiling_run`; envs.py
# `use_aot_compile`), and utils/mem_utils.py `transient_peak_headroom` is the high-water mark over both: the compile
# moves the pool only where its peak tops the forward's (Qwen3-32B's first ranks on RTX PRO 6000s: 2.96 and 2.98 GiB
# of peak at PP 2 and TP 1, forwards of 1.56 and 1.41; none above the TP 2 forward). The size depends on the kernels,
# so it is a note, not a term.
COLD_COMPILE = ("sized for a start whose torch.compile cache is warm: the first start of a configuration (a new "
                "max_model_len, batch limits or LoRA setting, or an empty ~/.cache/vllm, as in a fresh container) "
                "compiles in vLLM's profile run, and the compile's peak comes out of the pool where it tops the "
                "forward's (Qwen3-8B on an RTX 4090, vLLM 0.27.1: 0.99 GiB, 35,792 tokens against 43,040 on restart); "
                "--enforce-eager does not compile")


def _compiles_in_profile(s: VllmSettings, version: tuple[int, int, int]) -> bool:
    """torch.compile runs in the profile run (not under --enforce-eager: config/vllm.py sets the compilation mode to
    NONE, 0.27.1), and moves the pool (a --kv-cache-memory pool is fixed). Noted from 0.20, the releases read."""
    return version[:2] >= (0, 20) and not s.enforce_eager and s.kv_cache_memory_bytes is None


def mode_off(s: VllmSettings, model: ModelSpec) -> bool:
    """Prefix caching off for this plan, given or by the version's default (`prefix_caching_default`)."""
    on = prefix_caching_default(model, s.version_tuple) if s.enable_prefix_caching is None else s.enable_prefix_caching
    return not on or s.version_tuple[:2] < MAMBA_MODES_FROM


def vllm_command(name: str, s: VllmSettings, kv: DType, quantization, extras: Extras = Extras()) -> str:
    env = _env_prefix(s)
    parts = [f"{env}vllm serve {name}", f"--tensor-parallel-size {s.tensor_parallel_size}"]
    if s.pipeline_parallel_size > 1:
        parts.append(f"--pipeline-parallel-size {s.pipeline_parallel_size}")
    if s.data_parallel_size > 1:
        parts.append(f"--data-parallel-size {s.data_parallel_size}")
    if s.enable_expert_parallel:
        parts.append("--enable-expert-parallel")
    parts += [f"--max-model-len {s.max_model_len}", f"--max-num-seqs {s.max_num_seqs}"]
    if s.usage_context == "llm_class":
        # planned with the LLM class's batch defaults, which `vllm serve` does not take (0.33 engine/arg_utils.py
        # get_batch_defaults: 16,384 tokens against 8,192 on an H100): the command carries the budget it was sized with
        parts.append(f"--max-num-batched-tokens {s.max_num_batched_tokens}")
    if s.kv_cache_memory_bytes is not None:
        parts.append(f"--kv-cache-memory-bytes {s.kv_cache_memory_bytes}")
    else:
        parts.append(f"--gpu-memory-utilization {s.gpu_memory_utilization}")
    if kv.bits == 8:
        parts.append("--kv-cache-dtype fp8" if kv.name == "float8_e4m3" else "--kv-cache-dtype fp8_e5m2")
    if quantization:
        parts.append(f"--quantization {quantization}")
    if s.enforce_eager:
        parts.append("--enforce-eager")
    if s.enable_prefix_caching is not None:
        parts.append("--enable-prefix-caching" if s.enable_prefix_caching else "--no-enable-prefix-caching")
    if extras.speculative is not None:
        parts.append("--speculative-config " + shlex.quote(spec_decode.config_json(extras.speculative)))
    if extras.lora is not None:
        parts.append(f"--enable-lora --max-loras {extras.lora.max_loras} --max-lora-rank {extras.lora.max_lora_rank}")
    return " ".join(parts)


def _env_prefix(s: VllmSettings) -> str:
    """Environment the plan depends on: NVLS off when asked on an NVSwitch GPU, and the estimate switch when the
    plan asks for what the version does not do by default."""
    version = s.version_tuple
    env = "NCCL_NVLS_ENABLE=0 " if s.nvls is False and s.tensor_parallel_size > 1 else ""
    if s.cudagraph_estimate is None or version[:2] < cudagraph.ESTIMATE_FROM or s.enforce_eager:
        return env
    if s.cudagraph_estimate != cudagraph.applied_by_default(version):
        return f"{env}{cudagraph.ENV}={int(s.cudagraph_estimate)} "
    return env


def max_concurrency_at(p: Plan, context_len: int, model: ModelSpec) -> float:
    """Requests of `context_len` tokens the pool holds at once (vLLM's formula at that length, with the plan's
    version's sliding-window rule), over the KV layers the plan was sized with (its binding stage's, a drafter's
    and the Mamba state pages included; SGLang's: its binding stage's cell, the Mamba state left to max_num_seqs);
    a plan without them is counted over the model's layers."""
    length = positive("context_len", context_len)
    specs = list(p.kv_layers) or rank_layer_specs(model, range(model.num_layers), p.tensor_parallel_size,
                                                  resolve_dtype(p.kv_cache_dtype).bits / 8,
                                                  int(resolve_dtype(p.dtype).bytes))
    if any(x.packed for x in specs):   # the whole model's groups, cut to the binding stage's layers, as planned
        whole = dsv4_layer_specs(model, range(model.num_layers))
        layout = dsv4_layout(parse_version(p.engine_version))
        groups = project_packed(kv_groups(whole, p.block_size, layout), {x.layer for x in specs})
    else:
        groups = kv_groups(specs, p.block_size)
    rules = p.kv_rules or KVRules()
    return pool_capacity(groups, p.kv_pool_bytes, length, p.max_num_batched_tokens, inflight=rules.inflight,
                         per_group=rules.per_group).max_concurrency
