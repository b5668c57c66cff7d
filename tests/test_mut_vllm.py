"""Tests that kill the mutants tools/mutation.py found surviving in kvplan/planning/engines/vllm.py's notes,
refusals and command (#26): the version-era notes, the FP8 weight / KV refusals by compute capability, the KV and
Mamba notes, the PP receive-buffer notes and the `vllm serve` command's flags.

A note's or a refusal's text is its contract: each is pinned word for word (`==` on the whole text, or a regex
anchored with ^...$), beside the neighbouring case where it must not appear (one release before a cut-over, the
other GPU generation). Cut-overs are read from vLLM's own wheels (`pip download vllm==X.Y.Z --no-deps`):
- Fp8Config.get_min_capability (model_executor/layers/quantization/fp8.py): 80 in 0.11.0, 0.11.2, 0.12.0 and
  0.13.0; 75 in 0.14.0, 0.16.0, 0.18.0 and 0.19.0.
- FlashInfer's supports_compute_capability (v1/attention/backends/flashinfer.py): >= 7.5 in 0.23.0, >= 8.0 in
  0.24.0 ('currently broken on SM75 (Turing)'); FlashAttention >= 8.0 in both (flash_attn.py); Triton's
  'FP8 KV cache is not supported by the Triton attention backend ... requires SM89+' (triton_attn.py 0.24.0).
- VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (envs.py): absent in 0.16.0, default "0" in 0.18.0 and 0.19.0, "1" in
  0.20.0.
- utils/mem_utils.py memory_profiling: 0.26.0 sums non-torch increase + torch peak increase + weights; 0.27.0
  counts `before_create.free_memory - after_profile.free_memory` + the transient peak headroom.
- v1/worker/gpu_worker.py init_device: 0.33.0 runs a torch.mm and a biased linear on a 16 x 16 tensor "before the
  snapshot, so they count as baseline like the NCCL buffers"; 0.32.0 has no such lines.
"""
from __future__ import annotations

import re

import pytest

from kvplan import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm import _version_notes
from kvplan.planning.planner import plan

LLAMA_1B = "meta-llama/Llama-3.2-1B"     # LlamaForCausalLM: V1 runner through 0.22, V2 from 0.23
MAMBA = "state-spaces/mamba-2.8b-hf"     # attention-free: V1 runner 0.22-0.28 (vllm_runner.uses_v2), V2 from 0.29


def _exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


def _vllm(model=LLAMA_1B, version="0.33.0", gpu="H100-SXM", **kw):
    return plan(model, engine="vllm", engine_version=version, gpu=gpu, max_model_len=kw.pop("max_model_len", 4096),
                **kw)


# ----------------------------------------------------------------------------- _version_notes

ENV = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"
V0 = "V0 engine (profiles one max_model_len prompt)"
V1_NO_ESTIMATE = "V1 engine, no CUDA-graph estimate"
V1_ESTIMATE_OFF = f"V1 engine; CUDA-graph estimate computed, subtracted only with {ENV}=1"
V1_ESTIMATE_ON = "V1 engine; CUDA-graph estimate subtracted by default"
V1_RUNNER = "V1 model runner for this model; CUDA-graph estimate subtracted by default"
V2_RUNNER_EARLY = "V2 model runner for this model, which makes no CUDA-graph estimate before 0.29"
V2_RUNNER = "V2 model runner; CUDA-graph estimate subtracted by default"
V1_RUNNER_LATE = "V1 model runner for this model (a feature V2 lacks); CUDA-graph estimate subtracted by default"
FROM_027 = ("from 0.27 the budget counts every byte allocated after vLLM's start-up snapshot "
            "(utils/mem_utils.py memory_profiling)")
V2_SAMPLER = ", the V2 runner's sampler buffers included"
CUBLAS = ("vLLM 0.33 creates its cuBLAS handles before that snapshot (gpu_worker.py init_device), so their "
          "workspace leaves the budget; kvplan's non-torch figure (measured on 0.18-0.19) still holds it, "
          "so the pool may be up to that figure larger")


def _unverified(version: str) -> str:
    # 0.34's reading is said (unread.KNOWN_CHANGES); 0.33.1 and 0.35 have none
    known = ("; by its source, 0.34 sizes the KV pool after warm-up at a default utilization of 1.0 (about 9 % more "
             "KV than this plan for Llama-3.1-8B on an H100 when --gpu-memory-utilization is left out; the 0.92 in "
             "this plan's command keeps about this plan's pool) and its default block is 64 tokens, not 16"
             if version.startswith("0.34.") else "")
    return (f"not verified: vLLM {version} is newer than 0.33.0, the newest release kvplan read: its figures follow "
            f"0.33.0's rules, not checked against {version}{known}; plan --engine-version 0.33.0 for a release kvplan "
            "has read")


def _is_version_note(note: str) -> bool:
    return (re.match(r"^vLLM \d+\.\d+\.\d+: ", note) is not None or "0.27 the budget" in note or "cuBLAS" in note
            or "is newer than" in note)


@pytest.mark.parametrize("model, version, expected", [
    (LLAMA_1B, "0.7.3", [f"vLLM 0.7.3: {V0}"]),                       # V1 default from 0.8 (V1_ENGINE)
    (LLAMA_1B, "0.8.0", [f"vLLM 0.8.0: {V1_NO_ESTIMATE}"]),
    (LLAMA_1B, "0.17.1", [f"vLLM 0.17.1: {V1_NO_ESTIMATE}"]),
    (LLAMA_1B, "0.18.0", [f"vLLM 0.18.0: {V1_ESTIMATE_OFF}"]),         # envs.py 0.18.0: the switch, default "0"
    (LLAMA_1B, "0.19.1", [f"vLLM 0.19.1: {V1_ESTIMATE_OFF}"]),
    (LLAMA_1B, "0.20.0", [f"vLLM 0.20.0: {V1_ESTIMATE_ON}"]),
    (LLAMA_1B, "0.21.0", [f"vLLM 0.21.0: {V1_ESTIMATE_ON}"]),
    (LLAMA_1B, "0.22.0", [f"vLLM 0.22.0: {V1_RUNNER}"]),               # Llama: V1 runner through 0.22
    (LLAMA_1B, "0.26.0", [f"vLLM 0.26.0: {V2_RUNNER_EARLY}"]),
    (LLAMA_1B, "0.27.0", [f"vLLM 0.27.0: {V2_RUNNER_EARLY}", FROM_027 + V2_SAMPLER]),
    (LLAMA_1B, "0.28.0", [f"vLLM 0.28.0: {V2_RUNNER_EARLY}", FROM_027 + V2_SAMPLER]),
    (LLAMA_1B, "0.29.0", [f"vLLM 0.29.0: {V2_RUNNER}", FROM_027 + V2_SAMPLER]),
    (LLAMA_1B, "0.32.0", [f"vLLM 0.32.0: {V2_RUNNER}", FROM_027 + V2_SAMPLER]),
    (LLAMA_1B, "0.33.0", [f"vLLM 0.33.0: {V2_RUNNER}", FROM_027 + V2_SAMPLER, CUBLAS]),   # LATEST: not "newer"
    # past the newest release read the plan is unverified (unread.newer_release), its warning at the head and no
    # second "newer than" note after the era's (the note the warning replaced)
    (LLAMA_1B, "0.33.1", [_unverified("0.33.1"), f"vLLM 0.33.1: {V2_RUNNER}", FROM_027 + V2_SAMPLER, CUBLAS]),
    (LLAMA_1B, "0.34.0", [_unverified("0.34.0"), f"vLLM 0.34.0: {V2_RUNNER}", FROM_027 + V2_SAMPLER, CUBLAS]),
    (LLAMA_1B, "0.35.0", [_unverified("0.35.0"), f"vLLM 0.35.0: {V2_RUNNER}", FROM_027 + V2_SAMPLER, CUBLAS]),
    (MAMBA, "0.26.0", [f"vLLM 0.26.0: {V1_RUNNER}"]),
    (MAMBA, "0.27.0", [f"vLLM 0.27.0: {V1_RUNNER}", FROM_027]),        # V1: no sampler-buffer clause
    (MAMBA, "0.28.0", [f"vLLM 0.28.0: {V1_RUNNER}", FROM_027]),
    (MAMBA, "0.29.0", [f"vLLM 0.29.0: {V2_RUNNER}", FROM_027 + V2_SAMPLER]),
])
def test_the_version_notes_name_the_era_and_the_runner(model, version, expected):
    notes = _vllm(model, version).notes
    assert notes[:len(expected)] == expected
    assert not any(_is_version_note(n) for n in notes[len(expected):])


def test_the_version_notes_of_a_v1_runner_after_029():
    """Past 0.29 every plan runs V2 (vllm_runner.uses_v2: V2_FOR_ALL, but EAGLE3 with PP at 0.29, which plan_vllm
    refuses: no speculative decoding with PP), so this text is reached by the function alone; v2 defaults to
    False."""
    assert _version_notes((0, 29, 0)) == [f"vLLM 0.29.0: {V1_RUNNER_LATE}", FROM_027]
    assert _version_notes((0, 30, 0), False) == [f"vLLM 0.30.0: {V1_RUNNER_LATE}", FROM_027]
    assert _version_notes((0, 27, 0)) == [f"vLLM 0.27.0: {V1_RUNNER}", FROM_027]
    assert _version_notes((0, 27, 0), True) == [f"vLLM 0.27.0: {V2_RUNNER_EARLY}", FROM_027 + V2_SAMPLER]


# ----------------------------------------------------------------------------- check_fp8_card

def _fp8_refusal(version: str, need: str, gpu: str, cc: str, hint: bool, online: bool) -> str:
    """The refusal, with the release hint where the card runs fp8 on a later vLLM (T4 at 7.5)."""
    return (re.escape(f"vLLM {version} runs FP8 weights on compute capability {need} and newer, and the {gpu} has "
                      f"{cc}: pick a newer card")
            # the release that first takes 7.5: 0.14.0 (Fp8Config.get_min_capability returns 75; 80 in 0.13.0)
            + (re.escape(", or vLLM 0.14+ (7.5)") if hint else "")
            + (re.escape(", or leave --quantization fp8 out") if online else ""))


@pytest.mark.parametrize("gpu, version, need, cc, hint", [
    ("T4", "0.11.0", "8.0", "7.5", True),          # Fp8Config 0.11.0: 80
    ("T4", "0.13.0", "8.0", "7.5", True),          # 0.13.0: 80
    ("V100-SXM2-16GB", "0.13.0", "8.0", "7.0", False),   # 7.0 runs it on no release: no release hint
    ("V100-SXM2-16GB", "0.19.0", "7.5", "7.0", False),   # 0.19.0: 75
    ("V100-SXM2-16GB", "0.33.0", "7.5", "7.0", False),
])
def test_online_fp8_weights_below_the_minimum_capability_are_refused(gpu, version, need, cc, hint):
    short = ".".join(version.split(".")[:2])
    with pytest.raises(WorkloadError) as e:
        _vllm(version=version, gpu=gpu, quantization="fp8")
    assert re.fullmatch(_fp8_refusal(short, need, gpu, cc, hint, online=True), str(e.value)), str(e.value)


def test_a_checkpoints_fp8_weights_are_refused_without_the_online_fix():
    """DeepSeek-V3's checkpoint is fp8 (quantization_config): no --quantization to leave out."""
    with pytest.raises(WorkloadError) as e:
        _vllm("deepseek-ai/DeepSeek-V3", "0.19.0", gpu="V100-SXM2-32GB", tp=8)
    assert re.fullmatch(_fp8_refusal("0.19", "7.5", "V100-SXM2-32GB", "7.0", False, online=False), str(e.value))
    with pytest.raises(WorkloadError) as e:
        _vllm("deepseek-ai/DeepSeek-V3", "0.13.0", gpu="T4", tp=8)
    assert re.fullmatch(_fp8_refusal("0.13", "8.0", "T4", "7.5", True, online=False), str(e.value))


@pytest.mark.parametrize("gpu, version", [
    ("T4", "0.14.0"), ("T4", "0.19.0"), ("T4", "0.33.0"),   # 75 from 0.14.0
    ("A100-SXM-80GB", "0.11.0"), ("A100-SXM-80GB", "0.13.0"),   # 8.0 >= 80: runs at every release
    ("H100-SXM", "0.13.0"), ("MI300X", "0.13.0"),        # no compute capability (AMD): not checked
])
def test_fp8_weights_at_or_above_the_minimum_capability_run(gpu, version):
    p = _vllm(version=version, gpu=gpu, quantization="fp8")
    assert p.weights_bytes > 0 and "--quantization fp8" in p.vllm_command


def test_other_quantizations_are_not_checked_against_the_fp8_floor():
    """gpt-oss-20b's MXFP4 checkpoint on a V100 (7.0, below fp8's 7.5): no FP8 refusal, whatever else it says."""
    try:
        _vllm("openai/gpt-oss-20b", "0.19.0", gpu="V100-SXM2-32GB")
    except WorkloadError as e:
        assert "FP8 weights" not in str(e)


# ----------------------------------------------------------------------------- check_fp8_kv_card

def _kv_refusal(version: str, gpu: str, cc: str) -> str:
    return (f"vLLM {version} has no attention backend with an fp8 KV cache on the {gpu} (compute capability {cc}; "
            "Triton's needs 8.9, FlashAttention and FlashInfer 8.0): use --kv-cache-dtype auto (float16)")


@pytest.mark.parametrize("gpu, version, cc, kv", [
    ("T4", "0.24.0", "7.5", "fp8"),                # FlashInfer's floor raised to 8.0 in 0.24.0
    ("T4", "0.33.0", "7.5", "fp8_e5m2"),
    ("V100-SXM2-16GB", "0.24.0", "7.0", "fp8"),
])
def test_an_fp8_kv_cache_below_sm80_is_refused_word_for_word(gpu, version, cc, kv):
    with pytest.raises(WorkloadError, match=_exact(_kv_refusal(".".join(version.split(".")[:2]), gpu, cc))):
        _vllm(version=version, gpu=gpu, kv_dtype=kv)


@pytest.mark.parametrize("gpu, version", [
    ("T4", "0.23.0"),                              # FlashInfer 0.23.0: >= 7.5
    ("A100-SXM-80GB", "0.24.0"), ("MI300X", "0.33.0"),
])
def test_an_fp8_kv_cache_runs_before_024_or_from_sm80(gpu, version):
    assert _vllm(version=version, gpu=gpu, kv_dtype="fp8").kv_cache_dtype == "float8_e4m3"


# ----------------------------------------------------------------------------- _vllm_notes

def _kv_notes(p) -> list[str]:
    """The KV-layout notes _vllm_notes writes (TP replication, MLA, hybrid groups, unequal pages, Mamba state)."""
    return [n for n in p.notes if " KV heads < TP " in n
            or n.startswith(("MLA latent", "hybrid KV groups", "unequal attention pages", "Mamba/linear state"))]


REPLICATED = "{} KV heads < TP {}: vLLM replicates them, 1 head per rank"
MLA = "MLA latent is replicated on every TP rank: per-GPU KV does not shrink with TP"
HYBRID = ("hybrid KV groups ({}): 'GPU KV cache size' is max concurrency x max_model_len, concurrency counts sliding "
          "layers' capped blocks")


@pytest.mark.parametrize("model, tp, expected", [
    # Falcon-40B's new_decoder_architecture: vLLM caches its 8 KV heads (engine_kv_heads), not the 128 heads
    # transformers caches: 8 < TP 16 replicates, 8 = TP 8 does not
    ("tiiuae/falcon-40b-instruct", 16, [REPLICATED.format(8, 16)]),
    ("tiiuae/falcon-40b-instruct", 8, []),
    (LLAMA_1B, 8, []),                                   # 8 KV heads over 8 ranks: one each
    (LLAMA_1B, 16, [REPLICATED.format(8, 16)]),
    (LLAMA_1B, 2, []),                                   # not MLA: no latent note at TP 2
    ("deepseek-ai/DeepSeek-V2-Lite", 1, []),             # MLA at TP 1: nothing replicated
    ("deepseek-ai/DeepSeek-V2-Lite", 2, [MLA]),
])
def test_the_tp_notes_of_kv_heads_and_the_mla_latent(model, tp, expected):
    assert _kv_notes(_vllm(model, gpu="H200", tp=tp)) == expected


def test_the_hybrid_group_notes():
    """gemma-3-1b-it: 26 layers (4 full, 22 sliding) in groups of 4, 2 padding layers, equal pages (1 KV head x 256
    everywhere); gemma-4-E4B-it: 24 KV layers in 6 groups of 4, no padding, full pages of 512-wide heads twice the
    sliding layers' 256: a sliding block holds 2 x 16 = 32 tokens (vllm_kv.unify_page_sizes)."""
    assert _kv_notes(_vllm("google/gemma-3-1b-it")) == [HYBRID.format("7 groups of 4 layers, 2 padding layers")]
    assert _kv_notes(_vllm("google/gemma-4-E4B-it")) == [
        HYBRID.format("6 groups of 4 layers"),
        "unequal attention pages made equal (unify_kv_cache_spec_page_size): sliding layers' blocks hold 32 tokens, "
        "the others 16"]


def test_the_hybrid_group_note_before_0201_counts_tokens_per_group():
    """Through 0.20.0 vLLM's 'GPU KV cache size' is blocks per group x block size (vllm_kv.pool_capacity)."""
    assert _kv_notes(_vllm("google/gemma-3-1b-it", "0.19.0")) == [
        "hybrid KV groups (7 groups of 4 layers, 2 padding layers): 'GPU KV cache size' is per group, concurrency "
        "counts sliding layers' capped blocks"]


def test_two_kinds_of_longer_blocks_are_listed_with_commas():
    """No bundled model has two attention kinds below the largest page: three made-up specs, full 4,096 B/token,
    sliding 2,048 and chunked 1,024, give the sliding layers 2 x 16 = 32-token blocks and the chunked 4 x 16 = 64."""
    from kvplan.planning.engines.vllm import _vllm_notes
    from kvplan.planning.engines.vllm_kv import VllmLayerSpec, kv_groups
    from kvplan.planning.engines.vllm_profile import VllmSettings

    specs = [VllmLayerSpec(kind, b, window=w) for kind, b, w in
             [("full", 4096, 0), ("sliding", 2048, 512), ("chunked", 1024, 256)]]   # B/token: 4,096 = 2 x 2,048
    groups = kv_groups(specs, 16)
    settings = VllmSettings(max_model_len=4096, max_num_batched_tokens=8192, max_num_seqs=256,  # 4,096 / 8,192 tokens
                            enforce_eager=True)   # eager: no cold-compile note
    notes = _vllm_notes(load_model(LLAMA_1B), settings, None, groups, specs, (0, 33, 0))
    assert notes == [HYBRID.format("3 groups of 1 layers"),
                     "unequal attention pages made equal (unify_kv_cache_spec_page_size): chunked layers' blocks hold "
                     "64 tokens, sliding layers' blocks hold 32 tokens, the others 16"]


def _mamba_note(held: str, mode: str, caching: str, default: bool) -> str:
    return (f"Mamba/linear state: {held}, in each layer (mamba_cache_mode {mode}, prefix caching {caching}"
            + (", vLLM's default" if default else "") + "); vLLM's token figure is not a token capacity")


def _draft(model: str, k: int) -> dict:
    return {"method": "draft_model", "num_speculative_tokens": k, "model": model}


@pytest.mark.parametrize("model, version, kw, expected", [
    # mamba-2.8b at 0.26 with prefix caching asked for: 'all' (MAMBA_PREFIX_CACHING, before 0.29), a state per
    # 16-token block, and k = 2 drafted tokens' pages beside them (vllm_extras.mamba_states)
    (MAMBA, "0.26.0", dict(enable_prefix_caching=True),
     _mamba_note("one state per 16-token block of a request", "'all'", "on", False)),
    (MAMBA, "0.26.0", dict(enable_prefix_caching=True, speculative=_draft(MAMBA, 2)),
     _mamba_note("one state per 16-token block of a request + 2", "'all'", "on", False)),
    (MAMBA, "0.26.0", dict(enable_prefix_caching=False, speculative=_draft(MAMBA, 2)),
     _mamba_note("3 state page(s) per request", "'none'", "off", False)),          # 'none': 1 + k = 3
    (MAMBA, "0.26.0", dict(), _mamba_note("1 state page(s) per request", "'none'", "off", True)),  # attention-free
    (MAMBA, "0.29.0", dict(enable_prefix_caching=True),
     _mamba_note("2 state page(s) per request", "'align'", "on", False)),          # 'align': 2 + 0
    # Nemotron-H (hybrid): prefix caching on by default from 0.26; 'align' for every model from 0.29
    ("nvidia/Nemotron-H-56B-Base-8K", "0.29.0", dict(),
     _mamba_note("2 state page(s) per request", "'align'", "on", True)),
    ("nvidia/Nemotron-H-56B-Base-8K", "0.25.0", dict(),
     _mamba_note("1 state page(s) per request", "'none'", "off", True)),
    # Qwen3-Next (gated DeltaNet, not a MAMBA_PREFIX_CACHING family) at 0.19, the first release kvplan reads
    # mamba_cache_mode for: 'align', 2 pages
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "0.19.0", dict(enable_prefix_caching=True, tp=4),
     _mamba_note("2 state page(s) per request", "'align'", "on", False)),
])
def test_the_mamba_state_note(model, version, kw, expected):
    notes = [n for n in _kv_notes(_vllm(model, version, gpu="H200", **kw)) if n.startswith("Mamba")]
    assert notes == [expected]


# ----------------------------------------------------------------------------- _receive_notes

QWEN_32B = "Qwen/Qwen3-32B"   # Qwen3ForCausalLM: V2 from 0.22; hidden 5,120


def _uncounted(later: str, verb: str, version: str) -> str:
    # 2 x 8,192 x 5,120 x 2 B = 167,772,160 B = 160.00 MiB (8,192: the H100's max_num_batched_tokens)
    return (f"{later} {verb} 160.00 MiB of receive buffers (hidden_states + residual 2 x [8,192, 5,120] x 2 B) that "
            f"vLLM {version}'s V2 runner makes after measuring the weights and before the profile, so its budget "
            "does not count them: they come out of the (1 - utilization) headroom")


def _receive(p) -> list[str]:
    return [n for n in p.notes if "receive buffers" in n]


@pytest.mark.parametrize("model, version, pp, expected", [
    (QWEN_32B, "0.24.0", 2, [_uncounted("stage 1", "holds", "0.24")]),
    (QWEN_32B, "0.24.0", 3, [_uncounted("stages 1-2", "hold", "0.24")]),
    (QWEN_32B, "0.22.0", 4, [_uncounted("stages 1-3", "hold", "0.22")]),
    (QWEN_32B, "0.24.0", 1, []),        # one stage: nothing received
    (QWEN_32B, "0.27.0", 2, []),        # persistent from 0.27: counted, no note
    (QWEN_32B, "0.21.0", 2, []),        # V1 runner: in the profile's peak
    ("microsoft/Phi-3-small-8k-instruct", "0.33.0", 2, [
        "receive buffers of Phi3SmallForCausalLM not read from vLLM: planned as hidden_states + residual, "
        "[max_num_batched_tokens, hidden_size] each"]),
    ("microsoft/Phi-3-small-8k-instruct", "0.33.0", 1, []),
])
def test_the_receive_buffer_notes(model, version, pp, expected):
    assert _receive(_vllm(model, version, pp=pp)) == expected


# ----------------------------------------------------------------------------- the command: vllm_command, _env_prefix,
# _given_flags (every setting the command shows given explicitly: TP, length, sequences, utilization)

def _command(version="0.33.0", **kw) -> str:
    return _vllm(version=version, max_num_seqs=256, gpu_memory_utilization=0.9, **kw).vllm_command


SERVE = "vllm serve meta-llama/Llama-3.2-1B --tensor-parallel-size {} --max-model-len 4096 --max-num-seqs 256 " \
        "--gpu-memory-utilization 0.9"


@pytest.mark.parametrize("kw, expected", [
    (dict(kv_dtype="fp8"), SERVE.format(1) + " --kv-cache-dtype fp8"),             # float8_e4m3
    (dict(kv_dtype="fp8_e5m2"), SERVE.format(1) + " --kv-cache-dtype fp8_e5m2"),
    (dict(enable_prefix_caching=True), SERVE.format(1) + " --enable-prefix-caching"),
    (dict(enable_prefix_caching=False), SERVE.format(1) + " --no-enable-prefix-caching"),
    (dict(tp=1, nvls=False), SERVE.format(1)),                                      # one rank: no NCCL to set
    (dict(tp=2, nvls=False), "NCCL_NVLS_ENABLE=0 " + SERVE.format(2)),
    (dict(max_num_batched_tokens=2048, block_size=32),
     SERVE.format(1) + " --max-num-batched-tokens 2048 --block-size 32"),
    (dict(block_size=32), SERVE.format(1) + " --block-size 32"),
])
def test_the_command_flags(kw, expected):
    assert _command(**kw) == expected


@pytest.mark.parametrize("version, kw, env", [
    ("0.18.0", dict(cudagraph_estimate=True), f"{ENV}=1 "),       # 0.18-0.19: computed, subtracted with =1
    ("0.17.1", dict(cudagraph_estimate=True), ""),                 # no estimate before 0.18 (envs.py 0.16.0: absent)
    ("0.19.0", dict(cudagraph_estimate=True, enforce_eager=True), ""),   # eager: no graphs to estimate
    ("0.19.0", dict(cudagraph_estimate=False), ""),                # the default before 0.20
    ("0.20.0", dict(cudagraph_estimate=False), f"{ENV}=0 "),
])
def test_the_estimate_switch_is_set_only_against_the_versions_default(version, kw, env):
    eager = " --enforce-eager" if kw.get("enforce_eager") else ""
    assert _command(version, **kw) == env + SERVE.format(1) + eager
