"""Regenerate kvplan/data/family_traits.json: how each transformers family wires its blocks, read off its modules.

For every causal-LM family without a hand-written rule in kvplan.config.arch, build the model on the meta device at
its config class's defaults and read, from the parameter names and shapes, what no config field says: gated or
plain MLP, fused QKV, which projections have biases (and whether a flag decides it: built again with the flag
flipped), q/k norms per head or per projection, norms per block and their biases, routers and shared experts,
learned-position offsets, constant learned scalars. Then count the same config with kvplan and those traits, and
again at a resized config (hidden, intermediate, vocabulary changed); a family's traits are kept only where both
counts equal `sum(p.numel() for p in model.parameters())` (a multimodal wrapper's language model only).

Where they do not, the tensors kvplan's dims leave unexplained become the family's `extras`: matched by size
against kvplan's own tensor list layer by layer, each written in the sizes kvplan reads (`hidden`, `q_dim`,
`inter`, `experts`, a state dimension, `field:<key>`, a constant) that fit at both configs, with the layers it sits
on (all, MoE, dense, one cache kind, the last). AFMoE's attention output gate is `[q_dim, hidden]` on every layer;
BERT's token-type table `[2, hidden]` is top-level. Where the dims' own MLP, mixer or top level do not match the
family's tensors (RemBERT's factorised embeddings), those are listed as extras too (VARIANTS). A family none of
this explains keeps `unverified` and the reason, and kvplan refuses its parameter count.

Run: python tools/gen_family_traits.py [model_type ...]   (needs torch and transformers; ~20 minutes for all)
KVPLAN_TRAITS_DEBUG=1 prints why each variant failed.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "kvplan" / "data" / "family_traits.json"
BIAS_FLAGS = ("attention_bias", "qkv_bias", "add_qkv_bias", "use_bias", "bias", "add_bias_linear", "use_qkv_bias")
MLP_BIAS_FLAGS = ("mlp_bias", "use_bias", "bias", "add_bias_linear")
LAYER = re.compile(r"^(?P<prefix>.*?(?:layers|\.h|blocks|layer|decoder\.layers))\.(?P<i>\d+)\.(?P<rest>.+)$")
Q, K, V, O = (re.compile(p) for p in (r"(^|\.)(q_proj|query|q)\.", r"(^|\.)(k_proj|key|k)\.",
                                       r"(^|\.)(v_proj|value|v)\.", r"(^|\.)(o_proj|out_proj|dense|c_proj|o)\."))
FUSED = re.compile(r"(c_attn|qkv_proj|query_key_value|Wqkv|W_pack|qkv)\.")
# q/k norms: one [head_dim] weight (Qwen3), one per head in a ModuleList (StableLM's q_layernorm.norms.0), or one
# [heads, head_dim] weight (Cohere)
QK_NORM = re.compile(r"(q_norm|q_layernorm|query_layernorm|k_norm|k_layernorm|key_layernorm)(\.norms\.\d+)?\.weight$")
QK_NORM_BIAS = re.compile(r"(q_norm|q_layernorm|query_layernorm|k_norm|k_layernorm|key_layernorm)(\.norms\.\d+)?\.bias$")
# Flags that switch the q/k norms on or off (GLM-4.5 sets use_qk_norm true where Glm4MoeConfig defaults to false;
# StableLM-2-12B qk_layernorm true; Command R+ use_qk_norm true): built again with the flag flipped, as the biases
QK_NORM_FLAGS = ("use_qk_norm", "qk_layernorm", "use_qk_layernorm", "qk_norm")
GATE = re.compile(r"(gate_proj|w1|w3|gate_up_proj|wi_0|fc_gate)\.weight$")
UP_DOWN = re.compile(r"(up_proj|down_proj|w2|fc1|fc2|c_fc|c_proj|dense_h_to_4h|dense_4h_to_h|wo|wi|fc_in|fc_out)\."
                     r"(weight|bias)$")


def _build(cls_cfg, **kwargs):
    import torch
    from transformers import AutoModelForCausalLM

    cfg = cls_cfg(**kwargs)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    return cfg, model


def _split(model):
    """(top-level params, {layer index: [(rest, shape)]})."""
    top, layers = [], defaultdict(list)
    for name, p in model.named_parameters():
        m = LAYER.match(name)
        if m:
            layers[int(m.group("i"))].append((m.group("rest"), tuple(p.shape)))
        else:
            top.append((name, tuple(p.shape)))
    return top, layers


def traits_of(cfg, model) -> dict:
    """Structure traits at one config (sizes come from the fields at count time)."""
    text = cfg.get_text_config(decoder=True)
    hidden = text.hidden_size
    top, layers = _split(model)
    t: dict = {}
    attn_layer = next((items for items in layers.values()
                       if any(Q.search(n) or FUSED.search(n) or "kv_a_proj" in n for n, _ in items)), None)
    if attn_layer is None:  # CTRL's Wq, XLM's q_lin: no name kvplan knows; the extras variants may still explain it
        attn_layer = next(iter(layers.values()), [])
    names = [n for n, _ in attn_layer]
    t["fused_qkv"] = any(FUSED.search(n) and n.endswith("weight") for n in names)
    bias = lambda rx: any(rx.search(n) and n.endswith("bias") and "norm" not in n for n in names)  # noqa: E731
    t["mla"] = any("kv_a_proj_with_mqa" in n for n in names)
    if t["mla"]:
        t["indexer"] = any(".indexer." in n for n in names)
        t["attn_bias"] = {"q": bias(re.compile(r"q_(a_)?proj\.")), "k": bias(re.compile(r"kv_a_proj")), "v": False,
                          "o": bias(O)}
    elif t["fused_qkv"]:
        b = any(FUSED.search(n) and n.endswith("bias") for n in names)
        t["attn_bias"] = {"q": b, "k": b, "v": b, "o": bias(O)}
    else:
        t["attn_bias"] = {"q": bias(Q), "k": bias(K), "v": bias(V), "o": bias(O)}
    qn = [s for n, s in attn_layer if QK_NORM.search(n) and ".indexer." not in n]
    try:
        head_dim = getattr(text, "head_dim", None) or hidden // text.num_attention_heads
    except Exception:  # noqa: BLE001 - Gemma 4: head_dim differs per layer and the global read raises
        head_dim = None
    t["qk_norm"] = _qk_norm_kind(qn, head_dim, any(QK_NORM_BIAS.search(n) for n in names))
    norm_mods = {n.rsplit(".", 1)[0] for n, s in attn_layer if ("norm" in n or re.search(r"(^|\.)ln", n))
                 and not QK_NORM.search(n) and s == (hidden,) and "_a_layernorm" not in n}
    t["norms"] = len(norm_mods)
    t["norm_bias"] = any(n.endswith("bias") and n.rsplit(".", 1)[0] in norm_mods for n in names)
    t["gated"] = any(GATE.search(n) for n in names if "expert" not in n)
    t["fused_gate_up"] = any(n.endswith("gate_up_proj.weight") for n in names if "expert" not in n)
    t["mlp_bias"] = any(UP_DOWN.search(n) and n.endswith("bias") and "expert" not in n for n in names)
    every = [n for items in layers.values() for n, _ in items]
    t["moe"] = any("experts" in n for n in every)
    if t["moe"]:
        t["shared"] = any("shared_expert" in n and not n.endswith("shared_expert_gate.weight") for n in every)
        t["shared_gate"] = any("shared_expert_gate" in n for n in every)
        t["router_bias"] = any(re.search(r"(gate|router)\.bias$", n) for n in every)
        t["expert_bias"] = any(re.search(r"experts\..*bias", n) for n in every)
        t["expert_gated"] = any(re.search(r"experts\.(gate_up_proj|gate_proj|w1|w3)", n) for n in every)
        if not any((GATE.search(n) or UP_DOWN.search(n)) and "expert" not in n for n in every):
            # no dense MLP on any layer of the default to read: it is the experts' kind (Qwen2MoeMLP is gated, as
            # its experts are: at decoder_sparse_step 2 transformers builds 8,085,743,616 parameters, and an
            # ungated reading 7,947,331,584); gen_field_probes checks it at the keys that make dense layers
            t["gated"] = t["expert_gated"]
        t["score_param"] = any("e_score_correction_bias" in n for n in every)
        import torch

        names = {n for n, _ in model.named_parameters()}
        scores = [v for k, v in model.state_dict().items() if k.endswith("e_score_correction_bias") and k not in names]
        t["score_buffer"] = bool(scores)
        t["score_buffer_fp32"] = bool(scores) and scores[0].dtype == torch.float32
        # DeepSeek-style routers kept in float32 in a bf16 model (_keep_in_fp32_modules_strict): GLM-5's 75 routers
        t["router_fp32"] = any(re.search(r"(mlp|block_sparse_moe)\.(gate|router)\.weight$", n) and p.dtype == torch.float32
                               for n, p in model.named_parameters())
    t["lm_head_bias"] = any(n == "lm_head.bias" for n, _ in top)
    top_norms = [n for n, s in top if ("norm" in n or "ln_f" in n) and s == (hidden,) and n.endswith("weight")]
    t["final_norm"] = bool(top_norms)
    positions = [s for n, s in top if re.search(r"(embed_positions|wpe|position_embeddings)\.weight$", n)]
    limit = None
    if positions:
        limit = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)
        if isinstance(limit, int):  # else (Whisper's max_target_positions) the table is an extra
            t["positions_offset"] = positions[0][0] - limit
    sizes = [getattr(text, k, None) for k in ("intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim")]
    if not any(isinstance(v, int) for v in sizes):  # Bloom, CodeGen, GPT-Neo: the MLP is 4 x hidden
        up = [s for n, s in attn_layer if UP_DOWN.search(n) and n.endswith("weight") and s[-1] == hidden]
        if up:
            t["mlp_ratio"] = up[0][0] / hidden
            # GPT-NeoX-Japanese states it: intermediate_multiple_size (modeling_gpt_neox_japanese.py GPTNeoXJapaneseMLP
            # `int(config.hidden_size * config.intermediate_multiple_size)`)
            named = [k for k, v in text.to_dict().items() if "intermediate" in k and not isinstance(v, bool)
                     and isinstance(v, (int, float)) and v == t["mlp_ratio"]]
            if len(named) == 1:
                t["mlp_ratio_field"] = named[0]
    return t


def _qk_norm_kind(shapes: list[tuple], head_dim: int | None, bias: bool) -> str:
    """kvplan's name for the q/k norms of one layer (kvplan.weights.rule sizes each): "head" is one [head_dim]
    weight for q and one for k (2 x 128 = 256 a layer for GLM-4.5), "head_ln" the same as LayerNorms with biases
    (Persimmon, 4 x head_dim), "proj" one weight per head (StableLM's per-head LayerNorms, Cohere's
    [heads, head_dim]: q_dim + kv_dim)."""
    if not shapes:
        return "none"
    if len(shapes) == 2 and shapes[0] == (head_dim,):
        return "head_ln" if bias else "head"
    return "proj"


def _flipped(cls_cfg, cfg, flag: str) -> tuple[bool | None, dict | None]:
    """(the class default of a bool flag, the traits with it flipped), or (value, None) where the config has no such
    bool or the class cannot build it flipped (then the flag decides nothing here)."""
    value = getattr(cfg, flag, None)
    if not isinstance(value, bool):
        return value, None
    try:
        cfg2, model2 = _build(cls_cfg, **{flag: not value})
        return value, traits_of(cfg2, model2)
    except Exception:  # noqa: BLE001
        return value, None


def _flag_driven(cls_cfg, cfg, t: dict) -> None:
    """Bias and q/k-norm traits that a config flag switches: build with the flag flipped and see them follow."""
    for flag in QK_NORM_FLAGS:
        value, t2 = _flipped(cls_cfg, cfg, flag)
        if t2 is None:
            continue
        flipped = t2["qk_norm"]
        if flipped != t["qk_norm"]:
            on, off = (t["qk_norm"], flipped) if value else (flipped, t["qk_norm"])
            t["qk_norm_flag"] = {"flag": flag, "on": on, "off": off}
            t.setdefault("flag_defaults", {})[flag] = value
            break
    for flags, keys in ((BIAS_FLAGS, ("q", "k", "v", "o")), (MLP_BIAS_FLAGS, ("mlp",))):
        for flag in flags:
            value, t2 = _flipped(cls_cfg, cfg, flag)
            if t2 is None:
                continue
            if keys == ("mlp",):
                if t2["mlp_bias"] != t["mlp_bias"]:
                    t["mlp_bias"] = flag
                    t.setdefault("flag_defaults", {})[flag] = value
            else:
                for k in keys:
                    if t2["attn_bias"][k] != t["attn_bias"][k] and not isinstance(t["attn_bias"][k], str):
                        t["attn_bias"][k] = flag
                        t.setdefault("flag_defaults", {})[flag] = value


def _spec(cfg):
    """kvplan's reading of a transformers config (its refusals off: this is what checks them)."""
    from kvplan.config import verified
    from kvplan.config.parse import parse_config

    verified.ENFORCE = False
    spec = parse_config(cfg.to_dict())
    if spec.arch is None:
        raise ValueError(spec.arch_error)
    return spec


def _layer_extra(cfg, model, t: dict) -> int:
    """Parameters kvplan's count with these traits does not explain, per layer (must be a constant)."""
    from kvplan.weights.rule import param_count

    spec = _spec(cfg)
    return _total(cfg, model) - param_count(spec.arch).total, spec.num_layers


def _wrapper(cfg) -> bool:
    from kvplan.config.reader import multimodal

    return multimodal(cfg.to_dict())


def _text_params(cfg, model):
    """(name, parameter) of the language model: a multimodal wrapper's towers are not what kvplan counts (its
    weights say "language model only"), as validation/conformance.py compares them."""
    from validation.conformance import NON_TEXT

    wrapper = _wrapper(cfg)
    return [(n, p) for n, p in model.named_parameters() if not (wrapper and any(w in n for w in NON_TEXT))]


def _total(cfg, model) -> int:
    return sum(p.numel() for _, p in _text_params(cfg, model))


def resized(cls_cfg, cfg) -> dict:
    """A second size for the check: hidden x 2 (keeps heads dividing it), intermediate sizes x 2, vocab + 64."""
    out = {}
    for key in ("hidden_size", "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
                "n_embd", "d_model", "n_inner", "ffn_dim", "decoder_ffn_dim", "emb_dim"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out[key] = value * 2
    if isinstance(getattr(cfg, "vocab_size", None), int):
        out["vocab_size"] = cfg.vocab_size + 64
    return out


# ---------------------------------------------------------------- extras: tensors the traits do not describe


def _truth_tensors(cfg, model, n: int) -> tuple[dict[int, dict[str, tuple]], dict[str, tuple]]:
    """({layer: {name in the layer: shape}}, {top-level name: shape}) of the parameters (tied ones once). The
    decoder stack is the prefix with kvplan's layer count; any other stack's tensors are top-level."""
    stacks: dict[str, dict[int, dict[str, tuple]]] = defaultdict(lambda: defaultdict(dict))
    top: dict[str, tuple] = {}
    for name, p in _text_params(cfg, model):
        m = LAYER.match(name)
        if m:
            stacks[m.group("prefix")][int(m.group("i"))][m.group("rest")] = tuple(p.shape)
        else:
            top[name] = tuple(p.shape)
    main = [prefix for prefix, layers in stacks.items() if len(layers) == n]
    if len(main) != 1:
        raise ValueError(f"no single stack of {n} layers among {sorted(stacks)}")
    for prefix, layers in stacks.items():
        if prefix != main[0]:
            top.update({f"{prefix}.{i}.{rest}": shape for i, items in layers.items() for rest, shape in items.items()})
    return stacks[main[0]], top


def _numel(shape: tuple) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


DEBUG = bool(__import__("os").environ.get("KVPLAN_TRAITS_DEBUG"))
HINTS = {"attention": ("attn", "attention", "q", "k", "v", "o", "query", "key", "value"), "mlp": ("mlp", "ffn", "feed"),
         "experts": ("expert",), "router": ("gate", "router"), "norms": ("norm", "ln"), "embeddings": ("embed", "wte"),
         "lm_head": ("lm_head",), "mixer": ("mixer", "conv", "mamba")}


def _unexplained(truth: dict[str, tuple], ours: list) -> tuple[list[str], list[int]]:
    """The truth tensors kvplan's own tensors (kvplan.weights.rule.Tensor) leave unexplained, matched by size: one to
    one, then one of ours to two or three of theirs (kvplan sums q_norm and k_norm), then two of ours to one of
    theirs (a fused gate_up). Returns (their names left, the sizes of ours that match nothing: kvplan counts a
    tensor transformers does not have)."""
    left = {name: _numel(shape) for name, shape in truth.items()}
    mine = sorted((t.numel * t.copies, t.group) for t in ours)[::-1]
    missed = []
    for size, group in mine:
        same = [n for n, v in left.items() if v == size]
        if same:
            hint = HINTS.get(group, ())
            pick = next((n for n in same if any(h in re.split(r"[._]", n) or h in n for h in hint)), same[0])
            del left[pick]
            continue
        combo = _subset(left, size)
        if combo is None:
            missed.append(size)
            continue
        for n in combo:
            del left[n]
    for a in range(len(missed)):
        for b in range(a + 1, len(missed)):
            if missed[a] is None or missed[b] is None:
                continue
            found = next((n for n, v in left.items() if v == missed[a] + missed[b]), None)
            if found is not None:
                del left[found]
                missed[a] = missed[b] = None
    return sorted(left), [m for m in missed if m is not None]


def _subset(left: dict[str, int], size: int) -> tuple[str, ...] | None:
    from itertools import combinations

    small = [n for n, v in left.items() if v < size]
    for k in (2, 3):
        for combo in combinations(small, k):
            if sum(left[n] for n in combo) == size:
                return combo
    return None


def _group(name: str) -> str:
    words = set(re.split(r"[._]", name.lower()))
    if "norm" in name.lower() or words & {"ln", "layernorm"}:
        return "norms"
    for group, hints in (("experts", ("expert", "experts")), ("attention", ("attn", "attention", "self", "cross")),
                         ("mixer", ("conv", "mamba", "mixer", "ssm")), ("mlp", ("mlp", "ffn", "feed", "intermediate")),
                         ("embeddings", ("embeddings", "embed", "wte", "wpe", "embed_tokens")),
                         ("lm_head", ("lm_head", "cls", "predictions", "head"))):
        if words & set(hints) or any(h in name for h in hints if len(h) > 4):
            return group
    return "other"


CORE = ("hidden", "q_dim", "kv_dim", "head_dim", "heads", "kv_heads", "inter", "expert_inter", "experts", "vocab",
        "layers", "ffn_adjusted", "conv0", "conv1", "rec0", "rec1", "rec2", "rec0*rec1", "rec0*rec2", "rec1*rec2")


def _symbols(spec, t: dict, cfg) -> dict[str, int]:
    """The values each dimension name takes for this config, as kvplan.config.traits resolves them."""
    from kvplan.config.reader import ConfigReader, text_config
    from kvplan.config.traits import size_table
    from kvplan.model.layers import StateSpec

    text, mt = text_config(cfg.to_dict())
    r = ConfigReader(text, mt)
    r.layer_kinds = tuple(_kind_of(layer) for layer in spec.layers)   # as parse_config sets them
    state = next((x for layer in spec.layers for x in layer if isinstance(x, StateSpec)), None)
    r.state_shape = (state.conv_shape, state.recurrent_shape) if state else None
    size = size_table(r, t, spec.arch.hidden, r.num_heads(), spec.num_layers)
    out = {k: (v() if callable(v) else v) for k, v in size.items() if k in CORE}
    for k, v in text.items():
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            out.setdefault("field:" + k, v)
    return out


def _dims(shapes: list[tuple], syms: list[dict]) -> list | None:
    """Each dimension as a name of `sym` (or k x a name) whose value matches at every config (the default, the
    resized one, then the probes: one structural key changed each), else an int that never changed, else None.
    The probes tell apart a field from a constant equal to it by chance: AXK2's kv_a_layernorm is [kv_lora_rank],
    512, and so is n_routed_experts at the default; only kv_lora_rank 64 shows which it is."""
    out = []
    for ds in zip(*shapes):
        names = [k for k in syms[0] if all(sym.get(k) == d for sym, d in zip(syms, ds))]
        core = [k for k in names if not k.startswith("field:")]
        scaled = [f"{k}*{n}" for n in CORE for k in (2, 3, 4)
                  if all(n in sym and k * sym[n] == d for sym, d in zip(syms, ds))]
        fields = [k for k in names if k.startswith("field:")]
        changes = len(set(ds)) > 1
        if core:
            out.append(core[0])
        elif changes and (scaled or fields):
            out.append((scaled or fields)[0])
        elif not changes:
            out.append(fields[0] if len(fields) == 1 else ds[0])
        elif (root := _root_of_field(ds, syms)) is not None:
            out.append(root)      # Doge's CDMoE router_gate rows: 2 x floor(sqrt(num_experts)) (16,384 -> 256)
        elif (product := _product_of_fields(ds, syms)) is not None:
            out.append(product)   # AXK2's indexer wq_b rows: index_n_heads x index_head_dim (16 x 128)
        elif (grouped := _product_of_sum(ds, syms)) is not None:
            out.append(grouped)   # MLA's kv_b_proj rows: heads x (qk_nope_head_dim + v_head_dim)
        else:
            total = _sum_of_terms(ds, syms)
            if total is None:
                return None
            out.append(total)
    return out


def _root_of_field(ds: tuple, syms: list[dict]) -> str | None:
    """k x floor(sqrt(a field)): modeling_doge.py DogeCDMoE `num_keys = math.floor(math.sqrt(num_experts))`, its
    router_gate nn.Linear(hidden, num_keys * 2)."""
    from math import isqrt

    fields = [k for k in syms[0] if k.startswith("field:") and all(k in sym for sym in syms)]
    for k in (1, 2):
        for a in fields:
            if all(k * isqrt(sym[a]) == d for sym, d in zip(syms, ds)):
                return f"{k}*isqrt:{a}" if k > 1 else f"isqrt:{a}"
    return None


def _product_of_fields(ds: tuple, syms: list[dict]) -> str | None:
    fields = [k for k in syms[0] if k.startswith("field:") and all(k in sym for sym in syms)]
    for i, a in enumerate(fields):
        for b in fields[i:]:
            if all(sym[a] * sym[b] == d for sym, d in zip(syms, ds)):
                return f"{a}*{b}"
    return None


def _product_of_sum(ds: tuple, syms: list[dict]) -> str | None:
    """A field times two fields added: Dots3-Note's kv_b_proj has num_attention_heads x (qk_nope_head_dim +
    v_head_dim) rows, 128 x (128 + 128); tried before `_sum_of_terms`, whose heads x heads + v x nope fits the same
    probes only while heads, nope and v are all 128."""
    fields = [k for k in syms[0] if k.startswith("field:") and all(k in sym for sym in syms)]
    # a factor of 1 (n_group, pretraining_tp) multiplies nothing the probes could tell from a field that is 1
    for a in (k for k in fields if all(sym[k] > 1 for sym in syms)):
        for i, b in enumerate(fields):
            for c in fields[i + 1:]:
                if a not in (b, c) and all(sym[a] * (sym[b] + sym[c]) == d for sym, d in zip(syms, ds)):
                    return f"{a}*({b}+{c})"
    return None


def _sum_of_terms(ds: tuple, syms: list[dict]) -> str | None:
    """A dimension that is two sizes added, one maybe a product of two fields, or three sizes added: CPM-Ant's input embedding has
    vocab_size + prompt_types x prompt_length rows (30,720 + 32 x 32)."""
    terms = {k: tuple(sym[k] for sym in syms) for k in syms[0] if all(k in sym for sym in syms) and "*" not in k}
    fields = [k for k in terms if k.startswith("field:")]
    for i, a in enumerate(fields):
        for b in fields[i:]:   # no factor 1: bos_token_id x kv_lora_rank is kv_lora_rank, a term already
            if min(terms[a] + terms[b]) > 1:
                terms[f"{a}*{b}"] = tuple(x * y for x, y in zip(terms[a], terms[b]))
    names = list(terms)
    # one factor times a sum first: MLA's kv_b_proj is heads x (qk_nope + v) rows, and at Dots3-Note's default
    # (128 heads, 128, 128) heads x heads + v x qk_nope is as many, at every probe too (no probe moves the heads)
    products = [k for k in names if "*" in k]
    for i, a in enumerate(products):
        for b in products[i:]:
            if set(a.split("*")) & set(b.split("*")) and all(x + y == d for x, y, d in zip(terms[a], terms[b], ds)):
                return f"{a}+{b}"
    for i, a in enumerate(names):
        for b in names[i:]:
            if all(x + y == d for x, y, d in zip(terms[a], terms[b], ds)):
                return f"{a}+{b}"
    # RoCBert's map_inputs_layer: hidden + pronunciation_embed_dim + shape_embed_dim (768 + 768 + 512) inputs
    single = [k for k in names if "*" not in k]
    for i, a in enumerate(single):
        for j, b in enumerate(single[i:], i):
            for c in single[j:]:
                if all(x + y + z == d for x, y, z, d in zip(terms[a], terms[b], terms[c], ds)):
                    return f"{a}+{b}+{c}"
    return None


def _extras_at(cfg, model, t: dict):
    """({(scope, name): shape}, spec) of the tensors kvplan's traits leave unexplained at this config."""
    from kvplan.weights.rule import inventory

    spec = _spec(cfg)
    n = spec.num_layers
    layers, top = _truth_tensors(cfg, model, n)
    tensors = inventory(spec.arch)
    per_layer: dict[tuple, set[int]] = defaultdict(set)   # (name, shape) -> layers (Kimi-Linear: q_proj differs)
    for i in range(n):
        left, missed = _unexplained(layers.get(i, {}), [x for x in tensors if x.layer == i])
        if missed:
            raise ValueError(f"kvplan counts tensors of {missed} elements layer {i} does not have")
        for name in left:
            per_layer[(name, layers[i][name])].add(i)
    top_left, missed = _unexplained(top, [x for x in tensors if x.layer < 0])
    if missed:
        raise ValueError("kvplan counts a top-level tensor the model does not have")
    kinds = [_kind_of(layer) for layer in spec.layers]
    moe = [i for i, layer in enumerate(spec.arch.layers) if type(layer.ffn).__name__ == "MoEDims"]
    out = {("top", name): top[name] for name in top_left}
    # a config with per-layer fields sizes each layer kind apart (Dots3-Note's sliding layers: their own heads and
    # ranks), so a tensor equal on all layers at the default is one per kind: q_lora_rank 512 changes the indexed
    # layers' q_a_proj and not the sliding ones'
    own_fields = bool(_text_of(cfg).get("per_layer_config"))
    for (name, shape), where in per_layer.items():
        for part in (_by_kind(where, kinds) if own_fields and _group(name) in ("attention", "mixer", "norms")
                     else _by_mixer(where, kinds) if _group(name) in ("attention", "mixer") else [where]):
            out[(_scope(part, n, set(moe), kinds), name)] = shape
    return out, spec


def _text_of(cfg) -> dict:
    from kvplan.config.reader import text_config

    return text_config(cfg.to_dict())[0]


def _by_kind(where: set[int], kinds: list[str]) -> list[set[int]]:
    """The layers of one tensor, one set per layer kind."""
    out: dict[str, set[int]] = defaultdict(set)
    for i in where:
        out[kinds[i]].add(i)
    return [out[k] for k in sorted(out)]


def _by_mixer(where: set[int], kinds: list[str]) -> list[set[int]]:
    """The layers of one attention or mixer tensor, split where they hold attention on some and a recurrent state
    only on others (an MLP is the same on both and stays whole):
    Bailing-hybrid's o_proj is [hidden, heads x v_head_dim] on its MLA layers and [hidden, linear_num_heads x
    linear_head_dim] on its KDA layers, equal at the default (4,096) and not once either changes."""
    attends = {i for i in where if any(p.startswith("attn") for p in kinds[i].split("+"))}
    return [part for part in (attends, where - attends) if part] if attends and attends != where else [where]


def _kind_of(layer: tuple) -> str:
    from kvplan.config.layout import layer_kind as _kind

    return _kind(layer)


def _scope(where: set[int], n: int, moe: set[int], kinds: list[str]) -> str:
    if len(where) == n:
        return "all"
    if where == {n - 1}:
        return "last"   # GPT-NeoX-Japanese: the last layer's dense_bias
    # the MoE layers before the first / the rest: at AFMoE's default num_dense_layers 1 they are the same layers,
    # and at 2 transformers builds 18,699,267,968 parameters where expert_bias read on not_first gives 64 more
    if moe and where == moe:
        return "moe"
    if moe and where == set(range(n)) - moe:
        return "dense"
    if where == {0}:
        return "first"
    if where == set(range(1, n)):
        return "not_first"
    for kind in set(kinds):
        if where == {i for i, k in enumerate(kinds) if k == kind}:
            return "kind:" + kind
    if where == {i for i, k in enumerate(kinds) if any(p.startswith("attn") for p in k.split("+"))}:
        return "attention"   # LFM3: on every attention layer, sliding or full
    raise ValueError(f"a tensor on layers {sorted(where)[:8]} follows no pattern kvplan reads")


# Ways to read a family whose tensors the dims do not all describe, tried in order: the dims' tensors where
# they match and the rest as extras; then the MLP, the mixer, the top level (embeddings, final norm, lm_head),
# or all of them, as the family's own tensors.
# Each with attention on every layer, then only on the layers that cache K and V (hybrids: Kimi-Linear's KDA
# layers have q_proj too, but not attention's).
VARIANTS = tuple({**v, **n, **f, "attention": where} for f in ({}, {"ffn_on": "blocks"}) for n in ({}, {"norms": 0})
                 for where in ("all", "cache") for v in (
    {}, {"ffn_weights": False}, {"mixer_weights": False}, {"top": "extras"},
    {"top": "extras", "ffn_weights": False}, {"top": "extras", "mixer_weights": False},
    {"mixer_weights": False, "ffn_weights": False},
    {"top": "extras", "mixer_weights": False, "ffn_weights": False}))


def _with_extras(cls_cfg, base: dict, cfg, model, t: dict, resized_build=None) -> dict:
    """Traits plus the unexplained tensors, written in the config's sizes, checked at a resized config: the
    first of VARIANTS that explains every tensor at both sizes."""
    changes = resized(cls_cfg, cfg)
    cfg1, model1 = resized_build or _build(cls_cfg, **base, **changes)
    first_error = None
    plain_norms = t.get("norms", 2)
    # every int field probed first (Zaya's router is [router_hidden_size, ...], 256 as kv_dim is at the default);
    # where some probe cannot be explained, the sweep's keys only, and gen_field_probes records the key fixed
    for every, variant in ((every, variant) for every in (True, False) for variant in VARIANTS):
        probes = _probes_for(cls_cfg, base, cfg, every)
        trial = {k: v for k, v in t.items() if k not in ("extras", "attention", "top", "mixer_weights",
                                                          "ffn_weights", "ffn_on")}
        trial["norms"] = plain_norms
        trial.update(variant)
        t.clear()
        t.update(trial)   # kvplan reads the traits through the patched table, which holds `t`
        try:
            return _extras_checked(cfg, model, cfg1, model1, changes, t, probes)
        except Exception as exc:  # noqa: BLE001
            first_error = first_error or exc
            if DEBUG:
                print(f"  {variant}: {type(exc).__name__}: {exc}", file=sys.stderr)
    raise first_error


_PROBES: dict = {}


def _probes_for(cls_cfg, base: dict, cfg, every: bool) -> "Probes":
    """One Probes per family and reach, built once and shared by the variants."""
    if _PROBES.get("cls") is not cls_cfg:
        _PROBES.clear()
        _PROBES["cls"] = cls_cfg
    if every not in _PROBES:
        _PROBES[every] = Probes(cls_cfg, base, cfg, every)
    return _PROBES[every]


class Probes:
    """Builds of the default with one integer key changed (tools/gen_field_probes.py `changed`), made once each
    and kept: the family's structural keys (the conformance sweep's `keys`) up front, and, on demand, any other
    field whose value an extra's unchanged dimension equals (Apertus's act_fn alpha [1] is not bos_token_id 1;
    CPM-Ant's prompt table is prompt_types x prompt_length). A value the class cannot build is no probe: no
    checkpoint has it either."""

    def __init__(self, cls_cfg, base: dict, cfg, every: bool = False):
        from tools.gen_field_probes import SIZES, probed_keys

        self.cls_cfg, self.base, self.values, self.built = cls_cfg, base, cfg.to_dict(), {}
        keys = json.loads((ROOT / "kvplan" / "data" / "conformance.json").read_text())["families"].get(
            getattr(cfg, "model_type", ""), {}).get("keys", [])
        if every:   # the keys gen_field_probes changes: the sweep's and every int of the default's to_dict()
            keys = probed_keys(keys, self.values)
        # num_key_value_heads is probed here though the field probes leave it to the sweep: at the default it often
        # equals the head count, and Helium's k/v projections read [q_dim, hidden] there were [kv_dim, hidden]
        # (HeliumConfig at 10 KV heads of 20: 2,015,357,440 parameters, not 2,172,643,840)
        self.tried = set(SIZES)
        for key in keys:
            self.add(key)
        kv = self.values.get("num_key_value_heads")
        if isinstance(kv, int) and not isinstance(kv, bool) and kv > 1 and kv % 2 == 0 and \
                kv == self.values.get("num_attention_heads"):   # halved: more KV heads than heads cannot build
            self.add("num_key_value_heads", kv // 2)

    def add(self, key: str, value=None) -> bool:
        from tools.gen_field_probes import changed

        if key in self.tried and value is None:
            return False
        self.tried.add(key)
        if value is None:
            value = changed(self.values.get(key))   # a 1 doubled too (changed)
        if not isinstance(value, int) or isinstance(value, bool):   # sizes only: a flag or a layer list switches
            return False                                              # tensors, it sizes none
        try:
            self.built[key] = _build(self.cls_cfg, **self.base, **{key: value})
        except Exception:  # noqa: BLE001
            return False
        return True


def _extras_checked(cfg, model, cfg1, model1, changes: dict, t: dict, probes=None) -> dict:
    from kvplan.weights.rule import param_count

    if t.get("attention") == "all":
        del t["attention"]
    extras0, spec0 = _extras_at(cfg, model, t)
    extras1, spec1 = _extras_at(cfg1, model1, t)
    if set(extras0) != set(extras1):
        raise ValueError(f"the unexplained tensors differ at a resized config ({changes})")
    base_seen = [(extras0, _symbols(spec0, t, cfg)), (extras1, _symbols(spec1, t, cfg1))]
    while True:
        seen = base_seen + _probed(probes, t, set(extras0))
        unchanged = {d[0] for (scope, name) in extras0 for d in zip(*(e[(scope, name)] for e, _ in seen))
                     if len(set(d)) == 1}
        fields = {k[len("field:"):] for k, v in base_seen[0][1].items() if k.startswith("field:") and v in unchanged}
        if probes is None or not any([probes.add(k) for k in sorted(fields)]):
            break
    syms = [sym for _, sym in seen]
    listed = []
    for (scope, name), shape in sorted(extras0.items()):
        dims = _dims([extras[(scope, name)] for extras, _ in seen], syms)
        if dims is None:
            raise ValueError(f"{name} {shape} is sized by nothing kvplan reads")
        listed.append({"scope": scope, "name": name, "dims": dims, "group": _group(name)})
    t["extras"] = listed
    for c, m in ((cfg, model), (cfg1, model1)):
        spec = _spec(c)
        left = _total(c, m) - param_count(spec.arch).total
        if left:
            raise ValueError(f"{left:+,} parameters unexplained with the extras")
    _check_published(_text_type(cfg))
    t["checked_at"] = "default and resized"
    return t


def _probed(probes, t: dict, names: set) -> list[tuple]:
    """(extras, symbols) at each probe whose unexplained tensors are the default's (a key that switches tensors on
    or off is no size to read; kvplan cannot read a probe at all: gen_field_probes records the key fixed)."""
    out = []
    for cfg_p, model_p in (probes.built.values() if probes is not None else ()):
        try:
            extras_p, spec_p = _extras_at(cfg_p, model_p, t)
        except Exception:  # noqa: BLE001
            continue
        extras_p = _rekeyed(extras_p, names)
        if extras_p is not None:
            out.append((extras_p, _symbols(spec_p, t, cfg_p)))
    return out


def _rekeyed(extras_p: dict, names: set) -> dict | None:
    """A probe's unexplained tensors keyed as the default's, or None where they are other tensors. Two scopes of
    the default can meet at a probe: Kimi-Linear's MLA q_proj (heads x (qk_nope + qk_rope) rows) and its KDA
    q_proj (linear_num_heads x linear_head_dim) are one [4096, hidden] on every layer at qk_nope_head_dim 64,
    which still sizes each of them."""
    if set(extras_p) == names:
        return extras_p
    out = {}
    for scope, name in names:
        found = extras_p.get((scope, name), extras_p.get(("all", name)))
        if found is None:
            return None
        out[(scope, name)] = found
    used = {k for k in extras_p if k in names} | {("all", n) for _, n in names if ("all", n) in extras_p}
    return out if used == set(extras_p) else None


def _text_type(cfg) -> str:
    from kvplan.config.reader import text_config

    return text_config(cfg.to_dict())[1]


def _published(text_type: str) -> list[tuple[str, dict]]:
    """The bundled published configs (model_configs/) whose language model is of this type."""
    from kvplan.config.reader import text_config

    out = []
    for path in sorted((ROOT / "model_configs").glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and text_config(data)[1] == text_type:
            out.append((path.stem, data))
    return out


def _check_published(text_type: str) -> None:
    """Traits read off the default and a resized config must hold on the published configs kvplan ships too
    (Gemma-4-26B-A4B turns on enable_moe_block, which the default leaves off): each built on meta from its
    language model's config, as tests/test_weights.py does."""
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    from kvplan.config import verified
    from kvplan.config.parse import parse_config
    from kvplan.config.reader import text_config
    from kvplan.weights.rule import param_count

    for name, data in _published(text_type):
        text, _ = text_config(data)
        text = {k: v for k, v in text.items() if k != "quantization_config"}
        cfg = CONFIG_MAPPING[text_type].from_dict({**text, "model_type": text_type})
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        verified.ENFORCE = False
        arch = parse_config({k: v for k, v in data.items() if k != "quantization_config"}).arch
        if arch is None or param_count(arch).total != sum(p.numel() for p in model.parameters()):
            raise ValueError(f"the traits do not count the published {name} exactly")


def _base(mt: str) -> dict:
    """Settings the causal LM needs: BERT-style families are decoders only with is_decoder true."""
    from kvplan.config.parse import ENCODER_ONLY

    return {"is_decoder": True} if mt in ENCODER_ONLY else {}


# traits a bool key of the class can switch off or on by itself (OPT's do_layer_norm_before false: no final
# LayerNorm); read off the model built with the key flipped, as traits_of reads the default
OVERRIDABLE = ("final_norm", "norms", "norm_bias", "lm_head_bias")


def family(mt: str) -> dict:
    """The family's traits (`_family`), then what each bool key of its class switches (`_conditional`)."""
    import kvplan.config.traits as ct

    captured: dict = {}
    t = _family(mt, captured)
    if "unverified" in t or "build" not in captured:
        return t
    cls_cfg, base, cfg, model = captured["build"]
    table = {mt: t, _text_type(cfg): t}
    original = ct._table
    ct._table = lambda: table  # type: ignore[assignment]
    try:
        _conditional(cls_cfg, base, cfg, model, t, table)
    finally:
        ct._table = original
    return t


def _counts_exact(builds) -> bool:
    from kvplan.weights.rule import param_count

    try:
        return all(param_count(_spec(c).arch).total == _total(c, m) for c, m in builds)
    except Exception:  # noqa: BLE001 - kvplan cannot count it: not exact
        return False


def _conditional(cls_cfg, base: dict, cfg, model, t: dict, table: dict) -> None:
    """Tensors and traits a bool key of the family's class switches, where kvplan's count does not follow it yet
    (tools/gen_field_probes.py found it `fixed`): the model is built with the key flipped at the default and the
    resized config; traits_of's OVERRIDABLE traits that change become an override ({"when": {key: value}, "set":
    {...}}), the tensors left unexplained that the default lacks become extras with `when` {key: flipped}, and the
    default's extras the flipped model lacks get `when` {key: default}. Kept only where kvplan's count then equals
    transformers' at both flipped configs and still at the default and resized one. Helium's attention_bias true:
    q/k/v biases [q_dim] on every layer; Seed-OSS's attention_out_bias: o_proj's [hidden]; OPT's
    _remove_final_layer_norm: final_norm false. A conditional tensor with a constant dimension (Doge's is_moe router
    [256, hidden], 2 x sqrt(num_experts)) is sized by nothing kvplan reads, so the key stays fixed."""
    keys = json.loads((ROOT / "kvplan" / "data" / "conformance.json").read_text())["families"].get(
        getattr(cfg, "model_type", ""), {}).get("keys", [])
    plain = traits_of(cfg, model)
    values = cfg.to_dict()
    default_builds = [(cfg, model)]
    try:
        default_builds.append(_build(cls_cfg, **base, **resized(cls_cfg, cfg)))
    except Exception:  # noqa: BLE001
        pass
    from tools.gen_field_probes import probed_keys

    # every bool gen_field_probes flips, not the sweep's keys only: a flag outside them switches tensors too
    for key in probed_keys(keys, values):
        value = values.get(key)
        if not isinstance(value, bool):
            continue
        try:
            flipped = [_build(cls_cfg, **base, **{key: not value}),
                       _build(cls_cfg, **base, **resized(cls_cfg, cfg), **{key: not value})]
        except Exception:  # noqa: BLE001 - the class cannot build it flipped: no checkpoint has it either
            continue
        if _counts_exact(flipped):
            continue
        trial = json.loads(json.dumps(t))
        trial.setdefault("flag_defaults", {})[key] = value
        after = traits_of(*flipped[0])
        sets = {k: after.get(k) for k in OVERRIDABLE if after.get(k) != plain.get(k)}
        if sets:
            trial.setdefault("overrides", []).append({"when": {key: not value}, "set": sets})
        bare = {**trial, "extras": []}
        table.update(dict.fromkeys(table, bare))
        try:
            seen = []
            for c, m in flipped:
                found, spec = _extras_at(c, m, bare)
                seen.append((found, _symbols(spec, bare, c)))
        except Exception as exc:  # noqa: BLE001 - kvplan counts a tensor the flipped model lacks
            if DEBUG:
                print(f"  {key}: {type(exc).__name__}: {exc}", file=sys.stderr)
            table.update(dict.fromkeys(table, t))
            continue
        had = {(e["scope"], e["name"]) for e in t.get("extras", ())}
        now = set(seen[0][0])
        ok = set(seen[1][0]) == now
        # the flipped model again with each integer key of the class changed, as `_with_extras` sizes the
        # default's extras: Hunyuan-V4's kv_a_proj_with_mqa.bias [576] is kv_lora_rank + qk_rope_head_dim, not 576
        probes = Probes(cls_cfg, {**base, key: not value}, flipped[0][0])
        for c, m in probes.built.values():
            try:
                found, spec = _extras_at(c, m, bare)
            except Exception:  # noqa: BLE001
                continue
            if set(found) == now:
                seen.append((found, _symbols(spec, bare, c)))
        new = _unswapped(sorted(now - had), seen, _shapes(cfg, model), _shapes(*flipped[0]), t)
        # an extra another key switches on is absent here for that reason, not this one's; one the flipped model
        # still has was only paired with a same-size tensor of kvplan's (`_unswapped`)
        before, after = _shapes(cfg, model), _shapes(*flipped[0])
        # on as many layers as before: Doge's post_attention_residual; Gemma-4's v_proj leaves the full layers only
        gone = {n: shapes for n, shapes in after.items() if before.get(n) == shapes}
        for e in t.get("extras", ()):
            if (e["scope"], e["name"]) not in now and not e.get("when") and e["name"] in gone:
                twin = next((k for k in new if k[0] == e["scope"] and seen[0][0][k] in gone[e["name"]]), None)
                if twin is not None:
                    new.remove(twin)
        extras = [({**e, "when": {key: value}} if (e["scope"], e["name"]) not in now and not e.get("when")
                   and e["name"] not in gone else e) for e in t.get("extras", ())]
        for scope, name in new:
            dims = _dims([found[(scope, name)] for found, _ in seen], [sym for _, sym in seen]) if ok else None
            # a constant no probe moved is one only where there were probes to move it
            if dims is None or (len(seen) < 3 and any(isinstance(d, int) and d > 1 for d in dims)):
                ok = False
                break
            extras.append({"scope": scope, "name": name, "dims": dims, "group": _group(name), "when": {key: not value}})
        if extras:
            trial["extras"] = extras
        table.update(dict.fromkeys(table, trial))
        if ok and _counts_exact(flipped) and _counts_exact(default_builds):
            t.clear()
            t.update(trial)
        elif DEBUG:
            print(f"  {key}: not explained by conditional extras", file=sys.stderr)
        table.update(dict.fromkeys(table, t))


def _shapes(cfg, model) -> dict[str, list]:
    """{name within its layer (or top-level name): its shapes, one per layer that has it} of a model's parameters."""
    out: dict[str, list] = defaultdict(list)
    for name, p in _text_params(cfg, model):
        m = LAYER.match(name)
        out[m.group("rest") if m else name].append(tuple(p.shape))
    return {k: sorted(v) for k, v in out.items()}


def _unswapped(new: list, seen: list, before: dict, after: dict, t: dict) -> list:
    """The tensors the flipped key adds, by name: the size matcher may leave a tensor both models have (Doge's
    post_attention_residual [hidden]) unexplained and pair kvplan's new o-bias with it, leaving the new
    self_attn.o_proj.bias [hidden] explained. A name the default already has is swapped for a new name of the
    same shape that kvplan's own tensors took, or dropped with the default extra it stands for."""
    out, taken = [], set()
    for scope, name in new:
        if name not in before:
            out.append((scope, name))
            continue
        shape = seen[0][0][(scope, name)]
        other = next((n for n, shapes in sorted(after.items()) if n not in before and shape in shapes
                      and n not in taken and all(x[1] != n for x in new)), None)
        if other is not None:
            taken.add(other)
            for found, _ in seen:   # the same tensor under its own name
                found[(scope, other)] = found.pop((scope, name))
            out.append((scope, other))
        elif not any(e["name"] == name and e["scope"] == scope for e in t.get("extras", ())):
            out.append((scope, name))
    return out


def _family(mt: str, captured: dict) -> dict:
    from transformers import CONFIG_MAPPING

    import kvplan.config.traits as ct

    cls_cfg = CONFIG_MAPPING[mt]
    base = _base(mt)
    try:
        cfg, model = _build(cls_cfg, **base)
    except Exception:  # noqa: BLE001 - defaults that cannot build: the conformance sweep's repairs, in its order
        from validation.conformance import REPAIRS

        for fix in REPAIRS:
            try:
                cfg, model = _build(cls_cfg, **base, **fix)
            except Exception:  # noqa: BLE001
                continue
            base = {**base, **fix}
            break
        else:
            raise
    t = traits_of(cfg, model)
    _flag_driven(cls_cfg, cfg, t)
    captured["build"] = (cls_cfg, base, cfg, model)
    table = {mt: t, _text_type(cfg): t}  # kvplan looks a wrapper's traits up by its language model's type
    original = ct._table
    ct._table = lambda: table  # type: ignore[assignment]
    try:
        try:
            extra, n = _layer_extra(cfg, model, t)
        except ValueError as exc:  # kvplan cannot count it with the plain traits (CTRL: no intermediate size)
            extra, n, plain_error = None, None, exc
        changes = resized(cls_cfg, cfg)
        try:
            built1 = _build(cls_cfg, **base, **changes)
        except Exception as exc:  # noqa: BLE001
            if extra:
                return {"unverified": f"{extra:+,} parameters at the default config that the traits do not explain "
                                      f"and the resized config does not build ({type(exc).__name__})"}
            t["checked_at"] = f"default only (the resized config does not build: {type(exc).__name__})"
            return t
        if extra == 0 and not _layer_extra(built1[0], built1[1], t)[0]:
            try:
                _check_published(_text_type(cfg))
                t["checked_at"] = "default and resized"
                return t
            except Exception:  # noqa: BLE001 - the extras variants may still explain the published ones
                pass
        plain = dict(t)
        try:
            return _with_extras(cls_cfg, base, cfg, model, t, built1)
        except Exception as exc:  # noqa: BLE001 - a constant per layer may still explain it
            why = f"{type(exc).__name__}: {str(exc)[:160]}"
        t.clear()
        t.update(plain)
        if extra is None:
            return {"unverified": f"{type(plain_error).__name__}: {str(plain_error)[:120]} ({why})"}
        if extra and not (extra % n == 0 and extra // n < 1024):
            return {"unverified": f"{extra:+,} parameters at the default config that the traits do not "
                                  f"explain ({why})"}
        if extra:
            t["layer_extra"] = extra // n
        left, _ = _layer_extra(built1[0], built1[1], t)
        if left:
            return {"unverified": f"{left:+,} parameters at a resized config ({changes}) the traits do not explain "
                                  f"({why})"}
        try:
            _check_published(_text_type(cfg))
        except ValueError as exc:
            return {"unverified": f"{exc} ({why})"}
        t["checked_at"] = "default and resized"
        return t
    finally:
        ct._table = original


def main(argv: list[str]) -> int:
    import transformers
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from kvplan.config.arch import _BUILDERS

    transformers.logging.set_verbosity_error()
    old = json.loads(OUT.read_text())["families"] if OUT.exists() and argv else {}
    types = argv or sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    out = dict(old)
    for mt in types:
        if mt in _BUILDERS:
            continue
        try:
            out[mt] = family(mt)
            text = _text_type(CONFIG_MAPPING[mt](**_base(mt)))
            # Fuyu's text model is Persimmon, which has its own entry
            if text != mt and text not in _BUILDERS and "unverified" not in out[mt] and \
                    text not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
                out[text] = out[mt]   # Mllama's text model: mllama_text_model
        except Exception as exc:  # noqa: BLE001
            out[mt] = {"unverified": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"}
        print(f"{mt:28s} {'ok' if 'unverified' not in out[mt] else out[mt]['unverified'][:100]}", flush=True)
    OUT.write_text(json.dumps({"transformers": transformers.__version__, "families": dict(sorted(out.items()))},
                              indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
