"""SGLang's plan, end to end: settings in, the per-GPU budget (a static fraction of the card for weights + KV,
the rest SGLang's reserve for activations and CUDA graphs), max_total_num_tokens, the verdict and the
`sglang.launch_server` command out. The pool's arithmetic and SGLang's defaults are in `sglang_pool`."""

from __future__ import annotations

import shlex
from math import ceil

from ...dtypes import DType
from ...errors import WorkloadError
from ...gpus import GPU
from ...model.spec import ModelSpec
from ...units import MiB, fmt_bytes
from ...weights.split import gpu_weight_bytes, rope_cache_bytes, with_online_quant
from ..inputs import model_argument
from ..result import Plan, StageMemory
from . import lora as lora_rules
from . import spec_decode
from .lora import LoraSettings
from .sglang_pool import LOAD_EXTRA_BYTES, PRELOAD_BYTES, V0523, SglangSettings, batch_defaults, sglang_pool, vlm_factor
from .spec_decode import Speculative
from .vllm_kv import bytes_per_token, rank_layer_specs


def plan_sglang(model: ModelSpec, device: GPU, *, tp: int, pp: int, mem_fraction: float | None, max_len: int,
                act: DType, kv: DType, quantization: str | None, version: tuple[int, int, int],
                image_limit: int | None, dp: int = 1, expert_parallel: bool = False,
                speculative: Speculative | None = None, lora: LoraSettings | None = None) -> Plan:
    """SGLang's start-up for these settings (checked by kvplan.planning.inputs). `mem_fraction` None: SGLang's own
    default for this card, TP and version (an explicit 0.9 is the user's --mem-fraction-static). `dp`: DP
    attention ranks inside the TP group (--dp N --enable-dp-attention): attention and its KV heads split over
    TP / N, each rank with its own pool; experts stay split over all TP ranks (--ep-size TP moves whole experts,
    the same bytes per rank)."""
    shape = with_online_quant(model.require_arch(), quantization)
    if image_limit is not None:
        raise WorkloadError("kvplan models image limits and language-model-only serving for vLLM; SGLang 0.5 "
                            "loads the vision tower of most models whatever its flags: plan it with the tower")
    if tp % dp:
        raise WorkloadError(f"SGLang's DP attention splits the TP group: DP {dp} must divide TP {tp}")
    if expert_parallel and not shape.has_experts:
        raise WorkloadError(f"{model.name} has no routed experts: leave expert parallelism out")
    if speculative is not None:
        speculative = spec_decode.check(model, speculative)
        if speculative.method == "eagle":
            raise WorkloadError("kvplan sizes SGLang's EAGLE-3, MTP (NEXTN) and draft-model (STANDALONE) drafting: "
                                "use eagle3, mtp or draft_model")
    if lora is not None and (why := lora_rules.unsupported(shape)):
        raise WorkloadError(f"{why}: plan {model.name} without LoRA")
    attn_tp = tp // dp
    layers = range(model.num_layers)
    weights = (gpu_weight_bytes(model, shape, act, tp, layers, True, True, attn_ranks=attn_tp)
               + rope_cache_bytes(model, act))
    specs = rank_layer_specs(model, layers, attn_tp, kv.bits / 8, int(act.bytes))
    extra = _extra_lines(model, shape, act, kv, tp, attn_tp, speculative, lora)
    if speculative is not None:
        specs = specs + spec_decode.draft_layer_specs(model, speculative, attn_tp, kv.bits / 8, int(act.bytes))
    settings = SglangSettings(tp, pp, mem_fraction, version=version, vlm_factor=vlm_factor(shape.vit, version),
                              dp_attention=dp, mla=model.is_mla, speculative=speculative is not None)
    if not any(x.kind in ("full", "mla", "chunked", "sliding") for x in specs):
        # cell_size counts attention layers only, so a pure SSM model got a 0-token pool: "short by 1 B"
        raise WorkloadError(f"{model.name} has no attention layers (its cache is Mamba state per request), and "
                            "kvplan models SGLang's token pool only: plan it for vLLM or transformers")
    pool = sglang_pool(device.memory_bytes, weights, specs, settings, max_len, sum(extra.values()))
    chunk = batch_defaults(device.memory_bytes / MiB, tp, version)[0] // dp
    per_token = bytes_per_token(specs)
    fits = pool.max_total_tokens >= max_len
    concurrency = pool.max_total_tokens / max_len
    reserved = int(device.memory_bytes * (1 - pool.mem_fraction_static))
    stage = StageMemory(stage=0, layers=f"0-{model.num_layers - 1}", weights_bytes=weights, activation_bytes=reserved,
                        non_torch_bytes=0, kv_pool_bytes=max(0, pool.rest_bytes), kv_bytes_per_token=per_token,
                        num_blocks=pool.max_total_tokens)
    formula = [f"mem_fraction_static = {pool.mem_fraction_static:.3f}; KV = (free before loading "
               f"{fmt_bytes(device.memory_bytes)} - context {fmt_bytes(PRELOAD_BYTES)}) x "
               f"{pool.mem_fraction_static:.3f} - weights {fmt_bytes(weights)} - load extras "
               f"{fmt_bytes(LOAD_EXTRA_BYTES)} = {fmt_bytes(pool.rest_bytes)}",
               f"max_total_num_tokens = {pool.rest_bytes:,} // {pool.cell_bytes:,} B per token = "
               f"{pool.max_total_tokens:,}"]
    if extra:
        formula.insert(1, "taken before the pool is sized: " + ", ".join(f"{k} {fmt_bytes(v)}"
                                                                          for k, v in extra.items()))
    return Plan(
        model=model.name, engine="sglang", engine_version=".".join(map(str, version)), gpu=device.name,
        gpu_memory_bytes=device.memory_bytes, num_gpus=tp * pp, extra=extra,
        tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=1,
        expert_parallel_size=tp if expert_parallel else 1,
        max_model_len=max_len, gpu_memory_utilization=round(pool.mem_fraction_static, 4), dtype=act.name,
        kv_cache_dtype=kv.name, block_size=1, max_num_batched_tokens=chunk,
        max_num_seqs=pool.max_running_requests, weights_bytes=weights, activation_bytes=reserved, non_torch_bytes=0,
        kv_pool_bytes=max(0, pool.rest_bytes), kv_bytes_per_token=per_token, kv_cache_tokens=pool.max_total_tokens,
        num_blocks=pool.max_total_tokens, max_concurrency=round(concurrency, 4), fits=fits,
        shortfall_bytes=0 if fits else max(1, ceil(max_len * _sglang_token_cost(pool, specs, settings)
                                                   - pool.rest_bytes)),
        max_model_len_that_fits=min(max_len, pool.max_total_tokens), stages=[stage],
        vllm_command=sglang_command(shlex.quote(model_argument(model)), tp, pp, max_len, kv, quantization,
                                    pool.mem_fraction_static, dp, expert_parallel, speculative, lora),
        formula=formula,
        notes=["SGLang: activations and CUDA graphs live in the (1 - mem_fraction_static) reserve",
               "the command field holds the `sglang.launch_server` command for this engine"]
        + _notes(model, dp, tp, speculative, lora, version)
        + ([f"SGLang loads the vision tower with the language model and scales a default mem_fraction_static by "
            f"{settings.vlm_factor:.4f} for it (server_args.py adjust_mem_fraction_for_vlm; 1 where multimodal "
            "is off by default: Gemma 3, Llama 4); its ~100 MB image cache (SGLANG_VLM_CACHE_SIZE_MB) is not "
            "modelled"] if shape.towers else []),
    )


def _sglang_token_cost(pool, specs, settings: SglangSettings) -> float:
    """Pool bytes one more full-attention token costs: the cell, or for SWA hybrids full + ratio x SWA cell."""
    full = sum(x.bytes_per_token for x in specs if x.kind in ("full", "mla", "chunked"))
    swa = sum(x.bytes_per_token for x in specs if x.kind == "sliding")
    return full + settings.swa_full_tokens_ratio * swa if full and swa else pool.cell_bytes


def _extra_lines(model, shape, act: DType, kv: DType, tp: int, attn_tp: int, speculative, lora) -> dict[str, int]:
    """What 0.5.23 holds before it reads the free memory the pool is sized from (model_runner.py): the drafter's
    weights (MTP and EAGLE-3 load their own embed_tokens / lm_head copies before sharing the target's), the LoRA
    memory pool (srt/lora/mem_pool.py, allocated before KV profiling)."""
    out = {}
    if speculative is not None:
        drafted, _ = spec_decode.draft_weight_bytes(model, speculative, act, attn_tp, tp)
        if speculative.method == "mtp":   # the duplicate embed_tokens and shared_head, freed after the budget
            drafted += 2 * -(-shape.vocab * shape.hidden // tp) * int(act.bytes)
        out["draft model weights"] = drafted
    if lora is not None:
        out["LoRA memory pool"] = lora_rules.lora_bytes(shape, int(act.bytes), attn_tp, tp, lora)[0]
    return out


def _notes(model, dp: int, tp: int, speculative, lora, version) -> list[str]:
    notes = []
    if dp > 1:
        notes.append(f"DP attention: {dp} ranks of attention TP {tp // dp}, each with its own pool (the figures are "
                     f"one rank's); requests spread over the {dp} ranks")
    if speculative is not None:
        notes.append(f"speculative decoding ({speculative.method}): the draft's KV layers join the cell, its pool "
                     "holds as many tokens as the target's (0.5.23 model_runner; SGLang sizes it as target x (1 + "
                     "draft layers / target layers), exact where the draft's layers match the target's); "
                     "max_running_requests 48 unless set")
    if lora is not None:
        notes.append(f"LoRA: {lora.max_loras} adapter slots (--max-loras-per-batch) of rank {lora.max_lora_rank} "
                     "for every linear layer, no embed_tokens / lm_head (--lora-target-modules all adds them)")
    if version < V0523 and (dp > 1 or speculative is not None):
        notes.append(f"SGLang {'.'.join(map(str, version))}: DP attention and drafting are sized with 0.5.23's "
                     "rules (0.5.1-0.5.3 reserved 2-6 GiB more for them in mem_fraction_static)")
    return notes


def sglang_command(name: str, tp: int, pp: int, max_len: int, kv: DType, quantization,
                   mem_fraction: float, dp: int = 1, expert_parallel: bool = False, speculative=None,
                   lora=None) -> str:
    parts = [f"python -m sglang.launch_server --model-path {name}", f"--tp-size {tp}"]
    if pp > 1:
        parts.append(f"--pp-size {pp}")
    if dp > 1:
        parts.append(f"--dp-size {dp} --enable-dp-attention")
    if expert_parallel:
        parts.append(f"--ep-size {tp}")
    if speculative is not None:
        algorithm = {"mtp": "NEXTN", "eagle3": "EAGLE3", "draft_model": "STANDALONE"}[speculative.method]
        parts.append(f"--speculative-algorithm {algorithm} --speculative-num-steps {speculative.num_speculative_tokens}")
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
