"""Truth: transformers' QuantizedCache (quanto, HQQ, fp8) against kvplan, byte for byte, on tiny CPU models.

Each case prefills P tokens and decodes one token at a time past two residual flushes (R small), measuring
the cache after the prefill and after every step. The contract is two-sided: where transformers' backend
refuses a shape (group size not dividing the values it quantizes), kvplan must raise a WorkloadError at
the same token; everywhere else its bytes must equal the measured storage exactly.
"""

from __future__ import annotations

import pytest

from truth import (DTYPES, Tally, compare, cpu_model, decode, hf_config, measure, prefill,  # noqa: F401
                   single_thread, torch)

import kvplan
from kvplan.errors import WorkloadError

transformers = pytest.importorskip("transformers")
from transformers import QuantizedCache  # noqa: E402

pytest.importorskip("optimum.quanto", reason="optimum-quanto is needed for the quanto backend")

TALLY = Tally("quantized")

KV_DTYPE = {("quanto", 2): "int2", ("quanto", 4): "int4", ("hqq", 2): "int2", ("hqq", 4): "int4",
            ("hqq", 8): "int8", ("fp8", None): "fp8"}


def llama(kv: int, head_dim: int, layers: int = 2) -> dict:
    return {"model_type": "llama", "hidden_size": 2 * kv * head_dim, "intermediate_size": 32,
            "num_attention_heads": 2 * kv, "num_key_value_heads": kv, "head_dim": head_dim,
            "num_hidden_layers": layers, "vocab_size": 96, "max_position_embeddings": 256}


def mla() -> dict:
    """DeepSeek-V3 style: keys hold the 32-wide latent, values the 8-wide RoPE part (different K/V sizes)."""
    return {"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 32, "moe_intermediate_size": 16,
            "num_hidden_layers": 2, "first_k_dense_replace": 2, "num_attention_heads": 4,
            "num_key_value_heads": 4, "kv_lora_rank": 32, "q_lora_rank": None, "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 16, "v_head_dim": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
            "n_group": 1, "topk_group": 1, "vocab_size": 96, "max_position_embeddings": 256}


# (label, config, batch, prompt, group, residual): every group-wise backend runs each of these.
SHAPES = [
    ("llama kv2 hd16 B1 P40 G32 R8", llama(2, 16), 1, 40, 32, 8),      # the reference's exp10 shape
    ("llama kv2 hd16 B2 P21 G32 R8", llama(2, 16), 2, 21, 32, 8),      # odd number of groups: quanto pads
    ("llama kv3 hd12 B3 P13 G12 R5", llama(3, 12), 3, 13, 12, 5),      # 39 groups per sequence
    ("llama kv1 hd16 B2 P4 G32 R3", llama(1, 16), 2, 4, 32, 3),        # quanto: flush at 7 tokens fails
    ("llama kv2 hd16 B1 P5 G64 R4", llama(2, 16), 1, 5, 64, 4),        # prompt not divisible: both refuse
    ("mla R32+rope8 B2 P12 G16 R6", mla(), 2, 12, 16, 6),              # K 32 / V 8 elements per token
]
BACKENDS = [("quanto", 2), ("quanto", 4), ("hqq", 2), ("hqq", 4), ("hqq", 8)]
ACT = ["bf16", "fp32"]


def _backend_available(backend: str) -> None:
    if backend == "hqq":
        pytest.importorskip("hqq", reason="HQQ is not installed (pip install hqq)")


def _estimate(data, *, T, P, B, act, backend, nbits, G, R):
    kwargs = {} if backend == "fp8" else {"q_group_size": G, "residual_length": R}
    return kvplan.estimate(kvplan.parse_config(data), seq_len=T, batch_size=B, cache="quantized",
                           kv_dtype=KV_DTYPE[(backend, nbits)], quant_backend=backend, prompt_len=P,
                           dtype=act, **kwargs)


def _run(label, data, B, P, G, R, backend, nbits, act, steps):
    """Prefill then `steps` decode steps; every point is one (model, workload) pair. Returns points run."""
    cfg = hf_config(data)
    model = cpu_model(cfg, DTYPES[act])
    kwargs = {} if backend == "fp8" else {"nbits": nbits, "q_group_size": G, "residual_length": R}
    cache = QuantizedCache(backend=backend, config=cfg, **kwargs)
    what = f"{label} {backend}{nbits or ''} {act}"
    token = None
    for step in range(steps + 1):
        T = P + step
        try:
            if step == 0:
                cache, token = prefill(model, B, P, cache=cache)
            else:
                token = decode(model, cache, token, 1)
            hf_error = None
        except (ValueError, AssertionError, RuntimeError) as exc:  # the backend refused the shape
            hf_error = exc
        try:
            est = _estimate(data, T=T, P=P, B=B, act=act, backend=backend, nbits=nbits, G=G, R=R)
            kv_error = None
        except WorkloadError as exc:
            kv_error = exc
        if hf_error or kv_error:
            TALLY.checked += 1
            if bool(hf_error) != bool(kv_error):
                TALLY.mismatches.append(f"{what} T={T}: transformers {'raised ' + repr(hf_error) if hf_error else 'ran'}"
                                        f", kvplan {'raised ' + repr(kv_error) if kv_error else 'estimated'}")
            return step
        compare(TALLY, f"{what} B={B} P={P} T={T}", measure(cache), est, after_prefill=step == 0)
    return steps


@pytest.mark.parametrize("backend,nbits", BACKENDS, ids=[f"{b}{n}" for b, n in BACKENDS])
@pytest.mark.parametrize("act", ACT)
def test_groupwise_backends(backend, nbits, act):
    _backend_available(backend)
    before = TALLY.checked, len(TALLY.mismatches)
    for label, data, B, P, G, R in SHAPES:
        # quanto crosses two flushes; HQQ (an optimizer per quantization, slow on CPU) one, then one step more
        _run(label, data, B, P, G, R, backend, nbits, act, steps=2 * R + 1 if backend == "quanto" else R + 1)
    new = TALLY.mismatches[before[1]:]
    assert not new, "\n".join(new)
    assert TALLY.checked - before[0] >= 30


@pytest.mark.parametrize("act", ["bf16", "fp16", "fp32"])
def test_fp8_backend(act):
    before = TALLY.checked, len(TALLY.mismatches)
    for label, data, B, P, _G, _R in SHAPES:
        _run(label, data, B, P, None, None, "fp8", None, act, steps=9)
    new = TALLY.mismatches[before[1]:]
    assert not new, "\n".join(new)


def test_quanto_pads_odd_group_counts():
    """quanto packs the n/G group rows, so an odd count at int4 costs half a group more than n/2 bytes."""
    data = llama(2, 16)
    cfg = hf_config(data)
    model = cpu_model(cfg, torch.bfloat16)
    cache = QuantizedCache(backend="quanto", config=cfg, nbits=4, q_group_size=32, residual_length=8)
    cache, _ = prefill(model, 1, 21, cache=cache)
    qkeys = cache.layers[0]._quantized_keys
    n = 21 * 32                                           # 21 groups of 32
    assert tuple(qkeys._data._data.shape) == (11, 32)     # ceil(21 / 2) packed rows, not n / 2 = 336 B
    assert tuple(qkeys._scale.shape) == (21, 1) and qkeys._scale.dtype == torch.bfloat16
    est = _estimate(data, T=21, P=21, B=1, act="bf16", backend="quanto", nbits=4, G=32, R=8)
    per_tensor = 11 * 32 + 2 * 21 * 2
    assert est.kv_cache_bytes == 2 * 2 * per_tensor == measure(cache).storage
    assert n // 2 < 11 * 32


@pytest.mark.parametrize("nbits,group", [(2, 6), (2, 10), (4, 5)])
def test_hqq_group_not_a_multiple_of_values_per_byte(nbits, group):
    """HQQ packs along the group: a group that does not fill whole bytes breaks at quantize or at the next
    dequantize. kvplan refuses it up front."""
    pytest.importorskip("hqq", reason="HQQ is not installed (pip install hqq)")
    data = llama(3, 10)                                   # 30 values per token: divisible by 5, 6 and 10
    cfg = hf_config(data)
    model = cpu_model(cfg, torch.bfloat16)
    cache = QuantizedCache(backend="hqq", config=cfg, nbits=nbits, q_group_size=group, residual_length=4)
    with pytest.raises((RuntimeError, AssertionError, ValueError)):
        cache, token = prefill(model, 1, 8, cache=cache)
        decode(model, cache, token, 1)
    with pytest.raises(WorkloadError, match="multiple of"):
        _estimate(data, T=8, P=8, B=1, act="bf16", backend="hqq", nbits=nbits, G=group, R=4)


def test_generate_quantized_end_to_end():
    """generate(cache_implementation="quantized") holds P + N - 1 tokens: kvplan's seq_len."""
    data = llama(2, 16)
    cfg = hf_config(data)
    model = cpu_model(cfg, torch.bfloat16)
    P, N = 10, 12
    ids = torch.randint(3, 96, (2, P), generator=torch.Generator().manual_seed(1))
    out = model.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False, return_dict_in_generate=True,
                         cache_implementation="quantized",
                         cache_config={"backend": "quanto", "nbits": 4, "q_group_size": 32, "residual_length": 8})
    assert out.cache.get_seq_length() == P + N - 1
    est = _estimate(data, T=P + N - 1, P=P, B=2, act="bf16", backend="quanto", nbits=4, G=32, R=8)
    compare(TALLY, "generate quanto4", measure(out.cache), est, after_prefill=False)
    assert not TALLY.mismatches, "\n".join(TALLY.mismatches)


def test_zz_summary():
    """Runs last in this module: the summary line (pytest -s shows it) and a floor on the pairs checked."""
    print("\n" + TALLY.summary())
    assert not TALLY.mismatches, "\n".join(TALLY.mismatches)
    if TALLY.checked < 500:
        pytest.skip(f"only part of the module ran ({TALLY.summary()})")
