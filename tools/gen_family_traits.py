"""Regenerate kvplan/data/family_traits.json: how each transformers family wires its blocks, read off its modules.

For every causal-LM family without a hand-written rule in kvplan.config_dims, build the model on the meta device at
its config class's defaults and read, from the parameter names and shapes, what no config field says: gated or
plain MLP, fused QKV, which projections have biases (and whether a flag decides it: built again with the flag
flipped), q/k norms per head or per projection, norms per block and their biases, routers and shared experts,
learned-position offsets, constant learned scalars. Then count the same config with kvplan and those traits, and
again at a resized config (hidden, intermediate, vocabulary changed); a family's traits are kept only where both
counts equal `sum(p.numel() for p in model.parameters())`. Otherwise the entry says why (kvplan then refuses).

Run: python tools/gen_family_traits.py [model_type ...]   (needs torch and transformers; ~10 minutes for all)
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
QK_NORM = re.compile(r"(q_norm|q_layernorm|query_layernorm|k_norm|k_layernorm|key_layernorm)\.weight$")
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
    if attn_layer is None:
        raise ValueError("no attention block found by name")
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
    t["qk_norm"] = "none" if not qn else ("head" if qn[0] == (head_dim,) else "proj")
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
    if positions:
        limit = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)
        t["positions_offset"] = positions[0][0] - limit
    sizes = [getattr(text, k, None) for k in ("intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim")]
    if not any(isinstance(v, int) for v in sizes):  # Bloom, CodeGen, GPT-Neo: the MLP is 4 x hidden
        up = [s for n, s in attn_layer if UP_DOWN.search(n) and n.endswith("weight") and s[-1] == hidden]
        if up:
            t["mlp_ratio"] = up[0][0] / hidden
    return t


def _flag_driven(cls_cfg, cfg, t: dict) -> None:
    """Bias traits that a config flag switches: build with the flag flipped and see them follow."""
    for flags, keys in ((BIAS_FLAGS, ("q", "k", "v", "o")), (MLP_BIAS_FLAGS, ("mlp",))):
        for flag in flags:
            value = getattr(cfg, flag, None)
            if not isinstance(value, bool):
                continue
            try:
                cfg2, model2 = _build(cls_cfg, **{flag: not value})
                t2 = traits_of(cfg2, model2)
            except Exception:  # noqa: BLE001 - a flag the class cannot flip decides nothing here
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


def _layer_extra(cfg, model, t: dict) -> int:
    """Parameters kvplan's count with these traits does not explain, per layer (must be a constant)."""
    from kvplan import verified
    from kvplan.config import parse_config
    from kvplan.weights import param_count

    verified.ENFORCE = False
    spec = parse_config(cfg.to_dict())
    if spec.arch is None:
        raise ValueError(spec.arch_error)
    truth = sum(p.numel() for p in model.parameters())
    return truth - param_count(spec.arch).total, spec.num_layers


def resized(cls_cfg, cfg) -> dict:
    """A second size for the check: hidden x 2 (keeps heads dividing it), intermediate sizes x 2, vocab + 64."""
    out = {}
    for key in ("hidden_size", "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
                "n_embd", "d_model", "n_inner", "ffn_dim"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out[key] = value * 2
    if isinstance(getattr(cfg, "vocab_size", None), int):
        out["vocab_size"] = cfg.vocab_size + 64
    return out


def family(mt: str) -> dict:
    import kvplan.config_traits as ct
    from transformers import CONFIG_MAPPING

    cls_cfg = CONFIG_MAPPING[mt]
    cfg, model = _build(cls_cfg)
    t = traits_of(cfg, model)
    _flag_driven(cls_cfg, cfg, t)
    table = {mt: t}
    original = ct._table
    ct._table = lambda: table  # type: ignore[assignment]
    try:
        extra, n = _layer_extra(cfg, model, t)
        if extra and extra % n == 0 and extra // n < 1024:
            t["layer_extra"] = extra // n
        elif extra:
            return {"unverified": f"{extra:+,} parameters at the default config that the traits do not explain"}
        changes = resized(cls_cfg, cfg)
        try:
            cfg1, model1 = _build(cls_cfg, **changes)
        except Exception as exc:  # noqa: BLE001
            t["checked_at"] = f"default only (the resized config does not build: {type(exc).__name__})"
            return t
        left, _ = _layer_extra(cfg1, model1, t)
        if left:
            return {"unverified": f"{left:+,} parameters at a resized config ({changes}) the traits do not explain"}
        t["checked_at"] = "default and resized"
        return t
    finally:
        ct._table = original


def main(argv: list[str]) -> int:
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from kvplan.config_dims import _BUILDERS

    transformers.logging.set_verbosity_error()
    old = json.loads(OUT.read_text())["families"] if OUT.exists() and argv else {}
    types = argv or sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    out = dict(old)
    for mt in types:
        if mt in _BUILDERS:
            continue
        try:
            out[mt] = family(mt)
        except Exception as exc:  # noqa: BLE001
            out[mt] = {"unverified": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"}
        print(f"{mt:28s} {'ok' if 'unverified' not in out[mt] else out[mt]['unverified'][:100]}", flush=True)
    OUT.write_text(json.dumps({"transformers": transformers.__version__, "families": dict(sorted(out.items()))},
                              indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
