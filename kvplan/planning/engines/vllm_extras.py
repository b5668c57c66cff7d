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
from ...model.spec import ModelSpec
from ...units import MiB, fmt_bytes
from . import lora as lora_rules
from . import spec_decode
from . import vllm_cudagraph as cudagraph
from .lora import LoraSettings
from .spec_decode import Speculative
from .vllm_kv import rank_layer_specs
from .vllm_profile import VllmSettings


@dataclass(frozen=True)
class Extras:
    """What a plan serves besides the model: a drafter, adapter slots."""

    speculative: Speculative | None = None
    lora: LoraSettings | None = None


GRAPHS = "CUDA graphs (estimate)"
GRAPHS_CAPTURED = "CUDA graphs (captured after)"   # with --kv-cache-memory-bytes: real, but not in the budget


def graphs_for(model, shape, device: GPU, s: VllmSettings, act: DType, extras: Extras):
    """A function of a stage's layers giving vLLM's CUDA-graph estimate there (None where vLLM makes none)."""
    version = s.version_tuple
    if not cudagraph.computed(version, s.enforce_eager):
        return lambda layers: None
    if cudagraph.v2_runner(version, model.model_type, shape.has_experts, shape.quant is not None, _hybrid(model),
                           model.spec_kinds <= {"mamba"}) and version[:2] < (0, 29):
        return lambda layers: None
    sm100 = device.compute_capability is not None and device.compute_capability[0] == 10
    sizes = cudagraph.capture_sizes(s.max_num_seqs, s.max_num_batched_tokens, version, spec_tokens=s.spec_tokens,
                                    sm100=sm100, max_capture=1024 if model.model_type == "gpt_oss" else None)
    lora_cases = 2 if extras.lora is not None else 1      # graphs with and without active adapters

    def at(layers: range):
        dims = cudagraph.graph_dims(shape, model.model_type, s.tensor_parallel_size, layers, int(act.bytes))
        est = cudagraph.estimate(dims, sizes, s.max_num_seqs, s.spec_tokens)
        if lora_cases == 1:
            return est
        return dataclasses.replace(est, total_bytes=est.total_bytes + (est.total_bytes - max(
            est.piecewise_first, est.full_first)), formula=est.formula + " x 2 LoRA cases (first captures once)")
    return at


def _hybrid(model) -> bool:
    return len(model.spec_kinds - {"none"}) > 1


def extra_lines(model, shape, s: VllmSettings, act: DType, graph, extras: Extras, layers: range,
                 moe_ranks: int) -> dict[str, int]:
    """The per-GPU lines beyond weights / activation / non-torch, each taken from the KV budget."""
    out: dict[str, int] = {}
    if extras.speculative is not None:
        out["draft model weights"] = spec_decode.draft_weight_bytes(model, extras.speculative, act,
                                                                    s.tensor_parallel_size, moe_ranks)[0]
    if extras.lora is not None:
        out["LoRA adapter slots"] = lora_rules.lora_bytes(shape, int(act.bytes), s.tensor_parallel_size, moe_ranks,
                                                          extras.lora, layers)[0]
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
                                                s.tensor_parallel_size, s.tensor_parallel_size * s.data_parallel_size)
        notes.append(f"speculative decoding ({extras.speculative.method}, {s.spec_tokens} drafted per step): draft weights "
                     f"{how}; its {spec_decode.layer_count(extras.speculative, model)} KV layer(s) share the pool, "
                     "so every token costs the target's bytes and the draft's; vLLM counts the draft in "
                     "'Model loading took'")
    if extras.lora is not None:
        notes.append(lora_rules.lora_bytes(model.require_arch(), int(resolve_dtype(s.dtype).bytes),
                                           s.tensor_parallel_size, s.tensor_parallel_size * s.data_parallel_size,
                                           extras.lora)[1] + " for the whole model (vLLM lora/layers; counted "
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


ALIGN_FROM = (0, 23)       # the first release whose published hybrid logs need 'align' mode's 2 states
CHECKPOINT_FROM = (0, 33)  # read in 0.33's qwen_gdn_linear_attn.py; the releases before it were not bisected


def _state_pages(model, version: tuple[int, int, int], spec_tokens: int = 0) -> int:
    """State pages one request holds in each Mamba / linear-attention layer. vLLM turns prefix caching on by
    default, which puts these layers in 'align' mode (0.33 model_executor/models/config.py:764-787):
    2 + speculative tokens (v1/kv_cache_interface.py MambaSpec.max_memory_usage_bytes, 0.33 :1135), and Qwen's
    gated DeltaNet layers export one prefill checkpoint block more at 0.33 (qwen_gdn_linear_attn.py:748). The
    GB10 and RTX 5090 logs of Qwen3.6 on vLLM 0.23-0.24 (validation/vllm_holdout.md) hold 2."""
    if version[:2] < ALIGN_FROM:
        return 1
    gdn = "gated_deltanet" in model.state_mixers
    return 2 + spec_tokens + (1 if gdn and version[:2] >= CHECKPOINT_FROM else 0)


def stage_specs(model, layers: range, tp: int, kv: DType, act: DType, version: tuple[int, int, int],
                speculative: Speculative | None = None) -> list:
    """The KV layers one rank of the stage owning `layers` holds, as vLLM sizes them: the drafter's layers too,
    and Mamba layers with the state pages a request holds and k more conv columns with k speculative tokens
    (model_executor/layers/mamba/mamba_utils.py: kernel - 1 + k)."""
    specs = rank_layer_specs(model, layers, tp, kv.bits / 8, int(act.bytes))
    if speculative is not None:
        specs = specs + spec_decode.draft_layer_specs(model, speculative, tp, kv.bits / 8, int(act.bytes))
    k = speculative.num_speculative_tokens if speculative is not None else 0
    pages = _state_pages(model, version, k) if model.has_state else 1
    if pages == 1 and not k:
        return specs
    widened: dict[int, object] = {}  # the layers' specs repeat a few objects: each widened once
    for x in specs:
        if x.kind == "mamba" and id(x) not in widened:
            widened[id(x)] = dataclasses.replace(x, states=pages,
                                                 state_bytes=x.state_bytes + k * x.conv_bytes_per_column)
    return [widened.get(id(x), x) for x in specs]


def engine_warnings(model: ModelSpec, s: VllmSettings) -> list[str]:
    """What this plan's figures do not model, said as a warning in every face."""
    if model.has_state and (0, 19) <= s.version_tuple[:2] < ALIGN_FROM:
        # 0.19 model_executor/models/config.py MambaModelConfig: prefix caching picks "all" (a state per block)
        # for models that support Mamba prefix caching, "align" (2 per request) for the others
        return [f"vLLM {s.version} picks the Mamba cache mode by the model's prefix-caching support ('all': a state "
                "per block, 'align': 2 per request), where kvplan counts 1 state per request: the concurrency is "
                "an upper bound"]
    return []
