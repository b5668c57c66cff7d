"""Properties over mutated configs and random workloads (hypothesis).

1. Robustness: a bundled config with keys deleted or replaced by any JSON value (null, negative or huge ints,
   NaN/inf, strings, lists, nested objects), or with a random model_type, either parses or raises a
   `KVPlanError`; the same for `estimate` on any workload, including invalid ones. Never another exception.
2. Consistency: every Estimate has non-negative int totals equal to the sum of its group rows + bookkeeping.
3. Monotonicity: kv_cache_bytes never decreases with seq_len or batch_size, for each cache the model accepts.
   Static caches are sized by max_cache_len, so they are checked at a fixed max_cache_len and in it.
   The quantized (quanto/HQQ) cache is NOT monotonic in seq_len: decode tokens wait in a full-precision
   residual that is quantized when it reaches R tokens, so T = P + R stores less than T = P + R - 1. It is
   checked at residual boundaries (T - P a multiple of R), against an upper bound, and for the dip itself.
4. GQA <= MHA: giving every query head its own KV head never lowers the bytes.
5. Windows: adding a sliding_window to a full-attention config never raises the token storage. It adds one
   int64 0-d tensor (8 B) per windowed layer, as transformers does, so the total may rise by exactly that.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import kvplan
from kvplan.cache.hf import CACHE_CHOICES
from kvplan.config.reader import HEAD_DIM_KEYS, HEAD_KEYS, HIDDEN_KEYS, KV_HEAD_KEYS, LAYER_KEYS, TEXT_CONFIG_KEYS
from kvplan.sources.files import read_config_file
from kvplan.sources.library import bundled_index

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CONFIGS = {path.stem.replace("__", "/", 1): read_config_file(path) for path in bundled_index().values()}
MODEL_IDS = sorted(CONFIGS)
SPECS = {model_id: kvplan.load_model(model_id) for model_id in MODEL_IDS}

# keys worth hitting: the ones the parser reads (recorded in ModelSpec.fields) and its aliases, then any key
READ_KEYS = sorted(
    {key for spec in SPECS.values() for key in spec.fields}
    | set(LAYER_KEYS + HEAD_KEYS + KV_HEAD_KEYS + HIDDEN_KEYS + HEAD_DIM_KEYS)
    | {"kv_lora_rank", "qk_rope_head_dim", "sliding_window", "use_sliding_window", "layer_types",
       "sliding_window_pattern", "attention_chunk_size", "no_rope_layers", "no_rope_layer_interval",
       "num_kv_shared_layers", "max_window_layers", "text_config", "dtype", "torch_dtype", "model_type",
       "multi_query", "new_decoder_architecture", "multi_query_attention", "is_encoder_decoder",
       "use_bidirectional_attention", "full_attention_interval", "attn_layer_period", "attn_layer_offset",
       "expand", "state_size", "conv_kernel", "n_groups", "mamba_expand", "mamba_d_conv", "mamba_d_state",
       "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
       "linear_conv_kernel_dim"}
)
ALL_KEYS = sorted({key for data in CONFIGS.values() for key in data} | set(READ_KEYS))
KNOWN_TYPES = sorted({d.get("model_type") for d in CONFIGS.values() if isinstance(d.get("model_type"), str)}
                     | {"mamba", "mamba2", "falcon_mamba", "jamba", "qwen3_next", "llama4_text", "gemma3_text"})

# hostile inputs, not expected figures
SPECIAL_VALUES = st.sampled_from([None, 0, -1, 1, 2, 3, 7, 64, 4096, 2**31, 2**63, 2**70, 10**30, -(10**30), 1.5,
                                  0.0, 4096.0, float("nan"), float("inf"), float("-inf"), "12", "", [], {}, True])
SPECIAL_INTS = st.sampled_from([0, -1, 1, 2, 3, 7, 64, 4096, 2**31, 2**63, 2**70, 10**30, -(10**30)])
SCALARS = st.one_of(
    SPECIAL_VALUES, st.none(), st.booleans(), st.integers(),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["full_attention", "sliding_attention", "chunked_attention", "mamba", "bfloat16", "int4",
                     "llama"]),
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


def text_of(data: dict) -> dict:
    """The dict that holds the language model's fields (the nested one for multimodal wrappers)."""
    for key in TEXT_CONFIG_KEYS:
        if isinstance(data.get(key), dict) and data[key]:
            return data[key]
    return data


@st.composite
def mutated_configs(draw):
    data = copy.deepcopy(CONFIGS[draw(st.sampled_from(MODEL_IDS))])
    for _ in range(draw(st.integers(1, 5))):
        target = text_of(data) if draw(st.booleans()) else data
        key = draw(st.sampled_from(READ_KEYS) | st.sampled_from(sorted(target) or ALL_KEYS))
        action = draw(st.sampled_from(["delete", "replace", "replace", "model_type"]))
        if action == "delete":
            target.pop(key, None)
        elif action == "replace":
            target[key] = draw(SPECIAL_VALUES | JSON_VALUES)
        else:
            target["model_type"] = draw(st.sampled_from(KNOWN_TYPES) | st.text(max_size=12) | JSON_VALUES)
    return data


# workloads: valid values most of the time, anything at all some of the time
# hostile inputs: lengths to 20,000 and past 2^41
LENGTHS = st.one_of(st.integers(1, 20_000), st.integers(-5, 2**41), SPECIAL_INTS, JSON_VALUES)
DTYPES = st.one_of(st.none(), st.sampled_from(["fp32", "fp16", "bf16", "fp8", "fp8_e5m2", "int8", "int4", "int2",
                                               "torch.float16"]), st.text(max_size=6))
CACHES = st.one_of(st.sampled_from(CACHE_CHOICES), st.text(max_size=8))
BACKENDS = st.one_of(st.none(), st.sampled_from(["quanto", "hqq", "fp8"]), st.text(max_size=5))


def check_estimate(e: kvplan.Estimate, spec: kvplan.ModelSpec) -> None:
    totals = (e.kv_cache_bytes, e.logical_bytes, e.prefill_peak_bytes, e.bookkeeping_bytes, e.device_bytes,
              e.host_bytes, e.bytes_per_token)
    assert all(type(x) is int and x >= 0 for x in totals), totals
    assert e.kv_cache_bytes == sum(g.bytes for g in e.groups) + e.bookkeeping_bytes
    assert e.logical_bytes == sum(g.logical_bytes for g in e.groups) + e.bookkeeping_bytes
    assert e.logical_bytes <= e.kv_cache_bytes
    assert e.device_bytes + e.host_bytes == e.kv_cache_bytes
    assert sum(g.layers for g in e.groups) == sum(len(layer) for layer in spec.layers)
    assert all(type(g.bytes) is int and g.bytes >= 0 for g in e.groups)
    assert e.formula.endswith(")") and f"= {e.kv_cache_bytes:,} B" in e.formula
    e.model_dump_json()  # what `--json` prints must serialize


def try_estimate(spec, *args, **kwargs):
    try:
        return kvplan.estimate(spec, *args, **kwargs)
    except kvplan.KVPlanError:
        return None


# ---------------------------------------------------------------- 1 + 2: robustness and consistency


def test_every_bundled_config_parses_and_estimates():
    for model_id, spec in SPECS.items():
        check_estimate(kvplan.estimate(spec, 1000, 2), spec)


@SETTINGS
@given(data=mutated_configs(), seq_len=st.integers(1, 100_000), batch=st.integers(1, 64),
       cache=st.sampled_from(CACHE_CHOICES))
def test_mutated_configs_raise_only_kvplan_errors(data, seq_len, batch, cache):
    try:
        spec = kvplan.parse_config(data, name="mutated")
    except kvplan.KVPlanError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    e = try_estimate(spec, seq_len, batch, cache=cache)
    if e is not None:
        check_estimate(e, spec)


@SETTINGS
@given(model_id=st.sampled_from(MODEL_IDS), seq_len=LENGTHS, batch=LENGTHS, kv_dtype=DTYPES, dtype=DTYPES,
       cache=CACHES, max_cache_len=st.none() | LENGTHS, prompt_len=st.none() | LENGTHS, backend=BACKENDS,
       q_group_size=st.sampled_from([64, 32, 1, 0, -3, 2**21]), residual=st.sampled_from([128, 1, 0, 10**9]))
def test_random_workloads_raise_only_kvplan_errors(model_id, seq_len, batch, kv_dtype, dtype, cache, max_cache_len,
                                                   prompt_len, backend, q_group_size, residual):
    spec = SPECS[model_id]
    try:
        e = kvplan.estimate(spec, seq_len, batch, kv_dtype, cache, max_cache_len=max_cache_len,
                            prompt_len=prompt_len, dtype=dtype, quant_backend=backend, q_group_size=q_group_size,
                            residual_length=residual)
    except kvplan.KVPlanError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    check_estimate(e, spec)


@settings(max_examples=30, deadline=None)
@given(data=mutated_configs(), seq_len=st.one_of(st.integers(1, 10_000), SPECIAL_INTS))
def test_mutated_configs_through_the_cli(data, seq_len, tmp_path_factory):
    """Whatever the file holds, the CLI answers with exit 0 or one error line and exit 2."""
    import contextlib
    import io
    import json

    from kvplan.cli import main

    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(json.dumps(data, allow_nan=True))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["estimate", str(path), "--seq-len", str(seq_len)])
        except SystemExit as exc:
            code = exc.code
    if code == 0:
        assert "KV cache:" in out.getvalue() and err.getvalue() == ""
    else:
        assert code == 2 and len(err.getvalue().strip().splitlines()) == 1, err.getvalue()


# ---------------------------------------------------------------- 3: monotonicity


def valid_caches(spec: kvplan.ModelSpec) -> list[str]:
    if "compressed" in spec.spec_kinds:
        return ["dynamic"]  # DeepSeek-V4: transformers keeps the compressor state in dynamic cache layers only
    caches = ["dynamic", "offloaded", "static", "offloaded_static"]
    return caches + (["quantized"] if spec.all_full_attention else [])


@SETTINGS
@given(model_id=st.sampled_from(MODEL_IDS), data=st.data(),
       lengths=st.lists(st.integers(1, 50_000), min_size=2, max_size=2).map(sorted),
       batches=st.lists(st.integers(1, 16), min_size=2, max_size=2).map(sorted))
def test_bytes_monotonic_in_seq_len_and_batch(model_id, data, lengths, batches):
    spec = SPECS[model_id]
    cache = data.draw(st.sampled_from([c for c in valid_caches(spec) if c != "quantized"]))
    (t1, t2), (b1, b2) = lengths, batches
    kwargs = {"kv_dtype": "bf16"}
    static = cache in ("static", "offloaded_static")
    if static:  # a static cache is sized by max_cache_len: hold it fixed, then grow it
        kwargs["max_cache_len"] = t2
    small = kvplan.estimate(spec, t1, b1, cache=cache, **kwargs).kv_cache_bytes
    assert small <= kvplan.estimate(spec, t2, b1, cache=cache, **kwargs).kv_cache_bytes
    assert small <= kvplan.estimate(spec, t1, b2, cache=cache, **kwargs).kv_cache_bytes
    if static:
        grown = kvplan.estimate(spec, t2, b1, cache=cache, kv_dtype="bf16", max_cache_len=t2 + 1000)
        assert kvplan.estimate(spec, t2, b1, cache=cache, **kwargs).kv_cache_bytes <= grown.kv_cache_bytes
        # max_cache_len left out: it defaults to seq_len, so bytes follow seq_len
        assert (kvplan.estimate(spec, t1, b1, cache=cache).kv_cache_bytes
                <= kvplan.estimate(spec, t2, b1, cache=cache).kv_cache_bytes)


FULL_ATTENTION_IDS = [m for m in MODEL_IDS if SPECS[m].all_full_attention]


@SETTINGS
@given(model_id=st.sampled_from(FULL_ATTENTION_IDS), kv_dtype=st.sampled_from(["int2", "int4", "int8", "fp8"]),
       prompt=st.integers(1, 5000), cycles=st.lists(st.integers(0, 40), min_size=2, max_size=2).map(sorted),
       residual=st.sampled_from([1, 16, 128, 256]), group=st.sampled_from([16, 32, 64]),
       batches=st.lists(st.integers(1, 8), min_size=2, max_size=2).map(sorted), extra=st.integers(0, 255))
def test_quantized_monotonic_at_residual_boundaries_and_bounded(model_id, kv_dtype, prompt, cycles, residual, group,
                                                                batches, extra):
    spec = SPECS[model_id]
    backend = {"int8": "hqq", "fp8": "fp8"}.get(kv_dtype, "quanto")

    def q(seq_len, batch=1):
        return kvplan.estimate(spec, seq_len, batch, kv_dtype, "quantized", prompt_len=prompt, quant_backend=backend,
                               q_group_size=group, residual_length=residual).kv_cache_bytes

    (c1, c2), (b1, b2) = cycles, batches
    try:
        q(prompt + c2 * residual, b2)
    except kvplan.WorkloadError:  # a group size quanto / HQQ would refuse for this shape
        assume(False)
    # the residual is empty at T = P + k R: there the quantized bytes only grow with k
    assert q(prompt + c1 * residual) <= q(prompt + c2 * residual)
    T = prompt + c1 * residual + extra % residual
    assert q(T, b1) <= q(T, b2)
    # never more than the unquantized cache at the activation dtype (groups of >= 16 elements, <= 8 bits)
    assert q(T) <= kvplan.estimate(spec, T, 1, cache="dynamic").kv_cache_bytes + 2 * 8 * spec.num_layers


def test_quantized_is_not_monotonic_in_seq_len():
    """The dip that makes the property above necessary: the residual flush at T - P = R."""
    spec = SPECS["meta-llama/Llama-3.1-8B"]

    def q(seq_len):
        return kvplan.estimate(spec, seq_len, 1, "int4", "quantized", prompt_len=4096).kv_cache_bytes

    assert q(4096 + 127) == 167_641_088  # 127 bf16 tokens waiting in the residual
    assert q(4096 + 128) == 155_713_536  # flushed into int4
    assert q(4096 + 128) < q(4096 + 127)


# ---------------------------------------------------------------- 4: GQA <= MHA


def as_mha(data: dict) -> dict:
    """The same config with one KV head per attention head."""
    data = copy.deepcopy(data)
    text = text_of(data)
    heads = next((text[k] for k in HEAD_KEYS if text.get(k) is not None), None)
    for key in KV_HEAD_KEYS:
        if key in text:
            text[key] = heads
    return data


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_mha_rewrite_of_every_bundled_model_parses(model_id):
    kvplan.parse_config(as_mha(CONFIGS[model_id]))


@SETTINGS
@given(model_id=st.sampled_from(MODEL_IDS), data=st.data(), seq_len=st.integers(1, 50_000),
       batch=st.integers(1, 16))
def test_gqa_never_exceeds_mha(model_id, data, seq_len, batch):
    gqa, mha = SPECS[model_id], kvplan.parse_config(as_mha(CONFIGS[model_id]))
    cache = data.draw(st.sampled_from(valid_caches(gqa)))
    kv_dtype = "int4" if cache == "quantized" else "bf16"
    g = kvplan.estimate(gqa, seq_len, batch, kv_dtype, cache)
    m = kvplan.estimate(mha, seq_len, batch, kv_dtype, cache)
    assert g.kv_cache_bytes <= m.kv_cache_bytes
    uniform = len({s.kv_heads for _, s in gqa.specs() if hasattr(s, "kv_heads")}) == 1  # not Gemma 4 / MiMo
    if gqa.kv_heads and uniform and not (gqa.is_mla or gqa.has_state) and cache == "dynamic":
        assert (m.kv_cache_bytes - m.bookkeeping_bytes) * gqa.kv_heads == (
            g.kv_cache_bytes - g.bookkeeping_bytes) * mha.kv_heads  # exactly heads / kv_heads times more


# ---------------------------------------------------------------- 5: a window never adds token storage


FULL_ONLY_IDS = [m for m in MODEL_IDS if set(SPECS[m].attention_kinds) <= {"full"}]


@SETTINGS
@given(model_id=st.sampled_from(FULL_ONLY_IDS), window=st.integers(1, 100_000), seq_len=st.integers(1, 100_000),
       batch=st.integers(1, 8), cache=st.sampled_from(["dynamic", "offloaded", "static", "offloaded_static"]))
def test_adding_a_window_never_increases_bytes(model_id, window, seq_len, batch, cache):
    data = copy.deepcopy(CONFIGS[model_id])
    text = text_of(data)
    text["sliding_window"] = window
    if "use_sliding_window" in text:
        text["use_sliding_window"] = True  # Qwen2/3: the window only applies with this flag
    try:
        windowed = kvplan.parse_config(data)
    except kvplan.ConfigError:
        return
    full = SPECS[model_id]
    before = kvplan.estimate(full, seq_len, batch, "bf16", cache)
    after = kvplan.estimate(windowed, seq_len, batch, "bf16", cache)
    assert after.kv_cache_bytes - after.bookkeeping_bytes <= before.kv_cache_bytes - before.bookkeeping_bytes
    windowed_layers = windowed.attention_kinds.get("sliding", 0)
    assert after.kv_cache_bytes <= before.kv_cache_bytes + 8 * windowed_layers
    if window < seq_len and windowed_layers and window > 1 and cache != "quantized":
        assert after.kv_cache_bytes < before.kv_cache_bytes  # the window really bites


def test_windowed_rewrites_apply():
    """The property above is not vacuous: most full-attention models do become windowed."""
    windowed = 0
    for model_id in FULL_ONLY_IDS:
        data = copy.deepcopy(CONFIGS[model_id])
        text_of(data)["sliding_window"] = 1024
        if "use_sliding_window" in text_of(data):
            text_of(data)["use_sliding_window"] = True
        windowed += "sliding" in kvplan.parse_config(data).attention_kinds
    assert windowed >= len(FULL_ONLY_IDS) // 2
