"""The weight shape of families without a hand-written rule: sizes from the config's fields, structure from the
family's traits (part of the config boundary).

What a config never says is how a family wires its blocks: whether the MLP is gated, which projections carry a
bias, how many norms a block has, whether q/k are normed per head or over the whole projection, what small
learned scalars it adds. `tools/gen_family_traits.py` reads those traits off the modules transformers 5.24 builds
(on the meta device, at the family's default config and at a resized one) into `kvplan/data/family_traits.json`,
and keeps a family's traits only where kvplan's count with them equals transformers' at both sizes. Everything
that scales (hidden, heads, head_dim, intermediate, experts, vocab, which layers are MoE) is read from the fields
here, so a real checkpoint's config is counted from its own values.
"""

from __future__ import annotations

import json
from functools import lru_cache
from math import isqrt, prod
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..model.arch import AttentionDims, LayerDims, MLPDims, MoEDims
from .reader import (EXPERT_KEYS, HEAD_DIM_KEYS, INTERMEDIATE_KEYS, KV_HEAD_KEYS, VOCAB_KEYS, ConfigReader, check_float,
                     check_int)

_DATA = Path(__file__).parent.parent / "data" / "family_traits.json"
EXPERT_INTERMEDIATE_KEYS = ("moe_intermediate_size", "expert_intermediate_size", "moe_ffn_hidden_size")
SHARED_INTERMEDIATE_KEYS = ("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")
SHARED_COUNT_KEYS = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")


@lru_cache(maxsize=1)
def _table() -> dict[str, dict]:
    if not _DATA.exists():
        return {}
    return json.loads(_DATA.read_text()).get("families", {})


def traits_for(model_type: str) -> dict | None:
    """The verified traits of a family, or None (no traits: the generic llama-like count, unverified)."""
    found = _table().get(model_type)
    return found if found and "unverified" not in found else None


def unexplained(model_type: str) -> str | None:
    """Why tools/gen_family_traits.py could not explain a transformers family's tensors, or None (verified, or a
    family it never saw: remote code, which gets the generic count and a warning)."""
    found = _table().get(model_type)
    return found["unverified"] if found and "unverified" in found else None


def switch(r: ConfigReader, value: Any, t: dict | None = None) -> bool:
    """A trait that is either fixed (true / false) or follows a config flag (its name), whose class default the
    traits record (Qwen1.5-MoE's config.json has no qkv_bias: Qwen2MoeConfig's True puts biases on q, k, v)."""
    if isinstance(value, str):
        default = bool((t or {}).get("flag_defaults", {}).get(value, r.defaults.get(value, False)))
        return r.flag(value, default)
    return bool(value)


def holds(r: ConfigReader, when: dict | None, t: dict | None = None) -> bool:
    """Whether the config keys an extra or an override is conditioned on have the values it names (unset: the
    class default the traits recorded). tools/gen_family_traits.py `_conditional` finds them by flipping each bool
    key of the family's class: Helium's attention_bias true adds q/k/v biases [q_dim] on every layer (24 x 3 x 2,560
    = 184,320 parameters its default leaves out); OPT's do_layer_norm_before false drops the final LayerNorm."""
    for key, value in (when or {}).items():
        default = (t or {}).get("flag_defaults", {}).get(key, r.defaults.get(key))
        got = r.flag(key, bool(default)) if isinstance(value, bool) else r.get(key, default)
        if got != value:
            return False
    return True


def effective(r: ConfigReader, t: dict) -> dict:
    """The traits with every override whose condition holds applied (OPT's layer_norm_elementwise_affine false:
    no norm weights, so norms 0 and no final norm)."""
    out = t
    for o in t.get("overrides", ()):
        if holds(r, o["when"], t):
            out = {**out, **o["set"]}
    return out


def attention(r: ConfigReader, t: dict, hidden: int, heads: int) -> AttentionDims:
    if t.get("mla"):
        return _mla(r, t, heads)
    found = r.first(KV_HEAD_KEYS)
    kv = r.overrides.kv_heads or (r.int_(*found) if found else heads)
    head_dim = r.overrides.head_dim or _head_dim(r, hidden, heads)
    b = t.get("attn_bias", {})
    return AttentionDims(heads, kv, head_dim, head_dim, switch(r, b.get("q"), t), switch(r, b.get("k"), t),
                         switch(r, b.get("v"), t), switch(r, b.get("o"), t), fused_qkv=bool(t.get("fused_qkv")),
                         qk_norm=_qk_norm(r, t))


def _qk_norm(r: ConfigReader, t: dict) -> str:
    """The q/k norms, fixed by the family or switched by a flag the traits found by flipping it
    (tools/gen_family_traits.py `_flag_driven`): GLM-4.5's use_qk_norm true adds 92 layers x 2 x 128 = 23,552
    parameters that Glm4MoeConfig's default false leaves out."""
    switched = t.get("qk_norm_flag")
    if not switched:
        return t.get("qk_norm", "none")
    return switched["on"] if switch(r, switched["flag"], t) else switched["off"]


def _mla(r: ConfigReader, t: dict, heads: int) -> AttentionDims:
    """MLA as DeepSeek-V2/V3 build it (q through q_lora_rank when set, kv_a / kv_b, two RMSNorms), with the
    lightning indexer where the family has one (DeepSeek-V3.2, GLM-5)."""
    nope, rope = r.req_int("qk_nope_head_dim"), r.req_int("qk_rope_head_dim", minimum=0)
    b = t.get("attn_bias", {})
    indexer = (r.req_int("index_n_heads"), r.req_int("index_head_dim")) if t.get("indexer") else None
    return AttentionDims(heads, heads, nope + rope, r.req_int("v_head_dim"), q_bias=switch(r, b.get("q"), t),
                         k_bias=switch(r, b.get("k"), t), o_bias=switch(r, b.get("o"), t),
                         q_lora_rank=r.opt_int("q_lora_rank", minimum=1), kv_lora_rank=r.req_int("kv_lora_rank"),
                         qk_rope_dim=rope, indexer=indexer)


def _head_dim(r: ConfigReader, hidden: int, heads: int) -> int:
    found = r.first(HEAD_DIM_KEYS)
    if found is not None and not (isinstance(found[1], int) and found[1] <= 0):
        return r.int_(*found)
    return hidden // heads


def dense_mlp(r: ConfigReader, t: dict, hidden: int) -> MLPDims:
    found = r.first(INTERMEDIATE_KEYS)
    if found is not None and not isinstance(found[1], list):
        size = r.int_(*found)
    elif t.get("mlp_ratio_field"):   # GPT-NeoX-Japanese: hidden x intermediate_multiple_size
        size = int(hidden * check_float(t["mlp_ratio_field"], r.get(t["mlp_ratio_field"], t.get("mlp_ratio")),
                                        minimum=1e-3, maximum=64))
    elif t.get("mlp_ratio"):   # CodeGen, GPT-Neo: n_inner null means 4 x hidden
        size = int(t["mlp_ratio"] * hidden)
    else:
        raise ConfigError("config has no intermediate size (intermediate_size / n_inner / ffn_dim): fix the "
                          "config.json", field="intermediate_size")
    return MLPDims(size, gated=bool(t.get("gated", True)), bias=switch(r, t.get("mlp_bias", False), t),
                   fused_gate_up=bool(t.get("fused_gate_up")))


def _dense(r: ConfigReader, t: dict, hidden: int) -> MLPDims | None:
    """The dense MLP, or None where the family's MLP tensors are its own (`ffn_weights` false) and the config
    names no intermediate size (CTRL's dff, xLSTM's ffn_proj_factor)."""
    if t.get("ffn_weights", True) or r.first(INTERMEDIATE_KEYS) is not None or t.get("mlp_ratio"):
        return dense_mlp(r, t, hidden)
    return None


def moe(r: ConfigReader, t: dict, hidden: int) -> MoEDims | None:
    """Routed experts (and a shared expert) where the config has an expert count above 1."""
    found = r.first(EXPERT_KEYS)
    experts = r.int_(found[0], found[1], minimum=0) if found else 0
    if experts < 2 and not t.get("moe"):
        return None
    size_key = r.first(EXPERT_INTERMEDIATE_KEYS) or r.first(INTERMEDIATE_KEYS)
    if size_key is None:
        raise ConfigError("config has no expert size (moe_intermediate_size / intermediate_size): fix the "
                          "config.json", field="moe_intermediate_size")
    expert = MLPDims(r.int_(*size_key), gated=bool(t.get("expert_gated", True)),
                     bias=bool(t.get("expert_bias")))
    top_k = r.first(("num_experts_per_tok", "num_experts_per_token", "moe_topk", "top_k"))
    return MoEDims(experts, r.int_(top_k[0], top_k[1], minimum=0) if top_k else 0, expert,
                   shared=_shared(r, t, expert), shared_gate=bool(t.get("shared_gate")),
                   router_bias=bool(t.get("router_bias")), score_param=bool(t.get("score_param")),
                   score_bias=bool(t.get("score_buffer")), score_fp32=bool(t.get("score_buffer_fp32")),
                   router_fp32=bool(t.get("router_fp32")))


def _shared(r: ConfigReader, t: dict, expert: MLPDims) -> MLPDims | None:
    if not t.get("shared"):
        return None
    size = r.first(SHARED_INTERMEDIATE_KEYS)
    if size is not None:
        return MLPDims(r.int_(*size))
    count = r.first(SHARED_COUNT_KEYS)
    n = r.int_(count[0], count[1], minimum=0) if count else 1
    return MLPDims(expert.intermediate * n) if n else None


def moe_layers(r: ConfigReader, n: int) -> list[bool]:
    """Which layers route to experts, from whichever field the config uses (all of them, when none is set):
    `first_k_dense_replace` (DeepSeek-style: dense before it), `decoder_sparse_step` and `mlp_only_layers`
    (Qwen-MoE), `moe_layer_freq` as a list (MiMo) or step, `mlp_layer_types` ('dense' / 'sparse'), `moe_layers`."""
    kinds = r.layer_kinds or ()
    if any(k.startswith("none") for k in kinds) and len(kinds) == n:
        # a block pattern says which blocks are MoE (Nemotron-H "E"): Nemotron-H-56B's has none, whatever
        # NemotronHConfig's default n_routed_experts 8 says
        return [k == "none_moe" for k in kinds]
    types = r.get("mlp_layer_types")
    if isinstance(types, list) and len(types) == n:
        return [t in ("sparse", "moe") for t in types]
    listed = r.layer_set("moe_layers")
    if listed is not None:
        return [i in listed for i in range(n)]
    freq = r.get("moe_layer_freq")
    if isinstance(freq, list) and len(freq) == n:
        return [bool(f) for f in freq]
    # AFMoE says num_dense_layers for the same thing (AfmoeConfig: "number of initial dense layers")
    first = r.opt_int("first_k_dense_replace", minimum=0) or r.opt_int("num_dense_layers", minimum=0) or 0
    step = r.opt_int("decoder_sparse_step", minimum=1) or 1
    dense = r.layer_set("mlp_only_layers") or set()
    # ERNIE-4.5-MoE: MoE from moe_layer_start_index to moe_layer_end_index, every moe_layer_interval
    start = r.opt_int("moe_layer_start_index", minimum=0) or 0
    end = r.opt_int("moe_layer_end_index", minimum=-1)
    end = n - 1 if end is None or end < 0 else end
    every = r.opt_int("moe_layer_interval", minimum=1) or 1
    return [i >= first and (i + 1) % step == 0 and i not in dense and start <= i <= end and (i - start) % every == 0
            for i in range(n)]


def _parts(r: ConfigReader, t: dict, hidden: int, heads: int, n: int):
    """(attention, experts or None, which layers route to them, the dense MLP or None), read once."""
    attn = attention(r, t, hidden, heads)
    experts = moe(r, t, hidden)
    which = moe_layers(r, n) if experts else [False] * n
    return attn, experts, which, _dense(r, t, hidden) if not all(which) else None


def layers(r: ConfigReader, t: dict, hidden: int, heads: int, n: int) -> list[LayerDims]:
    return body(r, t, hidden, heads, n)[0]


def body(r: ConfigReader, t: dict, hidden: int, heads: int, n: int) -> tuple[list[LayerDims], tuple]:
    """The blocks, and the family's tensors outside them (BERT: token-type and position embeddings, the LM
    head's transform), from one reading of the config."""
    attn, experts, which, dense = _parts(r, t, hidden, heads, n)
    size = sizes(r, hidden, attn, experts, dense, n)
    norms = int(t.get("norms", 2))
    kinds = list(r.layer_kinds or ["attn"] * n)
    out = []
    for i, routed in enumerate(which):
        kind = kinds[i] if i < len(kinds) else "attn"
        # hybrids (LFM3, Kimi-Linear): attention only where the cache says so, the other mixers are extras
        attends = any(k.startswith("attn") for k in kind.split("+"))
        mixer = attn if t.get("attention", "all") == "all" or attends else None
        scopes = {"all", "moe" if routed else "dense", "kind:" + kind, "first" if i == 0 else "not_first"} | (
            {"last"} if i == n - 1 else set()) | ({"attention"} if attends else set())
        extra = tuple(_extra(e, size) for e in t.get("extras", ())
                      if e["scope"] in scopes and holds(r, e.get("when"), t))
        # Nemotron-H: the MLP and MoE are blocks of their own, so the mixer blocks have no feed-forward
        ffn = None if t.get("ffn_on") == "blocks" and not kind.startswith("none") else (experts if routed else dense)
        out.append(LayerDims(mixer, ffn, norms, extra,
                             mixer_weights=t.get("mixer_weights", True), ffn_weights=t.get("ffn_weights", True)))
    return out, tuple(_extra(e, size) for e in t.get("extras", ())
                      if e["scope"] == "top" and holds(r, e.get("when"), t))


def _extra(e: dict, size: dict[str, Any]) -> tuple[str, int, tuple[int, int] | None]:
    """(group, elements, (rows, cols) of a projection a quantizer packs, or None): a 2-D `.weight` is an
    nn.Linear that an fp8 / GPTQ checkpoint stores quantized (MiMo-V2-Flash's q_proj, read as an extra)."""
    dims = [_dim(d, size) for d in e["dims"]]
    linear = len(dims) == 2 and e["name"].endswith(".weight") and e["group"] != "embeddings"
    return e["group"], prod(dims), (dims[0], dims[1]) if linear else None


def size_table(r: ConfigReader, t: dict, hidden: int, heads: int, n: int) -> dict[str, Any]:
    """The sizes extras are written in, for tools/gen_family_traits.py."""
    attn, experts, _, dense = _parts(r, t, hidden, heads, n)
    return sizes(r, hidden, attn, experts, dense, n)


def sizes(r: ConfigReader, hidden: int, attn: AttentionDims, experts: MoEDims | None, dense: MLPDims | None,
          n: int) -> dict[str, Any]:
    """The sizes an extra tensor's dimensions are written in (tools/gen_family_traits.py names them so)."""
    out = {"hidden": hidden, "heads": attn.heads, "kv_heads": attn.kv_heads, "head_dim": attn.head_dim,
           "q_dim": attn.heads * attn.head_dim, "kv_dim": attn.kv_heads * attn.head_dim, "layers": n,
           "vocab": lambda: r.need_int(VOCAB_KEYS, "vocabulary size")}
    if dense is not None:
        out["inter"] = dense.intermediate
    if experts is not None:
        out.update(experts=experts.experts, expert_inter=experts.expert.intermediate)
    # the state of the first linear-attention / SSM layer, as the cache reads it (OLMo-Hybrid's g_proj:
    # [v_heads x v_head_dim, hidden] = rec0*rec2)
    conv, rec = r.state_shape or ((), ())
    out.update({f"conv{i}": v for i, v in enumerate(conv)})
    out.update({f"rec{i}": v for i, v in enumerate(rec)})
    for a in range(len(rec)):
        for b in range(a + 1, len(rec)):
            out[f"rec{a}*rec{b}"] = rec[a] * rec[b]
    adjusted = _adjusted_ffn(r, hidden)
    if adjusted is not None:
        out["ffn_adjusted"] = adjusted
    out["_reader"] = r
    return out


def _adjusted_ffn(r: ConfigReader, hidden: int) -> int | None:
    """The MLP width a family derives from its fields rather than states: LFM2 (modeling_lfm2.py Lfm2MLP) with
    block_auto_adjust_ff_dim takes int(2 x intermediate / 3), times block_ffn_dim_multiplier, rounded up to
    block_multiple_of (12,288 -> 8,192); xLSTM (xLSTMFeedForward) hidden x ffn_proj_factor rounded up to
    ffn_round_up_to_multiple_of (4,096 x 2.667 -> 10,944)."""
    if r.get("block_auto_adjust_ff_dim") is False and r.get("intermediate_size") is not None:
        return r.req_int("intermediate_size")   # Lfm2MLP: intermediate_size as stated
    if r.get("block_auto_adjust_ff_dim") is True and r.get("intermediate_size") is not None:
        size = int(2 * r.req_int("intermediate_size") / 3)
        multiplier = r.get("block_ffn_dim_multiplier")
        if multiplier is not None:  # NaN here was int(nan): ValueError
            multiplier = check_float("block_ffn_dim_multiplier", multiplier, minimum=1e-3, maximum=64)
            multiple = r.req_int("block_multiple_of")
            size = multiple * ((int(multiplier * size) + multiple - 1) // multiple)
        return size
    factor, multiple = r.get("ffn_proj_factor"), r.get("ffn_round_up_to_multiple_of")
    if factor is not None and multiple is not None:
        factor = check_float("ffn_proj_factor", factor, minimum=1e-3, maximum=64)
        multiple = check_int("ffn_round_up_to_multiple_of", multiple)
        return int((hidden * factor + multiple - 1) // multiple * multiple)
    return None


def numel(dims: list, size: dict[str, Any]) -> int:
    """Elements of a tensor whose dimensions are ints, size names, `field:<config key>` or `k*name`."""
    return prod(_dim(dim, size) for dim in dims)


def _dim(dim, size: dict[str, Any]) -> int:
    if isinstance(dim, int):
        return dim
    if dim.endswith(")") and "*(" in dim:   # "field:heads*(field:nope+field:v)"
        factor, _, inner = dim[:-1].partition("*(")
        return _dim(factor, size) * _dim(inner, size)
    if "+" in dim:  # "vocab+field:prompt_types*field:prompt_length"
        return sum(_dim(term, size) for term in dim.split("+"))
    if dim.count("field:") == 2:  # a product of two fields
        a, b = dim.split("*", 1)
        return _dim(a, size) * _dim(b, size)
    if dim.startswith("isqrt:"):   # Doge's CDMoE router: 2 x floor(sqrt(num_experts)) rows
        return isqrt(_dim(dim[len("isqrt:"):], size))
    head, star, rest = dim.partition("*")
    if star and head.isdigit():  # "2*inter" ("rec0*rec2" is a name of its own)
        return int(head) * _dim(rest, size)
    if dim.startswith("field:"):
        return size["_reader"].req_int(dim[len("field:"):], minimum=0)
    value = size.get(dim)
    if value is None:
        raise ConfigError(f"config does not size {dim!r}, which this family's weights need: fix the config.json",
                          field=dim)
    return value() if callable(value) else value
