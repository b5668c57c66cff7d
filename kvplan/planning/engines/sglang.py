"""SGLang's plan, end to end: settings in, the per-GPU budget (a static fraction of the card for weights + KV,
the rest SGLang's reserve for activations and CUDA graphs), max_total_num_tokens, the verdict and the
`sglang.launch_server` command out. One budget per pipeline stage: every rank reads the free memory of the most
loaded one (an all-reduce MIN) and the pool holds the fewest tokens any stage's quotient gives. The pool's
arithmetic is in `sglang_pool`, what a rank caches in `sglang_layers`, the version-keyed lookups in `sglang_rules`,
the notes in `sglang_notes`."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from math import ceil

from ...dtypes import DType
from ...errors import WorkloadError
from ...gpus import GPU
from ...model.arch import MoEDims
from ...model.layers import FullAttentionSpec, SlidingWindowSpec, StateSpec
from ...model.ranks import vocab_refusal, vocab_rule, vocab_share
from ...model.spec import ModelSpec
from ...units import MiB, fmt_bytes
from ...weights.split import gpu_weight_bytes, rope_cache_bytes, with_online_quant
from ..inputs import model_argument
from ..result import Plan, StageMemory
from . import lora as lora_rules
from . import spec_decode
from .lora import LoraSettings
from .sglang_layers import cell_specs, dsa_kv_dtype, is_dsa, pool_kinds, state_bytes_per_request
from .sglang_notes import engine_warnings, plan_notes
from .sglang_pool import (DEFAULT_VERSION, LOAD_EXTRA_BYTES, PRELOAD_BYTES, VLM_CACHE_BYTES, SglangSettings, StagePool,
                          batch_defaults, budget_bytes, mamba_fixed, mamba_requests_ratio, max_running_requests,
                          resolve_fraction, stage_pool, swa_floor_full_tokens, vlm_factor)
from .sglang_rules import (FIRST_RELEASE, MAMBA_POOL_ARCHS, PP_HYBRID_FROM, TOWER_EVERY_STAGE, lm_head_every_stage,
                           multimodal, pp_layer_split, prefill_graphs_reserved, release_text, sm100_page, swa_pool)
from .spec_decode import Speculative
from .unread import newer_release, refuse_unread
from .vllm_kv import bytes_per_token

ALGORITHMS = {"mtp": "NEXTN", "eagle3": "EAGLE3", "draft_model": "STANDALONE"}


@dataclass(frozen=True)
class Stage:
    """One pipeline stage as planned: its layers, one rank's weights, its KV layers and its pool."""

    layers: range
    weights_bytes: int
    specs: list
    pool: StagePool


# The releases whose wheels the rules were read from (sglang_rules' docstring: each minor release 0.5.1-0.5.23);
# 0.4.x is planned for its start-up logs' mem_fraction_static (validation/sglang_calibration.csv: 0.88 at TP1, 0.85
# at TP4) with 0.5.1's pool rules, a newer release with 0.5.23's: either is said in the plan, never assumed silently
OLDEST_READ = (0, 5, 1)


def _release_notes(version: tuple[int, int, int]) -> list[str]:
    """SGLang 0.4.3: its pool follows the 0.4.x logs, the rest 0.5.1's rules. A release past the newest read is
    a warning, not a note (unread.newer_release)."""
    if version < OLDEST_READ:
        return [f"SGLang {release_text(version)} is older than {release_text(OLDEST_READ)}, the oldest release "
                "kvplan's pool rules were read from: mem_fraction_static follows the 0.4.x start-up logs, the rest "
                f"is planned with {release_text(OLDEST_READ)}'s rules"]
    return []


def plan_sglang(model: ModelSpec, device: GPU, *, tp: int, pp: int, mem_fraction: float | None, max_len: int,
                act: DType, kv: DType, quantization: str | None, version: tuple[int, int, int],
                image_limit: int | None, dp: int = 1, expert_parallel: bool = False,
                speculative: Speculative | None = None, lora: LoraSettings | None = None,
                kv_default: bool = False) -> Plan:
    """SGLang's start-up for these settings (checked by kvplan.planning.inputs). `mem_fraction` None: SGLang's own
    default for this card, TP and version (an explicit 0.9 is the user's --mem-fraction-static). `dp`: DP
    attention ranks inside the TP group (--attn-dp-size N): attention and its KV heads split over TP / N, each rank
    with its own pool; experts stay split over all TP ranks (--ep-size TP moves whole experts, the same bytes per
    rank). `kv_default`: --kv-cache-dtype auto (a DSA model's default is fp8 on Blackwell)."""
    refuse_unread(model, "sglang")
    shape = with_online_quant(model.require_arch(), quantization)
    speculative = _check(model, shape, tp, pp, dp, expert_parallel, speculative, lora, image_limit, version)
    if is_dsa(model):
        kv = dsa_kv_dtype(kv, kv_default, device, version)
    attn_tp = tp // dp
    settings = _settings(model, shape, device, tp, pp, dp, mem_fraction, version, speculative, lora)
    extra = _extra_lines(model, shape, act, kv, tp, attn_tp, speculative, lora, version, expert_parallel)
    on_swa = swa_pool(model.architecture, version, _sm_major(device), speculative is not None)[0]
    card = device.smi_memory_bytes or device.memory_bytes
    fraction = resolve_fraction(card, settings)
    stages, rest = _stages(model, shape, device, settings, act, kv, attn_tp, on_swa, speculative, fraction,
                           sum(extra.values()), expert_parallel)
    binding = min(range(len(stages)), key=lambda i: (stages[i].pool.tokens, -stages[i].weights_bytes))
    head = stages[binding]
    tokens = head.pool.tokens
    mixer = MAMBA_POOL_ARCHS.get(model.architecture)   # _check refused every other state model
    state_cap = head.pool.state_slots // mamba_requests_ratio(mixer, version) if model.has_state else None
    if model.has_state:
        extra["Mamba state pool"] = head.pool.state_bytes
    running = max_running_requests(tokens, max_len, settings, state_cap)
    floor = swa_floor_full_tokens(_swa_window(model), settings) if on_swa and head.pool.swa_tokens else 0
    fits = tokens >= max(max_len, floor) and state_cap != 0 and rest > 0
    reserved = int(device.memory_bytes * (1 - fraction))
    return Plan(
        model=model.name, engine="sglang", engine_version=release_text(version), gpu=device.name,
        gpu_memory_bytes=device.memory_bytes, num_gpus=tp * pp, extra=extra,
        tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=1,
        expert_parallel_size=tp if expert_parallel else 1,
        max_model_len=max_len, gpu_memory_utilization=round(fraction, 4), dtype=act.name,
        kv_cache_dtype=kv.name, block_size=settings.page_size,
        max_num_batched_tokens=batch_defaults(card / MiB, tp, version)[0] // dp,
        max_num_seqs=running, weights_bytes=head.weights_bytes, activation_bytes=reserved, non_torch_bytes=0,
        kv_pool_bytes=head.pool.kv_bytes, kv_bytes_per_token=bytes_per_token(head.specs), kv_cache_tokens=tokens,
        num_blocks=tokens, max_concurrency=round(tokens / max_len, 4), fits=fits,
        shortfall_bytes=0 if fits else _shortfall(head.pool, rest, max(max_len, floor), state_cap, mixer, settings),
        max_model_len_that_fits=min(max_len, tokens) if state_cap != 0 and tokens >= floor else 0,
        stages=[StageMemory(stage=i, layers=f"{x.layers.start}-{x.layers.stop - 1}", weights_bytes=x.weights_bytes,
                            activation_bytes=reserved, non_torch_bytes=0, kv_pool_bytes=x.pool.kv_bytes,
                            kv_bytes_per_token=bytes_per_token(x.specs), num_blocks=x.pool.tokens)
                for i, x in enumerate(stages)],
        vllm_command=sglang_command(shlex.quote(model_argument(model)), tp, pp, max_len, kv, quantization,
                                    fraction, dp, expert_parallel, speculative, lora, version),
        formula=_formula(device, fraction, rest, stages, binding, extra, settings),
        notes=plan_notes(model, shape, device, settings, stages, binding, kv, speculative, lora, running, max_len)
        + ([_swa_floor_note(model, head.pool, floor, settings)] if tokens < floor else []) + _release_notes(version),
        warnings=newer_release("SGLang", version, DEFAULT_VERSION) + engine_warnings(model, pp, version),
        kv_layers=tuple(head.specs),
    )


def _check(model, shape, tp: int, pp: int, dp: int, expert_parallel: bool, speculative, lora, image_limit,
           version) -> Speculative | None:
    """The settings kvplan can plan for SGLang, or a one-line WorkloadError saying what to change."""
    arch = model.architecture
    if image_limit is not None:
        raise WorkloadError("kvplan models image limits and language-model-only serving for vLLM; SGLang 0.5 "
                            "loads the vision tower of most models whatever its flags: plan it with the tower")
    if tp % dp:
        raise WorkloadError(f"SGLang's DP attention splits the TP group: DP {dp} must divide TP {tp}")
    if pp > model.num_layers:
        raise WorkloadError(f"PP {pp} is more stages than {model.name}'s {model.num_layers} layers: use at most "
                            f"{model.num_layers}")
    if expert_parallel and not shape.has_experts:
        raise WorkloadError(f"{model.name} has no routed experts: leave expert parallelism out")
    if expert_parallel and (odd := _uneven_experts(shape, tp)):
        raise WorkloadError(f"{model.name}'s {odd} routed experts do not divide over --ep-size {tp}, which "
                            "SGLang's FusedMoE asserts at start-up: use a TP that divides them, or no expert "
                            "parallelism")
    if shape.top_dims and (why := vocab_refusal(model.name, shape.vocab, tp, vocab_rule("sglang", version),
                                                f"SGLang {release_text(version)}")):
        raise WorkloadError(why)
    if version < FIRST_RELEASE.get(arch, (0, 0, 0)):
        raise WorkloadError(f"SGLang {release_text(version)} has no {arch} model: plan it with --engine-version "
                            f"{release_text(FIRST_RELEASE[arch])} or later")
    if is_dsa(model) and (0, 5, 3) <= version < (0, 5, 8):
        raise WorkloadError(f"SGLang {release_text(version)} forces DP attention on DeepSeek-V3.2-style sparse "
                            "attention (server_args.py), which kvplan does not plan: use --engine-version 0.5.8 or later")
    if not any(s.kind in ("full", "mla", "chunked", "sliding") for _, s in model.specs()):
        # cell_size counts attention layers only, so a pure SSM model got a 0-token pool: "short by 1 B"
        raise WorkloadError(f"{model.name} has no attention layers (its cache is Mamba state per request), and "
                            "kvplan models SGLang's token pool only: plan it for vLLM or transformers")
    if model.has_state:
        _check_hybrid(model, pp, speculative, tp // dp, version)
    if (speculative is not None or lora is not None) and pp > 1:
        raise WorkloadError("kvplan sizes SGLang's drafts and LoRA slots without pipeline parallelism: use PP 1")
    if speculative is not None:
        speculative = spec_decode.check(model, speculative)
        if speculative.method == "eagle":
            raise WorkloadError("kvplan sizes SGLang's EAGLE-3, MTP (NEXTN) and draft-model (STANDALONE) drafting: "
                                "use eagle3, mtp or draft_model")
        _check_draft(speculative, tp, expert_parallel)
    if lora is not None and (why := lora_rules.unsupported(shape)):
        raise WorkloadError(f"{why}: plan {model.name} without LoRA")
    return speculative


def _check_draft(speculative, tp: int, expert_parallel: bool) -> None:
    """A draft model of attention layers only (kvplan sizes no draft's state pool). It builds in the target's layout
    (0.5.23 speculative/draft_parallel.py TARGET_LAYOUT), its FusedMoE at the target's --ep-size, whose start-up
    assert wants its routed experts whole and even too: Qwen1.5-MoE's 60 over EP 8 fail it (60 % 8 = 4) where the
    target's 128 pass."""
    if speculative.method == "draft_model" and speculative.draft.state_mixers:
        # cell_specs leaves Mamba layers out of the cell and only the target's state gets a pool: Qwen3-Next as a
        # draft came out as its 12 attention layers, its 36 Gated DeltaNet states unpriced
        raise WorkloadError(f"{speculative.draft.name} holds {' and '.join(sorted(speculative.draft.state_mixers))} "
                            "state besides its KV, which kvplan does not size for an SGLang draft model: use a draft "
                            "of attention layers")
    if not expert_parallel or speculative.method != "draft_model":
        return
    if odd := _uneven_experts(speculative.draft.require_arch(), tp):
        raise WorkloadError(f"the draft {speculative.draft.name}'s {odd} routed experts do not divide over "
                            f"--ep-size {tp}, which SGLang's FusedMoE asserts at start-up as for the target: use a "
                            "TP that divides them, or no expert parallelism")


def _uneven_experts(shape, tp: int) -> int | None:
    """The fewest routed experts of a MoE layer that --ep-size `tp` does not divide, None when it divides them all:
    0.5.23 layers/moe/fused_moe_triton/layer.py FusedMoE.__init__ asserts `self._num_global_routed % storage_ep_size
    == 0` (0.5.1: `num_experts % self.moe_ep_size == 0`), whole and equal shares only. Qwen1.5-MoE over 8: 60."""
    return min((e for e in {layer.ffn.experts for layer in shape.layers if isinstance(layer.ffn, MoEDims)} if e % tp),
               default=None)


def _check_hybrid(model, pp: int, speculative, attn_tp: int, version) -> None:
    arch = model.architecture or model.model_type
    if model.architecture not in MAMBA_POOL_ARCHS:
        raise WorkloadError(f"SGLang keeps a Mamba state pool for Qwen3-Next, Qwen3.5 / 3.6, Nemotron-H and Falcon-H1, "
                            f"and kvplan plans those; {arch} is not among them: plan it for vLLM")
    # configs/mamba_utils.py Mamba2StateShape.create (0.5.23 :216-230) splits the state's heads and the conv
    # channels with distributed/utils.py `divide`, which asserts: Nemotron-H-56B's 256 Mamba heads at attention
    # TP 3 stop SGLang's start-up (its groups are replicated instead: vllm_kv.conv_channels)
    for spec in model.distinct_specs:
        if isinstance(spec, StateSpec) and spec.recurrent_shape and spec.recurrent_shape[0] % attn_tp:
            raise WorkloadError(f"{model.name}'s {spec.recurrent_shape[0]} {spec.mixer} heads do not split over "
                                f"attention TP {attn_tp} (SGLang's Mamba2StateShape.create divides them): use an "
                                f"attention TP that divides {spec.recurrent_shape[0]}")
    first_pp = PP_HYBRID_FROM.get(model.architecture)
    if pp > 1 and (first_pp is None or version < first_pp):
        later = f", or --engine-version {release_text(first_pp)} or later" if first_pp else ""
        raise WorkloadError(f"kvplan plans SGLang's {model.architecture} at PP 1 (Qwen3-Next and Falcon-H1 assert one "
                            f"stage; the pipelines of Nemotron-H and Qwen3.5 are read from 0.5.19): plan {model.name} "
                            f"with TP instead{later}")
    if speculative is not None:
        raise WorkloadError(f"kvplan sizes SGLang's Mamba state pool without drafting (drafts add intermediate "
                            f"states per step): plan {model.name} without speculative decoding")


def _swa_window(model) -> int | None:
    """The config's sliding window SGLang's SWA check reads (a sliding layer's; chunked layers have none)."""
    windows = [x.window for x in model.distinct_specs if isinstance(x, SlidingWindowSpec) and x.window]
    return max(windows) if windows else None


def _swa_floor_note(model, pool: StagePool, floor: int, s: SglangSettings) -> str:
    return (f"SGLang {release_text(s.version)} refuses to start: its SWA pool of {pool.swa_tokens:,} tokens cannot "
            f"hold the {_swa_window(model):,}-token window plus a {s.page_size}-token page "
            f"(pool_configurator.py validate_swa_pool_size); it needs {floor:,} full tokens")


def _sm_major(device: GPU) -> int | None:
    return device.compute_capability[0] if device.compute_capability else None


def _settings(model, shape, device: GPU, tp: int, pp: int, dp: int, mem_fraction, version, speculative,
              lora) -> SglangSettings:
    """SGLang's defaults for this model: its page (64 for DSA on CUDA: 0.5.23 model_overrides/deepseek_v2.py;
    1 on ROCm before 0.5.12; the page of an MHA model's Blackwell backend: sglang_rules.sm100_page), the VLM
    factor, the prefill graphs it keeps on."""
    dsa = is_dsa(model)
    page = 64 if dsa and not (device.vendor == "amd" and version < (0, 5, 12)) else 1
    asymmetric = any(isinstance(x, FullAttentionSpec) and x.k_head_dim != x.v_head_dim
                     for x in model.distinct_specs)
    page = sm100_page(model.architecture, version, _sm_major(device), mla=model.is_mla, asymmetric=asymmetric,
                      hybrid=model.has_state, speculative=speculative is not None) or page
    algorithm = ALGORITHMS[speculative.method] if speculative is not None else ""
    graphs = prefill_graphs_reserved(version, architecture=model.architecture, pp=pp, dp_attention=dp,
                                     lora=lora is not None, speculative=bool(algorithm), mla=model.is_mla, dsa=dsa)
    return SglangSettings(tp, pp, mem_fraction, page_size=page, version=version,
                          vlm_factor=vlm_factor(shape.vit, version), dp_attention=dp,
                          mla=model.is_mla, speculative=algorithm, prefill_graphs=graphs)


def _stages(model, shape, device: GPU, s: SglangSettings, act: DType, kv: DType, attn_tp: int, on_swa: bool,
            speculative, fraction: float, taken: int, expert_parallel: bool = False) -> tuple[list[Stage], int]:
    """(every stage's weights, KV layers and pool, the budget): each pool is sized from the budget the most loaded
    stage leaves, since every rank reads the MIN of the free memory over the TP x PP ranks (0.5.23
    kv_cache_configurator.py `_profile_available_bytes`, `distributed=launch_world_size > 1`; 0.5.1
    model_runner.py:1045-1050). Llama-3.1-70B at TP1 x PP4: stage 0 holds the embeddings besides the lm_head every
    stage has, 2.10 GB more than the others, and that sets every stage's budget."""
    version, tp, pp = s.version, s.tensor_parallel_size, s.pipeline_parallel_size
    splits = pp_layer_split(model.num_layers, pp, version)
    head_all = pp > 1 and lm_head_every_stage(model.architecture, version) is not False
    towers_all = pp > 1 and model.architecture in TOWER_EVERY_STAGE   # Qwen3.5: the vision tower on every rank
    weights = [gpu_weight_bytes(model, shape, act, tp, layers, i == 0, i == pp - 1, True, attn_ranks=attn_tp,
                                head_everywhere=head_all, towers_everywhere=towers_all,
                                vocab_rule=vocab_rule("sglang", version), expert_parallel=expert_parallel)
                + rope_cache_bytes(model, act)
               for i, layers in enumerate(splits)]
    rest = budget_bytes(device.memory_bytes, fraction, max(weights), taken)
    mixer = MAMBA_POOL_ARCHS.get(model.architecture)
    stages = []
    for layers, weight in zip(splits, weights):
        specs = cell_specs(model, layers, attn_tp, kv, int(act.bytes), device, version, on_swa)
        if speculative is not None:   # the draft's windowed layers follow the target's SWA pool, on or off
            specs = specs + pool_kinds(spec_decode.draft_layer_specs(model, speculative, attn_tp, kv.bits / 8,
                                                                     int(act.bytes)), on_swa)
        state = (_state_share(model, splits, attn_tp, version), s.dp_attention, mixer) if model.has_state else None
        stages.append(Stage(layers, weight, specs, stage_pool(rest, specs, s, state)))
    return stages, rest


def _state_share(model, splits: list[range], attn_tp: int, version) -> int:
    """The Mamba state one request is charged on every rank: under PP the largest stage's share of the whole
    model's, int(per request x max stage layers / layers) (0.5.23 kv_cache_configurator.py `_handle_max_mamba_cache`
    `pp_layer_scale`, the same float product), so every rank sizes the same pool. Nemotron-H-56B at PP 2: its 54
    Mamba layers split 27 / 27 over 59 + 59 layers, half the state a stage."""
    whole = state_bytes_per_request(model, range(model.num_layers), attn_tp, version)
    if len(splits) == 1:
        return whole
    mamba = [i for i in range(model.num_layers) if any(isinstance(x, StateSpec) for x in model.layers[i])]
    largest = max(sum(1 for i in mamba if i in layers) for layers in splits)
    return int(whole * (largest / max(len(mamba), 1)))


def _extra_lines(model, shape, act: DType, kv: DType, tp: int, attn_tp: int, speculative, lora,
                 version, expert_parallel: bool = False) -> dict[str, int]:
    """What is resident or held back before SGLang reads the free memory the pool is sized from: the drafter's
    weights (MTP and EAGLE-3 load their own embed_tokens / lm_head copies before sharing the target's), the LoRA
    memory pool (srt/lora/mem_pool.py, allocated before KV profiling), a multimodal model's 100 MiB image cache
    (0.5.18+ kv_cache_configurator.py `mm_runtime_reservation_gb`). The drafter is resident before the budget from
    0.5.14 ("draft weights are now counted"); before, it loaded into the reserve, which held 2-6 GB more for it."""
    out = {}
    if speculative is not None and version >= (0, 5, 14):   # before 0.5.14 the draft loads into the reserve
        rule = vocab_rule("sglang", version)
        # a draft model builds in the target's layout (0.5.23 speculative/draft_parallel.py TARGET_LAYOUT: attention
        # over the attention TP, experts over moe_tp x moe_ep = TP), an EAGLE-3 head in one attention-TP group
        drafted, _ = spec_decode.draft_weight_bytes(model, speculative, act, attn_tp, tp, rule, expert_parallel,
                                                    layout_tp=tp)
        if speculative.method == "mtp":   # the duplicate embed_tokens and shared_head, freed after the budget
            drafted += 2 * vocab_share(shape.vocab * shape.hidden * int(act.bytes), shape.vocab, tp, rule)
        out["draft model weights"] = drafted
    if lora is not None:
        out["LoRA memory pool"] = lora_rules.lora_bytes(shape, int(act.bytes), attn_tp, tp, lora,
                                                        expert_parallel=expert_parallel)[0]
    if version >= (0, 5, 18) and multimodal(model.architecture, version):
        out["image cache (SGLANG_VLM_CACHE_SIZE_MB)"] = VLM_CACHE_BYTES
    return out


def _shortfall(pool: StagePool, rest: int, max_len: int, state_cap, mixer, s: SglangSettings) -> int:
    """Bytes of budget one max_model_len request misses by: its tokens at the stage's cost (full + ratio x SWA for
    SWA hybrids); for a Mamba hybrid with 512 fixed slots those plus the slots, with the ratio split the budget
    whose 1 / 1.9 holds the tokens and whose 0.9 / 1.9 holds a request's slots (ratio + the padding one)."""
    # a request takes whole pages (0.5.23 mem_cache/allocator/paged.py alloc_extend_naive: ceil_seq): 123,841 tokens
    # at page 64 are 1,936 pages, 123,904 tokens
    page = max(1, s.page_size)
    need = ceil(-(-max_len // page) * page * pool.divisor)
    if state_cap is not None and mamba_fixed(mixer, s.version):
        need += pool.state_bytes
    elif state_cap is not None:
        share = (1 + s.mamba_ratio) / s.mamba_ratio
        need = max(ceil(need * (1 + s.mamba_ratio)),
                   ceil((mamba_requests_ratio(mixer, s.version) + 1) * pool.state_per_request * share))
    return max(1, need - rest)


def _formula(device: GPU, fraction: float, rest: int, stages: list[Stage], binding: int, extra: dict[str, int],
             s: SglangSettings) -> list[str]:
    """The arithmetic as printed, every division true as written (tests/test_sglang.py evaluates them)."""
    weights = [x.weights_bytes for x in stages]
    most = f" (stage {weights.index(max(weights))}, the most loaded)" if len(stages) > 1 else ""
    taken = {k: v for k, v in extra.items() if k != "Mamba state pool"}
    held = f" - {fmt_bytes(sum(taken.values()))} held before" if taken else ""
    lines = [f"mem_fraction_static = {fraction:.3f}; KV = (free before loading {fmt_bytes(device.memory_bytes)} - "
             f"context {fmt_bytes(PRELOAD_BYTES)}) x {fraction:.3f} - weights {fmt_bytes(max(weights))}{most} - load "
             f"extras {fmt_bytes(LOAD_EXTRA_BYTES)}{held} = {fmt_bytes(rest)} ({rest:,} B)"]
    if taken:
        lines.append("taken before the pool is sized: " + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in taken.items()))
    head = stages[binding].pool
    if head.state_per_request:
        slots = head.state_bytes // head.state_per_request
        lines.append(f"Mamba state = {slots:,} slots x {head.state_per_request:,} B a request = {head.state_bytes:,} B "
                     f"({head.state_slots:,} usable); KV keeps max(0, {rest:,} - {head.state_bytes:,}) = {head.kv_bytes:,} B")
    quotients = [_division(x.pool, s) for x in stages]
    shown = quotients[0] if len(set(quotients)) == 1 else "min(" + ", ".join(quotients) + ")"
    lines.append(f"max_total_num_tokens = {shown} = {head.tokens:,}")
    if head.swa_tokens and head.swa_tokens != head.tokens:
        paged = f" // {s.page_size} x {s.page_size}" if s.page_size > 1 else ""
        lines.append(f"SWA pool = int({head.tokens:,} x {s.swa_full_tokens_ratio}){paged} = {head.swa_tokens:,} "
                     "tokens of the sliding layers")
    return lines


def _division(pool: StagePool, s: SglangSettings) -> str:
    """One stage's quotient as an expression that evaluates to its tokens ("x" for *): kv // cell, SGLang's
    two-step SWA split before 0.5.11, the page rounding."""
    if isinstance(pool.divisor, float) and s.version < (0, 5, 11):
        expr = f"int({pool.kv_bytes:,} // {pool.cell_bytes:,} x {pool.cell_bytes:,} / {pool.divisor:,})"
    else:
        expr = f"{pool.kv_bytes:,} // {pool.divisor:,}"
    return f"{expr} // {s.page_size} x {s.page_size}" if s.page_size > 1 else expr


def sglang_command(name: str, tp: int, pp: int, max_len: int, kv: DType, quantization, mem_fraction: float,
                   dp: int = 1, expert_parallel: bool = False, speculative=None, lora=None,
                   version: tuple[int, int, int] = (0, 5, 23)) -> str:
    parts = [f"python -m sglang.launch_server --model-path {name}", f"--tp-size {tp}"]
    if pp > 1:
        parts.append(f"--pp-size {pp}")
    if dp > 1:   # --attn-dp-size arrives in 0.5.22 (arg_groups/fields/parallel.py); the old spelling warns there
        parts.append(f"--attn-dp-size {dp}" if version >= (0, 5, 22) else f"--dp-size {dp} --enable-dp-attention")
    if expert_parallel:
        parts.append(f"--ep-size {tp}")
    if speculative is not None:
        parts.append(f"--speculative-algorithm {ALGORITHMS[speculative.method]} "
                     f"--speculative-num-steps {speculative.num_speculative_tokens}")
        if speculative.draft is not None:
            parts.append(f"--speculative-draft-model-path {speculative.draft_argument or speculative.draft.name}")
    if lora is not None:
        parts.append(f"--enable-lora --max-loras-per-batch {lora.max_loras} --max-lora-rank {lora.max_lora_rank}")
    parts += [f"--context-length {max_len}", f"--mem-fraction-static {round(mem_fraction, 4)}"]
    if kv.bits == 8:
        parts.append("--kv-cache-dtype " + ("fp8_e4m3" if kv.name == "float8_e4m3" else "fp8_e5m2"))
    if quantization:
        parts.append(f"--quantization {quantization}")
    return " ".join(parts)
