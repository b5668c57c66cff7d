"""vLLM's memory budget at start-up (v1 engine), per GPU.

    KV pool = gpu_memory_utilization x physical memory
              - (weights + activation peak of one dummy forward of max_num_batched_tokens tokens
                 and one dummy sampler step + non-torch memory: CUDA context, cuBLAS, NCCL)

(`vllm/v1/worker/gpu_worker.py::determine_available_memory`). The activation and non-torch terms are
formulas of the model's dimensions and the engine settings; the few engine constants they use are
listed in ENGINE_CONSTANTS with the measurement each comes from, keyed by vLLM version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...units import GiB

# Engine-level constants (not per model). Each is keyed on the vLLM versions that showed it.
ENGINE_CONSTANTS = {
    # CUDA context + cuBLAS workspace seen as "non-torch forward increase" on one H100, TP1:
    # 0.13 GiB on v0.15-0.17, 0.25 GiB from v0.18 (planner version sweep, calibration csv).
    "non_torch_base_gib": {(0, 18): 0.25, (0, 8): 0.13, (0, 0): 0.35},
    # (v0.6 V0 engine on an RTX 3090 printed non_torch_memory=0.35GiB: vllm issue 10517)
    # With pipeline stages (TP1) the per-stage non-torch increase is 0.07 GiB (v0.19 PP2/PP4 logs).
    "non_torch_pp_gib": 0.07,
    # NCCL buffers when TP > 1: 2.06 GiB at TP2, 2.13 GiB at TP4 (v0.19, Llama-3.1-8B and Qwen2.5-7B):
    # 1.75 GiB + 0.0325 GiB per rank.
    "nccl_base_gib": 1.75,
    "nccl_per_rank_gib": 0.0325,
    # Those ~1.8 GiB are NCCL's NVLink-SHARP (NVLS) buffers, which exist only on NVSwitch Hopper/Blackwell
    # systems. Elsewhere (PCIe cards, A100) NCCL rings and vLLM's custom all-reduce take far less:
    # 0.25 GiB assumed (no measurement in the calibration set; see the notes of plans that use it).
    "nccl_no_nvls_gib": 0.25,
    # The profiling sampler step of some versions kept ~6 more float32 [rows, vocab] buffers: +23.5 B per
    # (row x vocab entry). Seen from v0.14 to v0.16: Llama-3.1-8B (4.76 vs 1.89 GiB, v0.14) and Qwen3-14B
    # (5.64 vs 2.23 GiB, v0.15 and v0.16); and on the V0 engine: Llama-3.2-1B on vLLM 0.6.4 kept 1.16 GiB
    # = 256 x 128,256 x 38 B. v0.10.1 is split: Qwen2-7B on an A100 (256 rows x 152,064, three runs) left
    # 0.55 GiB for activation + non-torch, where the extra alone is 0.87 GiB; the last pipeline stage of
    # Qwen3-30B-A3B on GH200s (aarch64, 1024 rows) printed 70.58 GiB of KV, which only the extra explains
    # (70.34 with it, 73.9 without). kvplan follows the three A100 runs for 0.8-0.10
    # (validation/vllm_holdout.csv / .md). The source, read in 0.14.1: v1/worker/gpu_model_runner.py
    # `_dummy_sampler_run` (:4550-4557) sets top_p 0.9 and top_k V - 1; v1/sample/ops/topk_topp_sampler.py
    # `TopKTopPSampler.__init__` (:28-58) takes FlashInfer only with VLLM_USE_FLASHINFER_SAMPLER=1, else
    # `forward_native`, whose `apply_top_k_top_p` (:243-285) sorts the float32 logits (values 4 B + int64 indices
    # 8 B), masks top-k (1 B), softmaxes the sorted values (4 B), masks top-p (1 B) and scatters them back (4 B):
    # 22 B of new [rows, V] tensors an entry, the measured 24 B's size. 0.17, where the logs lose it, not read.
    "sampler_extra_bytes": 24,
    # v0.11.0 itself has no extra: Mistral-Small-3.2 (1024 rows x 131,072) printed 2.12 GiB of activation,
    # the forward plus its encoder cache, where the extra would make it 4.98 GiB (llm-d-benchmark's
    # empirical-vllm-memory-results.md); 0.12 and 0.13 are unmeasured and kept with 0.14. The source: 0.11.0
    # v1/sample/ops/topk_topp_sampler.py `TopKTopPSampler.__init__` (:32-63) samples with FlashInfer whenever it is
    # installed (`envs.VLLM_USE_FLASHINFER_SAMPLER is not False`), as in the v0.11.0 image, and FlashInfer's
    # sampling keeps no native top-k/top-p buffers; llm-d's undated text-model rows are a later release
    # (tests/test_vllm_holdout.py test_llm_d_text_models_at_each_candidate_version: within 2 % at 0.14.1).
    "sampler_extra_versions": (((0, 0), (0, 8)), ((0, 12), (0, 17))),
    # The default --gpu-memory-utilization: 0.9 through v0.19 (the calibration logs' "Desired GPU memory
    # utilization is (0.9, ...)"; vllm 0.19 config/cache.py:41), 0.92 from v0.20.0 (config/cache.py; 0.33 :215).
    "default_gpu_memory_utilization": {(0, 20): 0.92, (0, 0): 0.9},
    # V0 engine: a max_model_len over 32K turned chunked prefill on, with 512-token chunks by default
    # (Llama-3.2-1B at 105,088 tokens on vLLM 0.6.4: the profile kept the sampler's 1.16 GiB, not a
    # 105k-token forward).
    "v0_chunked_prefill_above": 32768,
    "v0_chunked_prefill_tokens": 512,
}


# The newest release whose source kvplan's rules were read from (pip download vllm==0.33.0 --no-deps); the
# default engine version, and what a later version is planned with (with a note saying so).
LATEST = (0, 33, 0)
OLDEST = (0, 6, 0)


def parse_version(text: str | None) -> tuple[int, int, int]:
    """'v0.19.0' / '0.19' -> (0, 19, 0); None -> the latest release kvplan read (LATEST)."""
    if not text:
        return LATEST
    # leading digits of each part: '0.19.0rc1' -> (0, 19, 0), '0.8.5.post1' -> (0, 8, 5), '0.11.0+cu128' too
    match = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or any(len(g or "") > 9 for g in match.groups()):
        from ...errors import WorkloadError, shown

        raise WorkloadError(f"engine version {shown(text)} is not a version number: write it like 0.19.0")
    return tuple(int(g or 0) for g in match.groups())  # type: ignore[return-value]


# the whole text: 'v0.19.0', '0.19', '0.10.1.1', '0.19.0rc1', '0.8.5.post1', '0.11.0+cu128'; not '0.19garbage'
_VERSION = re.compile(r"[vV]?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.\d+)*(?:\.?(?:rc|a|b|post|dev)\d*)*(?:\+[\w.]+)?")


def default_utilization(version: tuple[int, int, int]) -> float:
    """vLLM's default gpu_memory_utilization for a version."""
    return _by_version(ENGINE_CONSTANTS["default_gpu_memory_utilization"], version)


def _by_version(table: dict, version: tuple[int, int, int]) -> float:
    for since in sorted(table, reverse=True):
        if version[:2] >= since:
            return table[since]
    return table[min(table)]


@dataclass(frozen=True)
class VllmSettings:
    """The `vllm serve` settings that change memory. None = vLLM's default for that GPU and version."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    version: str = "0.33.0"
    usage_context: str = "api_server"   # `vllm serve`; "llm_class" for the offline LLM() class
    data_parallel_size: int = 1         # --data-parallel-size: engine replicas, each with its own KV pool
    enable_expert_parallel: bool = False  # --enable-expert-parallel: whole experts per rank over TP x DP ranks
    enforce_eager: bool = False         # --enforce-eager: no CUDA graphs, so no graph estimate
    cudagraph_estimate: bool | None = None   # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; None: the version's default
    kv_cache_memory_bytes: int | None = None  # --kv-cache-memory-bytes: the pool itself, no utilisation budget
    spec_tokens: int = 0                # num_speculative_tokens of --speculative-config
    nvls: bool | None = None            # NCCL NVLink SHARP buffers; None: by GPU (NVLS_GPUS)
    enable_prefix_caching: bool | None = None  # --[no-]enable-prefix-caching; None: the version's default

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        return parse_version(self.version)


V1_ENGINE = (0, 8)  # vLLM's V1 engine became the default in 0.8; the V0 engine profiled differently


def batch_defaults(memory_bytes: int, gpu_name: str, usage_context: str, version=LATEST,
                   max_model_len: int = 0) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM picks (`EngineArgs.get_batch_defaults`, 0.19
    engine/arg_utils.py:2026-2105, 0.33 :2939-3039; before 0.12 `_set_default_args[_v1]`).

    The V1 engine's rule moved three times in 0.8-0.9 (each wheel's vllm/engine/arg_utils.py, read by hand):
      0.8.0-0.8.3 `_set_default_args_v1` (0.8.0 :1662-1720, rule :1693, 0.8.3 :1647): tokens by device NAME,
          "h100" or "h200" in it (so a GH200 too): 8192 / 16384 (LLM class), else 2048 / 8192; max_num_seqs
          1024 for every GPU (0.8.0 :1715, `default_max_num_seqs = 1024` outside the if).
      0.8.4 (:1669-1682): the same name test picks max_num_seqs too: 1024 on H100/H200, 256 elsewhere.
      0.8.5 and 0.8.5.post1 (:1590-1609): by memory, `device_memory >= 70 * GiB_bytes` (no name test: an A100
          80GB and an MI300X are in the big tier, 8192 / 16384 and 1024), else 2048 / 8192 and 256.
      0.9.0 (:1492-1508, PR #17885) to 0.27: `>= 70 GiB and "a100" not in device_name`, the rule below; the same
          values in 0.9.2 :1629, 0.10.0 :1584, 0.10.1 :1638, 0.11.0 :1605, 0.12.0 :1827 and 0.19.0 :2053.
    V0 in those releases (`_set_default_args_v0`: VLLM_USE_V1=0, or a feature V1 lacked) kept 256 sequences
    (0.8.5 :1561-1563); kvplan plans every release >= 0.8 with V1, their default engine.

    GPUs with >= 70 GiB that are not A100s (H100, H200, MI300X): 8192 / 1024 for the API server,
    16384 / 1024 for the LLM class; from 0.28, cards of >= 160 GiB (B200, B300, MI325X) 16384 / 1024 for both;
    0.33 leaves the GB10 (compute capability 12.1) out of the big tier; all others 2048 / 256 and 8192 / 256.
    Then max_num_batched_tokens is at most max_num_seqs x max_model_len, and max_num_seqs at most that (0.33
    `_set_default_max_num_seqs_and_batched_tokens_args`: a 4-token model on an H100 gets 4,096 / 1,024). The V0
    engine (< 0.8) without chunked prefill batched a whole max_model_len prompt: max(max_model_len, 2048) / 256;
    above 32K tokens it turned chunked prefill on, 512 tokens.
    """
    if version[:2] < V1_ENGINE:
        if max_model_len > ENGINE_CONSTANTS["v0_chunked_prefill_above"]:
            return ENGINE_CONSTANTS["v0_chunked_prefill_tokens"], 256
        return max(max_model_len, 2048), 256
    name = gpu_name.lower()
    llm = usage_context == "llm_class"
    if version < (0, 8, 5):
        # 0.8.0-0.8.4: the name test (0.8.0 arg_utils.py:1693); max_num_seqs 1024 for all until 0.8.4 (:1675/:1682)
        big = "h100" in name or "h200" in name
        seqs = 1024 if big or version < (0, 8, 4) else 256
    else:
        # 0.8.5: memory only (arg_utils.py:1596); 0.9.0 on: not an A100 either (:1495, PR #17885)
        big = memory_bytes >= 70 * GiB and (version[:2] < (0, 9) or "a100" not in name) \
            and not (version[:2] >= (0, 33) and "gb10" in name)
        seqs = 1024 if big else 256
    tokens = (16384 if llm else 8192) if big else (8192 if llm else 2048)
    if version[:2] >= (0, 28) and memory_bytes >= 160 * GiB:   # 0.28+: cards of >= 160 GiB, both contexts
        tokens, seqs = 16384, 1024
    if max_model_len:
        tokens = min(seqs * max_model_len, tokens)
        seqs = min(seqs, tokens)
    return tokens, seqs


@dataclass(frozen=True)
class ActivationModel:
    """Dimensions the activation peak depends on (per rank)."""

    hidden_size: int
    intermediate_size: int        # dense MLP (per rank after TP)
    moe_intermediate_size: int    # routed expert MLP (per rank), 0 for dense
    experts_per_token: int
    vocab_size: int
    act_bytes: int


@dataclass(frozen=True)
class ActivationBreakdown:
    forward_bytes: int
    sampler_bytes: int
    pp_buffer_bytes: int
    total_bytes: int
    formula: str = field(default="")


def activation_peak(dims: ActivationModel, tokens: int, rows: int, *, has_sampler: bool,
                    version: tuple[int, int, int], kept: int = 0, entry_bytes: int | None = None,
                    v2: bool = False, receive: tuple[int, str] = (0, "")) -> ActivationBreakdown:
    """Torch peak increase of vLLM's profile run (`gpu_model_runner.profile_run`).

    forward: N tokens through one layer: gate+up [N, 2I] + activation [N, I] + ~5 [N, H] tensors
             (residual, normed input, attention and MLP outputs) -> Llama-3.1-8B, N 8192, bf16: 1.03 GiB.
    sampler: the last-position hidden states of `rows` = min(N, max_num_seqs) requests go through the
             lm_head: logits [rows, V] in the model dtype, then float32 logits, probabilities and the
             exponential noise of random sampling (3 x 4 B) -> 1024 x 128,256 x 14 B = 1.71 GiB; the
             [N, H] hidden states (x3) stay alive. V0 and ~v0.12 to v0.16: ~24 B more per entry.
    receive: (bytes, how) of the buffers a non-first pipeline stage receives into, where the profile run makes
          them (V0 / V1: `vllm_runner.receive_buffer_term` "peak"); alive through the forward and the sampler.
          The first stage has none: the IntermediateTensors it sends on are its last layer's output and residual,
          the forward's own tensors. Llama-3.1-8B at N 8,192: + 2 x 8,192 x 4,096 x 2 B = 128 MiB on stages 1+.
    kept: a multimodal model's dummy encoder outputs, alive through the forward and the sampler
          (kvplan.planning.engines.vllm_mm).
    entry_bytes: the sampler's bytes per (row x vocabulary entry) where the model runner sets them (0.20+:
          `vllm_runner.sampler_entry_bytes`; V2 0.26-0.32 keeps only the model-dtype logits, 2 B).
    v2:   the V2 model runner's forward holds 3 [N, H] tensors, as V0's did, not V1's 5: its input buffers are
          allocated before the profile (v1/worker/gpu/input_batch.py InputBuffers, 0.33 :23; model_runner.py
          __init__).
          Qwen2.5-0.5B in fp16 at N 32,768 on vLLM 0.26 printed 1.06 GiB of peak activation: 32,768 x (3 x 4,864
          + 3 x 896) x 2 B = 1.054 GiB, where 5 x 896 gives 1.163.
    """
    b, H = dims.act_bytes, dims.hidden_size
    mlp = max(3 * dims.intermediate_size, 3 * dims.moe_intermediate_size * dims.experts_per_token)
    # V1 keeps two more [N, H] persistent input buffers than V0 (V0 on a 3090: 2.07 GiB at N 20,000 and 2.99 GiB at
    # N 29,000, i.e. 3I + 3H per token). Llama-3.1-8B at N 8,192 on v0.19 PP4 printed 1.10 GiB on PP0 and 1.05 on
    # PP1-2, which hold 0.125 GiB of receive buffers PP0 lacks: 5 x H gives 0.97 and 1.09 GiB (3 x H: 0.84, 0.97),
    # so no per-layer width fits both: PP0 peaks 0.18 GiB above the forward the same layers run on PP1-2 (1.05 -
    # 0.125 GiB; vllm_calibration.md, pipeline stages).
    width = 5 if version[:2] >= V1_ENGINE and not v2 else 3
    forward = tokens * (mlp + width * H) * b
    sampler = 0
    per_entry = b + 12 if entry_bytes is None else entry_bytes
    if has_sampler:
        if any(since <= version[:2] < until for since, until in ENGINE_CONSTANTS["sampler_extra_versions"]):
            per_entry += ENGINE_CONSTANTS["sampler_extra_bytes"]
        sampler = rows * dims.vocab_size * per_entry + 3 * tokens * H * b
    buffers = receive[0]
    total = max(forward, sampler) + buffers + kept
    formula = (f"max(forward {tokens:,} x ({mlp:,} + {width} x {H:,}) x {b} B, "
               f"sampler {rows:,} x {dims.vocab_size:,} x {per_entry} B + 3 x {tokens:,} x {H:,} x {b} B)"
               + (f" + PP receive buffers {receive[1]}" if buffers else "")
               + (f" + encoder cache {kept:,} B" if kept else ""))
    return ActivationBreakdown(forward, sampler, buffers, total, formula)


# NVSwitch + NVLink SHARP: NCCL allocates NVLS buffers. NCCL takes NVLS from the device's multicast support
# (src/transport/nvls.cc `ncclNvlsInit`, v2.28.9: CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED), and a multicast group
# binds only through NVSwitches and the Fabric Manager (`nvlsAllocateMem`'s bind error names them). The NVL cards
# (H100-NVL, H200-NVL) are PCIe boards joined by 2- or 4-way NVLink bridges, no NVSwitch: none. Measured: 2 x H200
# NVL at TP 2 on vLLM 0.23 (validation/vllm_holdout.csv) printed 32.08 GiB of KV pool; without NVLS kvplan plans
# 32.07 (tokens -0.03 %); NVLS's 1.75 + 2 x 0.0325 GiB in place of the 0.25 GiB assumption would make it 30.51.
NVLS_GPUS = ("H100-SXM", "H200", "B200", "GH200")


def non_torch_bytes(tp: int, pp: int, version: tuple[int, int, int], gpu_name: str = "H100-SXM",
                    nvls: bool | None = None) -> int:
    """CUDA context and library workspaces, plus NCCL buffers when tensor parallel. `nvls`: whether NCCL's
    NVLink-SHARP buffers exist (None: on the NVSwitch GPUs of NVLS_GPUS; False: NCCL_NVLS_ENABLE=0 or a system
    without NVSwitch, the 0.25 GiB assumption instead of ~1.8 GiB)."""
    if tp > 1:
        gib = _by_version(ENGINE_CONSTANTS["non_torch_base_gib"], version)
        if (gpu_name in NVLS_GPUS) if nvls is None else nvls:
            gib += ENGINE_CONSTANTS["nccl_base_gib"] + ENGINE_CONSTANTS["nccl_per_rank_gib"] * tp
        else:
            gib += ENGINE_CONSTANTS["nccl_no_nvls_gib"]
    elif pp > 1:
        gib = ENGINE_CONSTANTS["non_torch_pp_gib"]
    else:
        gib = _by_version(ENGINE_CONSTANTS["non_torch_base_gib"], version)
    return int(gib * GiB)


def pp_layer_split(num_layers: int, pp: int) -> list[range]:
    """vLLM's `get_pp_indices`: equal shares, the remainder going to the stages before the last."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    ranges, start = [], 0
    for size in sizes:
        ranges.append(range(start, start + size))
        start += size
    return ranges
