"""The weight shape (`ModelSpec.arch`, an `ArchShape` of `kvplan.model.arch`), read from a config.json.

`read_arch` is called by `kvplan.config.parse` with the same `ConfigReader` that read the cache layout: every size
the parameter count needs, under kvplan's own names, following what transformers 5.24's modeling code builds from the
same file (its class defaults for absent keys, its per-family rules for which layers are MoE, which projections carry
biases). Families without a hand-written builder here get their structure from their traits (`traits`); Gemma 3n / 4
are built by `gemma`, the Inkling families by `inkling`, Dory and HRM-Text (blocks run more than once) by `looped`;
towers come from `towers`, `quantization_config` from `quant`; `kvplan.weights` does the arithmetic. Nothing here
imports transformers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..dtypes import BFLOAT16, DType
from ..errors import ConfigError
from ..model.arch import (ArchShape, AttentionDims, DeltaNetDims, EagleFc, LayerDims, Mamba2Dims, MambaDims, MLPDims,
                          MoEDims, QuantDims, interned)
from . import gemma, inkling, looped, recurrent
from .deepseek_v4 import deepseek_v4
from .quant import parse_quant
from .reader import (EXPERT_KEYS, HEAD_DIM_KEYS, HEAD_KEYS, INTERMEDIATE_KEYS, KV_HEAD_KEYS, LAYER_KEYS, MTP_FAMILIES,
                     MTP_KEYS, VOCAB_KEYS, ConfigReader, check_float, check_int, config_dtype, multimodal)
from .state import nas_attention
from .towers import Towers, read_towers, vit_size
from .traits import body as traited_body
from .traits import layers as traited_layers
from .traits import effective, holds, traits_for, unexplained


def _int(key: str, value: Any, minimum: int = 1) -> int:
    return check_int(key, value, minimum=minimum)


@dataclass(frozen=True)
class _Core:
    hidden: int
    layers: int
    heads: int | None


def read_arch(f: ConfigReader, data: Mapping[str, Any], text: Mapping[str, Any]) -> ArchShape:
    """The weight-relevant shape, read by the same reader that read the cache layout (`kvplan.config`).

    Multimodal wrappers (gemma3, llama4) are unwrapped to their language model; the vision tower and projector
    are counted apart (`towers`) where kvplan.config.towers has their rule.
    """
    model_type = f.model_type
    notes: list[str] = []
    builder = _BUILDERS.get(f.family)
    traits = traits_for(f.family) if builder is None else None
    if traits is not None:
        builder = _traited
    elif builder is None and (why := unexplained(f.family)):
        # transformers has the family and its modules were read: a count they do not explain is no estimate
        raise ConfigError(f"kvplan's weight rule does not explain model_type {model_type!r} as transformers 5.24 "
                          f"builds it ({why[:200]}), so its parameters are not counted", field="model_type")
    elif builder is None:
        notes.append(f"model_type {model_type!r} has no dedicated rule: counted as a llama-like decoder "
                     "(gated MLP, RMSNorm, no biases unless the config says so)")
        builder = _generic
    hidden = f.hidden_size()
    heads = f.num_heads() if f.first(HEAD_KEYS) or f.overrides.num_heads else None  # Mamba has none
    # Nemotron-H gives no layer count: its pattern has one entry per layer, as the cache read it
    n = len(f.layer_kinds) if f.layer_kinds and f.first(LAYER_KEYS) is None and not f.overrides.num_layers \
        else f.num_layers()
    core = _Core(hidden, n, heads)
    body = builder(f, core, notes)
    tied = f.get("tie_word_embeddings") if body.tied is None else body.tied
    if body.tied is None and multimodal(data) and isinstance(data.get("tie_word_embeddings"), bool):
        # a wrapper's own flag decides: transformers 5.24 ties what `self.config.tie_word_embeddings` says of the
        # model it builds (modeling_utils.get_expanded_tied_weights_keys), the wrapper's config for a
        # ...ForConditionalGeneration (MOSS-Transcribe-Diarize: True over its Qwen3 text config's False)
        tied = data["tie_word_embeddings"]
    if not isinstance(tied, bool):
        tied = False
        notes.append("config does not say whether lm_head is tied to the embeddings: counted separately")
    mtp = f.first(MTP_KEYS)
    wrapper = data.get("model_type") if isinstance(data.get("model_type"), str) else None
    towers = read_towers(data, wrapper, hidden) if multimodal(data) else None
    if isinstance(towers, str):
        notes.append(f"language model only: {towers}")
    quant = parse_quant(_quant_config(f, data.get("quantization_config", text.get("quantization_config"))), notes)
    draft_vocab = _draft_vocab(data)
    return interned(ArchShape(
        model_type=model_type, hidden=hidden, vocab=f.need_int(VOCAB_KEYS, "vocabulary size"),
        layers=tuple(body.layers), dtype=_dtype(text, quant, notes), tied_embeddings=tied,
        norm_bias=body.norm_bias, lm_head_bias=body.lm_head_bias, learned_positions=body.positions,
        mtp_layers=_mtp_layers(f, mtp),
        mtp_unloaded=_unloaded_mtp(f),
        quant=quant, notes=tuple(notes), layer_extra=body.layer_extra, final_norm=body.final_norm,
        layer_buffers=body.layer_buffers,
        extra=body.extra, top_dims=body.top_dims, towers_missing=towers if isinstance(towers, str) else None,
        towers=tuple((c, n) for c, n in (("vision", towers.vision), ("audio", towers.audio),
                                          ("projector", towers.projector)) if n)
        if isinstance(towers, Towers) else (),
        image_tokens=(towers.image_tokens, towers.image_span) if isinstance(towers, Towers) else (0, 0),
        vit=vit_size(data) if multimodal(data) else None,
        draft_vocab=draft_vocab,
        eagle_fc=_eagle_fc(data, hidden) if draft_vocab else None,
        embed_dim=_embed_dim(f, hidden),
    ))


def _embed_dim(f: ConfigReader, hidden: int) -> int:
    """OPT's word_embed_proj_dim (OPTConfig; defaults to hidden): facebook/opt-350m's 512 of hidden 1,024 makes
    embed_tokens [50,272, 512] and adds project_in / project_out [1,024 x 512] each, 331,196,416 parameters in
    transformers 5.24 (355,887,104 if the table were [vocab, hidden]); 0 where it is hidden or absent."""
    value = f.opt_int("word_embed_proj_dim") if f.family == "opt" else None
    return value if value is not None and value != hidden else 0


def _quant_config(f: ConfigReader, qc: Any) -> Any:
    """The quantization_config as the family's config class leaves it: DeepseekV4Config.__post_init__ moves a
    top-level `expert_dtype` (DeepSeek-V4-Flash's "fp4") into it unless it names one already."""
    if f.family == "deepseek_v4" and isinstance(qc, Mapping) and "expert_dtype" not in qc \
            and f.get("expert_dtype") is not None:
        return {**qc, "expert_dtype": f.get("expert_dtype")}
    return qc


def _mtp_layers(f: ConfigReader, key) -> int:
    """MTP layers the checkpoint holds past the model's own. Qwen3-Next's configs name none, yet both published
    checkpoints carry one (`mtp.fc`, `mtp.layers.0.*`: 1,650,471,424 parameters in Qwen3-Next-80B-A3B-Instruct's
    tensor table) and vLLM 0.33 drafts with it: qwen3_next_mtp.py Qwen3NextMultiTokenPredictor.__init__
    `num_mtp_layers = getattr(config, "num_nextn_predict_layers", 1)` (qwen3_next.py maps `mtp.` to None for the
    main model)."""
    if key and f.family in MTP_FAMILIES:
        return f.int_(*key, minimum=0)
    return 1 if f.family == "qwen3_next" else 0


def _unloaded_mtp(f: ConfigReader) -> str:
    """MiniMax-M2 / M2.5 declare use_mtp with num_mtp_modules 3 of mtp_transformer_layers 1 each (layers 62-64 by
    their numbering), and no engine holds them: vLLM 0.33's minimax_m2.py maps `layers.62.` .. `layers.64.` to
    nothing (hf_to_vllm_mapper) and has no MiniMax-M2 drafter (config/speculative.py lists minimax_m3_mtp only),
    SGLang 0.5.23's minimax_m2.py skips them (get_spec_layer_idx_from_weight_name), and the published checkpoint
    holds none (hf-mem's 230,121,630,720 B are the model without them, model_configs/checkpoints/). So they cost no
    plan anything; `--speculative mtp` says why it cannot draft with them."""
    if f.family != "minimax_m2" or not f.has("num_mtp_modules"):
        return ""
    modules = f.opt_int("num_mtp_modules", minimum=0) or 0
    per_module = f.opt_int("mtp_transformer_layers", minimum=0, default=1) or 0
    if not (f.flag("use_mtp", True) and modules and per_module):
        return ""
    return (f"{modules} MTP module(s) of {per_module} layer(s) each are declared (num_mtp_modules, "
            "mtp_transformer_layers), but vLLM 0.33 and SGLang 0.5.23 skip them at load and have no MiniMax-M2 MTP "
            "drafter, and the published checkpoint holds none")


def _draft_vocab(data: Mapping[str, Any]) -> int:
    """An EAGLE-3 head's own output vocabulary (`draft_vocab_size`, with a d2t map back to the target's):
    yuhuili's head for Llama-3.1-8B predicts 32,000 of its 128,256 tokens; 0 for any other model."""
    arch = data.get("architectures")
    value = data.get("draft_vocab_size")
    if not (isinstance(arch, list) and any(isinstance(a, str) and "Eagle" in a for a in arch)):
        return 0
    return _positive(value, 0)


def _positive(value: Any, default: int) -> int:
    """A positive whole number a head's config sets, or `default` where it sets none (or not a number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _eagle_fc(data: Mapping[str, Any], hidden: int) -> EagleFc:
    """An EAGLE-3 head's fc as vLLM 0.33 and SGLang 0.5.23 read it (llama_eagle3.py, both): target_hidden_size
    (else hidden_size) x num_aux_hidden_states (else the length of eagle_config.eagle_aux_hidden_state_layer_ids,
    else 3); norm_before_fc (eagle_config's, else the config's) adds input_norm over that width, fc_norm one norm per
    state. The engines part on eagle_config.use_aux_hidden_state false (vLLM builds no fc), use_aux_norm (SGLang's
    name for fc_norm) and bias (SGLang's fc bias): kvplan names them rather than size one engine's reading."""
    eagle = data.get("eagle_config") if isinstance(data.get("eagle_config"), Mapping) else {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    aux = _positive(data.get("num_aux_hidden_states"), len(ids) if isinstance(ids, list) and ids else 3)
    unsized = [name for name, on in (("eagle_config.use_aux_hidden_state false",
                                      eagle.get("use_aux_hidden_state", True) is False),
                                     ("use_aux_norm", bool(data.get("use_aux_norm"))),
                                     ("bias", bool(data.get("bias")))) if on]
    return EagleFc(_positive(data.get("target_hidden_size"), hidden), aux,
                   bool(eagle.get("norm_before_fc", data.get("norm_before_fc", False))), bool(data.get("fc_norm")),
                   ", ".join(unsized))


def _dtype(text: Mapping[str, Any], quant: QuantDims | None, notes: list[str]) -> DType:
    """The config's dtype; a quantized checkpoint that names none (gpt-oss-20b) keeps its other weights in bf16,
    which transformers' dtype="auto" reads from the checkpoint tensors."""
    if quant is not None and text.get("dtype") is None and text.get("torch_dtype") is None:
        notes.append("config names no dtype: the unquantized weights of this quantized checkpoint are taken as bf16")
        return BFLOAT16
    return config_dtype(text)


@dataclass
class _Body:
    layers: list[LayerDims]
    norm_bias: bool = False
    lm_head_bias: bool = False
    positions: int = 0
    layer_extra: int = 0
    final_norm: bool = True
    extra: tuple = ()
    top_dims: bool = True
    layer_buffers: int = 0
    tied: bool | None = None   # the family ties (or never ties) whatever tie_word_embeddings says; None: the flag


def _traited(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """A family without a hand-written rule, counted from its fields and the traits transformers' modules show
    (kvplan.config.traits, data from tools/gen_family_traits.py)."""
    t = effective(f, traits_for(f.family))
    positions = 0
    top = t.get("top", "dims") == "dims"
    if t.get("positions_offset") is not None and top:  # BioGPT: max_position_embeddings + 2 learned rows
        positions = f.need_int(("max_position_embeddings", "n_positions"), "max_position_embeddings") \
            + t["positions_offset"]
    heads = _heads(c)
    extras = [e for e in t.get("extras", ()) if holds(f, e.get("when"), t)]
    if extras:
        shown = ", ".join(f"{e['name']} [{' x '.join(map(str, e['dims']))}] ({e['scope']})" for e in extras[:3])
        more = f" and {len(extras) - 3} more" if len(extras) > 3 else ""
        notes.append(f"{len(extras)} tensor kinds beyond the standard block counted as transformers 5.24 builds "
                     f"them (tools/gen_family_traits.py): {shown}{more}")
    blocks, outside = traited_body(f, t, c.hidden, heads, c.layers)
    return _Body(blocks, norm_bias=bool(t.get("norm_bias")), lm_head_bias=bool(t.get("lm_head_bias")) and top,
                 positions=positions, layer_extra=int(t.get("layer_extra", 0)),
                 final_norm=bool(t.get("final_norm", True)), extra=outside, top_dims=top)


# ---------------------------------------------------------------- shared pieces


def _kv_heads(f: ConfigReader, heads: int) -> int:
    if f.overrides.kv_heads is not None:
        return f.overrides.kv_heads
    found = f.first(KV_HEAD_KEYS)
    return heads if found is None else _int(*found)


def _head_dim(f: ConfigReader, c: _Core, keys: tuple[str, ...] = ("head_dim",)) -> int:
    """`head_dim` when the config sets it (Qwen3-0.6B: 128 != 1024/16), else hidden // heads."""
    if f.overrides.head_dim is not None:
        return f.overrides.head_dim
    found = f.first(keys)
    return _int(*found) if found else c.hidden // _heads(c)


def _heads(c: _Core) -> int:
    if not c.heads:
        raise ConfigError(f"config has no head count ({' / '.join(HEAD_KEYS)}): add it to the config.json",
                          field="num_heads")
    return c.heads


def _attention(f: ConfigReader, c: _Core, *, bias: bool = False, o_bias: bool | None = None, **kw) -> AttentionDims:
    heads = _heads(c)
    head_dim = kw.pop("head_dim", None) or _head_dim(f, c)
    kv = kw.pop("kv_heads", None) or _kv_heads(f, heads)
    o = bias if o_bias is None else o_bias
    return AttentionDims(heads, kv, head_dim, head_dim, bias, bias, bias, o, **kw)


def _mlp(f: ConfigReader, c: _Core, key: str = "intermediate_size", **kw) -> MLPDims:
    return MLPDims(f.req_int(key), **kw)


def _uniform(n: int, layer: LayerDims) -> list[LayerDims]:
    return [layer] * n


def _moe_or_dense(c: _Core, is_moe, moe: MoEDims, dense: MLPDims, mixer, norms: int) -> list[LayerDims]:
    return [LayerDims(mixer(i), moe if is_moe(i) else dense, norms) for i in range(c.layers)]


# ---------------------------------------------------------------- families


def _llama_like(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Llama, Mistral, Qwen2/3, Gemma 1/2/3, OLMo-2: q/k/v/o, gated MLP, RMSNorm."""
    mt = f.family
    if mt == "qwen2":  # Qwen2Attention: q/k/v biases always, o_proj none
        attn = _attention(f, c, bias=True, o_bias=False)
    else:
        qk_norm = {"qwen3": "head", "gemma3_text": "head", "olmo2": "proj"}.get(mt, "none")
        attn = _attention(f, c, bias=f.flag("attention_bias"), qk_norm=qk_norm)
    norms = 4 if mt in ("gemma2", "gemma3_text") else 2  # Gemma 2/3 add pre- and post-feedforward norms
    mlp = _mlp(f, c, bias=f.flag("mlp_bias"))
    return _Body(_uniform(c.layers, LayerDims(attn, mlp, norms)))


def _generic(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    if f.first(EXPERT_KEYS) is not None:  # experts are in the fields even where the wiring is not known
        t = {"attn_bias": dict.fromkeys("qkvo", "attention_bias"), "mlp_bias": "mlp_bias", "moe": True}
        return _Body(traited_layers(f, t, c.hidden, _heads(c), c.layers))
    bias = bool(f.get("attention_bias") or f.get("add_qkv_bias") or f.get("bias"))
    attn = _attention(f, c, bias=bias, o_bias=bool(f.get("attention_bias")),
                      head_dim=_head_dim(f, c, HEAD_DIM_KEYS))
    mlp = MLPDims(f.need_int(INTERMEDIATE_KEYS, "intermediate size"), bias=bool(f.get("mlp_bias")))
    return _Body(_uniform(c.layers, LayerDims(attn, mlp, 2)))


def _mixtral(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    moe = MoEDims(f.need_int(EXPERT_KEYS, "expert count"), f.req_int("num_experts_per_tok"), _mlp(f, c))
    return _Body(_uniform(c.layers, LayerDims(_attention(f, c), moe, 2)))


def _qwen_moe(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Qwen3-MoE and Qwen3-Next: MoE where (i+1) % decoder_sparse_step == 0 and i not in mlp_only_layers."""
    next_like = f.family in QWEN_NEXT_LIKE
    found = f.first(EXPERT_KEYS)
    experts = f.int_(*found, minimum=0) if found else 0
    step = f.req_int("decoder_sparse_step", default=1)
    dense_only = f.layer_set("mlp_only_layers") or set()
    moe = None
    if experts:
        shared = MLPDims(f.req_int("shared_expert_intermediate_size")) if next_like else None
        moe = MoEDims(experts, f.req_int("num_experts_per_tok"), _mlp(f, c, "moe_intermediate_size"),
                      shared=shared, shared_gate=shared is not None)
    attn = _attention(f, c, bias=f.flag("attention_bias"), qk_norm="head", q_gate=next_like)
    mixers = _qwen3_next_mixers(f, c, attn) if next_like else [attn] * c.layers
    is_moe = lambda i: i not in dense_only and experts > 0 and (i + 1) % step == 0  # noqa: E731
    dense = _mlp(f, c) if not all(is_moe(i) for i in range(c.layers)) else None
    return _Body(_moe_or_dense(c, is_moe, moe, dense, mixers.__getitem__, 2))


# Qwen3-Next and Qwen3.5 (dense and MoE): gated DeltaNet layers, q_proj emitting its output gate too.
QWEN_NEXT_LIKE = frozenset({"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"})


def _qwen3_next_mixers(f: ConfigReader, c: _Core, attn: AttentionDims) -> list:
    types = f.get("layer_types")
    if types is None:
        interval = f.req_int("full_attention_interval", default=4)
        types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(c.layers)]
    if not isinstance(types, list) or len(types) != c.layers:
        raise ConfigError(f"config field 'layer_types' must list one type per layer ({c.layers}): "
                          "fix the config.json")
    gdn = DeltaNetDims(f.req_int("linear_num_key_heads"), f.req_int("linear_num_value_heads"),
                       f.req_int("linear_key_head_dim"), f.req_int("linear_value_head_dim"),
                       f.req_int("linear_conv_kernel_dim"))
    return [gdn if t == "linear_attention" else attn for t in types]


def _deepseek(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """DeepSeek-V2/V3 (Kimi-K2): MLA; MoE from layer first_k_dense_replace on (transformers ignores moe_layer_freq)."""
    v3 = f.family == "deepseek_v3"
    nope, rope = f.req_int("qk_nope_head_dim"), f.req_int("qk_rope_head_dim", minimum=0)
    bias = f.flag("attention_bias")
    attn = AttentionDims(_heads(c), _heads(c), nope + rope, f.req_int("v_head_dim"), q_bias=bias, k_bias=bias,
                         o_bias=bias, q_lora_rank=f.opt_int("q_lora_rank", minimum=1),
                         kv_lora_rank=f.req_int("kv_lora_rank"), qk_rope_dim=rope)
    expert = _mlp(f, c, "moe_intermediate_size", bias=f.flag("mlp_bias"))
    shared_n = f.opt_int("n_shared_experts", minimum=0) or 0
    shared = MLPDims(expert.intermediate * shared_n, bias=expert.bias) if shared_n else None
    moe = MoEDims(f.need_int(EXPERT_KEYS, "expert count"), f.opt_int("num_experts_per_tok", minimum=0) or 0, expert,
                  shared=shared, router_fp32=True, score_bias=v3)
    first_dense = f.opt_int("first_k_dense_replace", minimum=0) or 0
    freq = f.opt_int("moe_layer_freq", minimum=1, default=1)
    if freq != 1:
        notes.append(f"moe_layer_freq {freq} is ignored as transformers 5.24 does (every layer from "
                     f"{first_dense} on is MoE); vLLM makes only every {freq}th layer MoE")
    return _Body(_moe_or_dense(c, lambda i: i >= first_dense, moe, _mlp(f, c, bias=f.flag("mlp_bias")),
                               lambda i: attn, 2))


def _gpt_oss(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    bias = f.flag("attention_bias")
    expert = MLPDims(f.req_int("intermediate_size"), bias=True)  # gate_up_proj_bias [E, 2I], down_proj_bias [E, H]
    moe = MoEDims(f.need_int(EXPERT_KEYS, "expert count"), f.req_int("num_experts_per_tok"), expert, router_bias=True)
    return _Body(_uniform(c.layers, LayerDims(_attention(f, c, bias=bias, sinks=True), moe, 2)))


def _llama4(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Llama-4 text: MoE layers every interleave_moe_layer_step (or `moe_layers`), a shared expert in each;
    dense layers use intermediate_size_mlp. The QK norm is weightless (L2)."""
    step = f.req_int("interleave_moe_layer_step")
    listed = f.layer_set("moe_layers")
    moe_layers = set(range(step - 1, c.layers, step)) if listed is None else listed
    expert = _mlp(f, c)
    moe = MoEDims(f.need_int(EXPERT_KEYS, "expert count"), f.req_int("num_experts_per_tok"), expert, shared=expert)
    attn = _attention(f, c, bias=f.flag("attention_bias"))
    return _Body(_moe_or_dense(c, moe_layers.__contains__, moe, _mlp(f, c, "intermediate_size_mlp"),
                               lambda i: attn, 2))


def _phi(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Phi-1/2: biased q/k/v/dense, ungated biased MLP, one LayerNorm per block (parallel), biased lm_head."""
    attn = _attention(f, c, bias=True, qk_norm="head_ln" if f.flag("qk_layernorm") else "none")
    mlp = _mlp(f, c, gated=False, bias=True)
    return _Body(_uniform(c.layers, LayerDims(attn, mlp, 1)), norm_bias=True, lm_head_bias=True)


def _phi3(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    attn = _attention(f, c, fused_qkv=True)
    return _Body(_uniform(c.layers, LayerDims(attn, _mlp(f, c, fused_gate_up=True), 2)))


def _gpt2(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """GPT-2 and GPT-BigCode: fused biased c_attn, learned positions (wpe), LayerNorms, n_inner or 4 x hidden."""
    kv = 1 if f.family == "gpt_bigcode" and f.flag("multi_query", True) else None
    cross: tuple = ()
    if f.family == "gpt2" and f.flag("add_cross_attention"):
        # GPT2Block with add_cross_attention (modeling_gpt2.py): crossattention's c_attn Conv1D [H, 2H] and q_attn
        # [H, H], c_proj [H, H], each biased, and ln_cross_attn (weight, bias): 4H^2 + 6H a block (GPT-2 small:
        # 12 x 2,363,904 = 28,366,848). GPTBigCode refuses it (NotImplementedError in transformers 5.24)
        h = c.hidden
        cross = (("attention", 2 * h * h, (h, 2 * h)), ("attention", 2 * h, None), ("attention", h * h, (h, h)),
                 ("attention", h, None), ("attention", h * h, (h, h)), ("attention", h, None), ("norms", 2 * h, None))
    elif f.flag("add_cross_attention"):
        notes.append("add_cross_attention: the cross-attention blocks of an encoder-decoder setup are not counted")
    attn = _attention(f, c, bias=True, fused_qkv=True, head_dim=c.hidden // _heads(c), kv_heads=kv)
    mlp = MLPDims(f.opt_int("n_inner", minimum=1) or 4 * c.hidden, gated=False, bias=True)
    positions = f.req_int("n_positions") if f.get("n_positions") is not None else f.req_int("max_position_embeddings")
    return _Body(_uniform(c.layers, LayerDims(attn, mlp, 2, cross)), norm_bias=True, positions=positions)


def _gptj(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    attn = _attention(f, c, head_dim=c.hidden // _heads(c), kv_heads=_heads(c))
    mlp = MLPDims(f.opt_int("n_inner", minimum=1) or 4 * c.hidden, gated=False, bias=True)
    return _Body(_uniform(c.layers, LayerDims(attn, mlp, 1)), norm_bias=True, lm_head_bias=True)


def _gpt_neox(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    attn = _attention(f, c, bias=f.flag("attention_bias"), fused_qkv=True, head_dim=c.hidden // _heads(c),
                      kv_heads=_heads(c))
    return _Body(_uniform(c.layers, LayerDims(attn, _mlp(f, c, gated=False, bias=True), 2)), norm_bias=True)


def _starcoder2(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    bias = f.flag("use_bias")
    layer = LayerDims(_attention(f, c, bias=bias), _mlp(f, c, gated=False, bias=bias), 2)
    return _Body(_uniform(c.layers, layer), norm_bias=True)


def _falcon(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Falcon: query_key_value is [heads + 2 kv, hd] rows; kv = 1 for multi_query, num_kv_heads for the new
    decoder architecture (Falcon-40B: 128 + 2 x 8 heads). Parallel blocks carry 1 LayerNorm, or 2 (ln_attn,
    ln_mlp) with the new architecture."""
    heads, bias, new_arch = _heads(c), f.flag("bias"), f.flag("new_decoder_architecture")
    if new_arch:
        kv = f.opt_int("num_kv_heads", minimum=1) or heads
    else:
        kv = 1 if f.flag("multi_query", True) else heads
    attn = _attention(f, c, bias=bias, fused_qkv=True, head_dim=c.hidden // heads, kv_heads=kv)
    mlp = MLPDims(f.opt_int("ffn_hidden_size", minimum=1) or 4 * c.hidden, gated=False, bias=bias)
    ln_parallel = f.opt_int("num_ln_in_parallel_attn", minimum=1) or (2 if new_arch else 1)
    norms = ln_parallel if f.flag("parallel_attn") else 2
    return _Body(_uniform(c.layers, LayerDims(attn, mlp, norms)), norm_bias=True)


def _mamba(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Mamba-1 / FalconMamba: mixer-only blocks. intermediate_size from the file wins over expand x hidden
    (falcon-mamba-7b: 8192, not 16 x 4096), as transformers' from_dict sets it after __post_init__."""
    inner = f.opt_int("intermediate_size", minimum=1) if "intermediate_size" in f.data else None
    inner = inner or f.req_int("expand") * c.hidden
    mixer = MambaDims(inner, f.req_int("state_size"), f.req_int("conv_kernel"), _dt_rank(f, "time_step_rank", c),
                      conv_bias=f.flag("use_conv_bias"), proj_bias=f.flag("use_bias"))
    return _Body(_uniform(c.layers, LayerDims(mixer, None, 1)))


def _dt_rank(f: ConfigReader, key: str, c: _Core) -> int:
    value = f.get(key, "auto")
    return math.ceil(c.hidden / 16) if value == "auto" else _int(key, value)


def _jamba(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Jamba: attention where i % attn_layer_period == attn_layer_offset, Mamba elsewhere; MoE where
    i % expert_layer_period == expert_layer_offset (1.5-Mini: 16 MoE layers of 32)."""
    attn = _attention(f, c)
    mamba = MambaDims(f.req_int("mamba_expand") * c.hidden, f.req_int("mamba_d_state"), f.req_int("mamba_d_conv"),
                      _dt_rank(f, "mamba_dt_rank", c), conv_bias=f.flag("mamba_conv_bias"),
                      proj_bias=f.flag("mamba_proj_bias"), inner_norms=True)
    period, offset = f.layer_period("attn", c.layers)
    e_period, e_offset = f.layer_period("expert", c.layers)
    experts = f.need_int(EXPERT_KEYS, "expert count")
    moe = MoEDims(experts, f.req_int("num_experts_per_tok"), _mlp(f, c))
    return _Body(_moe_or_dense(c, lambda i: experts > 1 and i % e_period == e_offset, moe, _mlp(f, c),
                               lambda i: attn if i % period == offset else mamba, 2))


def _mamba2_mixer(f: ConfigReader) -> Mamba2Dims:
    """A Mamba-2 mixer sized by the state the cache read (kvplan.config.state): conv [conv_dim, kernel] and SSM
    [heads, head_dim, state], so inner = heads x head_dim (Mamba2Config requires expand x hidden to equal it;
    NemotronHMamba2Mixer takes mamba_num_heads x mamba_head_dim). Biases: use_conv_bias on the conv, use_bias on
    in_proj / out_proj (NemotronH ignores mamba_proj_bias: modeling_nemotron_h.py passes config.use_bias)."""
    if not f.state_shape or len(f.state_shape[1]) != 3:
        raise ConfigError(f"model_type {f.model_type!r}: no Mamba-2 layer state to size its mixers from (mamba "
                          "heads, head_dim, state_size): fix the config.json", field="mamba_num_heads")
    (conv_dim, kernel), (heads, head_dim, _) = f.state_shape
    return Mamba2Dims(heads * head_dim, heads, conv_dim, kernel, conv_bias=f.flag("use_conv_bias", True),
                      proj_bias=f.flag("use_bias"))


def _mamba2(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Mamba-2 (modeling_mamba2.py Mamba2Block): one RMSNorm and one mixer per block, norm_f, lm_head."""
    return _Body(_uniform(c.layers, LayerDims(_mamba2_mixer(f), None, 1)))


def _nemotron_h(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Nemotron-H (modeling_nemotron_h.py NemotronHBlock): each block one RMSNorm and one mixer, by the pattern
    the cache read: Mamba-2 ("M"), attention ("*": q/k/v/o, never biased, head_dim as the config class
    says), a plain MLP ("-": up/down, relu2, mlp_bias), or MoE ("E": un-gated experts [E, I, H] / [E, H, I], a
    float32 router [E, H] with its e_score_correction_bias buffer, a shared un-gated MLP of
    moe_shared_expert_intermediate_size, and the latent projections when moe_latent_size is set).
    Nemotron-H-56B: 54 M + 10 * + 54 - blocks."""
    kinds = f.layer_kinds or ()
    if len(kinds) != c.layers:
        raise ConfigError(f"config's layer pattern has {len(kinds)} entries for {c.layers} layers: fix "
                          "hybrid_override_pattern / layers_block_type", field="layers_block_type")
    mlp_bias = f.flag("mlp_bias")
    dense = MLPDims(f.req_int("intermediate_size"), gated=False, bias=mlp_bias)
    mixers = {}
    if any(k.startswith("state") for k in kinds):
        mixers["state"] = _mamba2_mixer(f)
    if any(k.startswith("attn") for k in kinds):
        heads = _heads(c)
        mixers["attn"] = AttentionDims(heads, _kv_heads(f, heads), _head_dim(f, c), _head_dim(f, c))
    moe = None
    if "none_moe" in kinds:
        latent = f.opt_int("moe_latent_size", minimum=1) or 0
        moe = MoEDims(f.need_int(EXPERT_KEYS, "expert count"), f.req_int("num_experts_per_tok"),
                      MLPDims(f.req_int("moe_intermediate_size"), gated=False),
                      shared=MLPDims(f.req_int("moe_shared_expert_intermediate_size"), gated=False, bias=mlp_bias),
                      router_fp32=True, score_bias=True, latent=latent, latent_bias=mlp_bias)
    out = []
    for kind in kinds:
        if kind == "none_moe":
            out.append(LayerDims(None, moe, 1))
        elif kind == "none":
            out.append(LayerDims(None, dense, 1))
        elif kind.split(":")[0].split("_")[0] in mixers and "+" not in kind:
            out.append(LayerDims(mixers[kind.split(":")[0].split("_")[0]], None, 1))
        else:   # NemotronHConfig has no "hybrid" block (Falcon-H1's attention beside Mamba in one layer)
            raise ConfigError(f"Nemotron-H block kind {kind!r} is not one NemotronHBlock builds (mamba, attention, "
                              "mlp, moe): fix layers_block_type / hybrid_override_pattern", field="layers_block_type")
    return _Body(out)


def _nas_mult(block: Mapping[str, Any], hidden: int) -> int:
    """A DeciLM block's MLP width from its `ffn_mult`: int(2 x ffn_mult x hidden / 3) rounded up to a multiple of
    256 (vLLM 0.33 model_executor/models/nemotron_nas.py _ffn_mult_to_intermediate_size / _find_multiple, as
    NVIDIA's modeling_decilm.py). Super-49B: 5.25 -> 28,672; 1.0 -> int(5,461.3) = 5,461 -> 5,632; 0.5 -> 2,816.
    A block may give `intermediate_size` instead, which vLLM takes as is."""
    if block.get("ffn_mult") is None:
        return check_int("block_configs.ffn.intermediate_size", block.get("intermediate_size"))
    mult = check_float("block_configs.ffn.ffn_mult", block["ffn_mult"], minimum=1e-3, maximum=1024)
    size = int(2 * mult * hidden / 3)
    return size if size % 256 == 0 else size + 256 - size % 256


def _nas(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Llama-Nemotron NAS (`nemotron-nas`, DeciLMForCausalLM: remote code, not in transformers 5.24), per
    `block_configs[i]` as vLLM 0.33 nemotron_nas.py DeciLMDecoderLayer builds it: attention `no_op` has no
    attention and no input_layernorm; otherwise q/k/v/o with num_attention_heads // n_heads_in_group KV heads
    (biases: attention_bias) and an input_layernorm. `replace_with_linear` (vLLM cannot build it) is one
    bias-free [H, H] linear in NVIDIA's checkpoints (`self_attn.linear_attn`, `mlp.linear_mlp`: NeMo
    Automodel's DeciLM layers). ffn `no_op` drops the MLP and post_attention_layernorm; else a gated MLP of the
    block's ffn_mult width (`_nas_mult`). Super-49B: 49 attention blocks of 80."""
    blocks = f.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != c.layers:
        raise ConfigError(f"config field 'block_configs' must hold one {{attention, ffn}} object per layer "
                          f"({c.layers}): fix the config.json", field="block_configs")
    heads, h = _heads(c), c.hidden
    head_dim, bias, mlp_bias = _head_dim(f, c), f.flag("attention_bias"), f.flag("mlp_bias")
    out = []
    for block in blocks:
        attention, ffn = nas_attention(block), block.get("ffn")
        if not isinstance(ffn, Mapping):
            raise ConfigError("config field 'block_configs' must hold one {attention, ffn} object per layer: fix "
                              "the config.json", field="block_configs")
        mixer, mlp, extra, norms = None, None, [], 0
        if not attention.get("no_op"):
            norms += 1
            if attention.get("replace_with_linear"):
                extra.append(("attention", h * h, (h, h)))
            else:
                group = check_int("block_configs.attention.n_heads_in_group", attention.get("n_heads_in_group"))
                mixer = AttentionDims(heads, heads // group, head_dim, head_dim, bias, bias, bias, bias)
        if not ffn.get("no_op"):
            norms += 1
            if ffn.get("replace_with_linear"):
                extra.append(("mlp", h * h, (h, h)))
            else:
                mlp = MLPDims(_nas_mult(ffn, h), bias=mlp_bias)
        out.append(LayerDims(mixer, mlp, norms, tuple(extra)))
    return _Body(out)


def _deepseek_v4(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    layers, top = deepseek_v4(f, c.hidden, _heads(c), c.layers, notes)
    return _Body(layers, final_norm=False, extra=top)   # the final norm is float32: in `top`


def _gemma4(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    layers, top = gemma.gemma4(f, c.hidden, _heads(c), c.layers)
    return _Body(layers, extra=top, layer_buffers=1)   # Gemma4TextDecoderLayer.layer_scalar: nn.Buffer([1])


def _gemma3n(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    layers, top = gemma.gemma3n(f, c.hidden, _heads(c), c.layers)
    return _Body(layers, extra=top)


def _dory(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    layers, top = looped.dory(f, c.hidden, _heads(c), c.layers)
    return _Body(layers, extra=top, final_norm=False)   # DoryL2Norm has no weight


def _hrm_text(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    layers, top = looped.hrm_text(f, c.hidden, _heads(c))
    return _Body(layers, extra=top, final_norm=False)   # HrmTextRMSNorm has no weight


def _inkling2(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Inkling 2 and its Loop (kvplan.config.inkling): the embeddings, final norm and lm_head are listed with the
    family's tensors, as the head has unpadded_vocab_size rows; never tied (_tied_weights_keys = {})."""
    layers, top = inkling.inkling2(f, c.hidden, c.layers)
    return _Body(layers, extra=top, top_dims=False, tied=False)


def _inkling(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Inkling (kvplan.config.inkling.inkling1): never tied (InklingForCausalLM._tied_weights_keys = {})."""
    layers, top = inkling.inkling1(f, c.hidden, c.layers)
    return _Body(layers, extra=top, tied=False)


def _xlm(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """XLM (modeling_xlm.py XLMWithLMHeadModel): learned positions, layer_norm_emb [H] (+ bias) after the
    embeddings and no final norm, language embeddings [n_langs, H] where use_lang_emb and n_langs > 1; post-norm
    blocks of biased MHA q/k/v/out and a biased un-gated FFN of 4 x H, two LayerNorms; pred_layer.proj biased
    (its weight tied unless tie_word_embeddings is false). XLM's default: 12 blocks of 2,048 -> 667,119,041."""
    if f.flag("asm"):
        raise ConfigError("XLM with asm (an adaptive-softmax head) is not counted by kvplan's rule: open an issue "
                          "with the model id", field="asm")
    heads = _heads(c)
    attn = _attention(f, c, bias=True, head_dim=c.hidden // heads, kv_heads=heads)
    langs = f.req_int("n_langs") if f.flag("use_lang_emb", True) else 0
    extra = (("norms", 2 * c.hidden, None),) + ((("embeddings", langs * c.hidden, None),) if langs > 1 else ())
    return _Body(_uniform(c.layers, LayerDims(attn, MLPDims(4 * c.hidden, gated=False, bias=True), 2)),
                 norm_bias=True, lm_head_bias=True, positions=f.req_int("max_position_embeddings"),
                 final_norm=False, extra=extra)


def _zamba2(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Zamba2 (modeling_zamba2.py): every layer a Mamba-2 block (conv always biased, in/out_proj by add_bias_linear,
    one RMSNorm); a "hybrid" layer adds a bias-free linear [H, H] and runs a shared transformer block, one of
    min(num_mem_blocks, hybrid layers) tied copies (Zamba2Model.get_layers), counted once at the top: q/k/v
    [heads x 2H / heads, 2H], o [H, heads x head_dim], an input RMSNorm [2H] and a pre-FF one [H], a fused gate_up
    [2I, H] and down [H, I] (add_bias_linear), and per hybrid layer a rank-r adapter pair on gate_up ([r, H],
    [2I, r]) and, with use_shared_attention_adapter, on q, k and v ([r, 2H], [2H, r] each). The hybrid layers carry
    the attention and MLP dims (for activations and TP), their own tensors as extras."""
    types = f.get("layers_block_type")
    if not isinstance(types, list) or len(types) != c.layers or not f.state_shape:
        raise ConfigError(f"config field 'layers_block_type' must list one type per layer ({c.layers}): fix the "
                          "config.json", field="layers_block_type")
    h, bias = c.hidden, f.flag("add_bias_linear")
    (conv_dim, kernel), (heads_m, head_dim_m, _) = f.state_shape
    # Zamba2MambaMixer sizes its weights by int(mamba_expand x hidden), not n_mamba_heads x mamba_headdim (a
    # mamba_headdim 320 in place of 640 leaves transformers' 2,481,848,336 parameters as they are)
    inner = int(check_float("mamba_expand", f.get("mamba_expand", 2), minimum=1e-3, maximum=64) * h)
    conv_dim += inner - heads_m * head_dim_m
    mamba = Mamba2Dims(inner, heads_m, conv_dim, kernel, conv_bias=True, proj_bias=bias)
    heads = _heads(c)
    # attention_hidden_size and attention_head_dim as the config states them (Zamba2Config.__post_init__ derives
    # 2 x hidden and 2 x hidden // heads, a config.json's own values win): q/k/v [heads x head_dim,
    # attention_hidden_size], the input norm [attention_hidden_size]
    kv, wide = _kv_heads(f, heads), f.opt_int("attention_hidden_size") or 2 * h
    # Zamba2Config.__post_init__: intermediate_size or 4 x hidden
    head_dim = f.opt_int("attention_head_dim") or 2 * h // heads
    inter, rank = f.opt_int("intermediate_size") or 4 * h, f.req_int("adapter_rank")
    hybrid = sum(1 for t in types if t == "hybrid")
    blocks = min(f.req_int("num_mem_blocks"), hybrid)
    lin = lambda rows, cols, b=False: [("other", rows * cols, (rows, cols))] + ([("other", rows, None)] if b else [])  # noqa: E731
    own = [("mixer", (mamba.inner + conv_dim + heads_m) * h, (mamba.inner + conv_dim + heads_m, h))]
    own += [("mixer", mamba.inner + conv_dim + heads_m, None)] if bias else []
    own += [("mixer", conv_dim * kernel + conv_dim + 3 * heads_m + mamba.inner, None),
            ("mixer", h * mamba.inner, (h, mamba.inner))] + ([("mixer", h, None)] if bias else [])
    own += lin(h, h)
    block = ([("attention", heads * head_dim * wide, (heads * head_dim, wide))]
             + [("attention", kv * head_dim * wide, (kv * head_dim, wide))] * 2
             + [("attention", h * heads * head_dim, (h, heads * head_dim)), ("norms", wide + h, None)])
    block += [("mlp", 2 * inter * h, (2 * inter, h))] + ([("mlp", 2 * inter, None)] if bias else [])
    block += [("mlp", h * inter, (h, inter))] + ([("mlp", h, None)] if bias else [])
    adapters = lin(rank, h) + lin(2 * inter, rank)
    if f.flag("use_shared_attention_adapter"):
        adapters += (lin(rank, wide) + lin(wide, rank)) * 3
    top = tuple(block * blocks + adapters * hybrid)
    shared = LayerDims(AttentionDims(heads, kv, head_dim, head_dim), MLPDims(inter, fused_gate_up=True), 1,
                       tuple(own), mixer_weights=False, ffn_weights=False)
    return _Body([shared if t == "hybrid" else LayerDims(mamba, None, 1) for t in types], extra=top)


def _zamba(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """Zamba (modeling_zamba.py): Mamba-1 layers whose mixer is split into n_mamba_heads (x_proj / dt_proj / A_log / D
    per head: the same elements as one mixer of the whole width) with one RMSNorm; "hybrid" layers add a bias-free
    linear [H, H] and run the one shared transformer block, tied across them and counted once at the top: q/k/v
    [heads x head_dim, 2H], o [H, heads x head_dim], an input RMSNorm [2H] and a pre-FF one [H], a gated MLP
    without biases. Zamba-7B defaults: 76 layers, 13 hybrid."""
    types = f.get("layers_block_type")
    if types is None:   # ZambaConfig.__post_init__
        period, offset = f.req_int("attn_layer_period"), f.req_int("attn_layer_offset", minimum=0)
        types = ["linear_attention"] * 2 + ["hybrid"] + ["hybrid" if i % period == offset else "linear_attention"
                                                         for i in range(c.layers - 3)]
    if not isinstance(types, list) or len(types) != c.layers:
        raise ConfigError(f"config field 'layers_block_type' must list one type per layer ({c.layers}): fix the "
                          "config.json", field="layers_block_type")
    h = c.hidden
    mamba = MambaDims(f.req_int("mamba_expand") * h, f.req_int("mamba_d_state"), f.req_int("mamba_d_conv"),
                      _dt_rank(f, "mamba_dt_rank", c), conv_bias=f.flag("mamba_conv_bias", True),
                      proj_bias=f.flag("mamba_proj_bias"), a_log_fp32=True)
    # ZambaConfig.__post_init__: attention_hidden_size or 2 x hidden (q/k/v's input and the input norm), head_dim
    # attention_head_dim or 2 x hidden // heads
    heads, wide, inter = _heads(c), f.opt_int("attention_hidden_size") or 2 * h, f.req_int("intermediate_size")
    kv = _kv_heads(f, heads)
    head_dim = f.opt_int("attention_head_dim") or 2 * h // heads
    block = ((("attention", heads * head_dim * wide, (heads * head_dim, wide)),)
             + (("attention", kv * head_dim * wide, (kv * head_dim, wide)),) * 2
             + (("attention", h * heads * head_dim, (h, heads * head_dim)), ("norms", wide + h, None))
             + (("mlp", inter * h, (inter, h)),) * 2 + (("mlp", h * inter, (h, inter)),))
    hybrid = LayerDims(mamba, None, 1, (("other", h * h, (h, h)),))
    layers = [hybrid if t == "hybrid" else LayerDims(mamba, None, 1) for t in types]
    return _Body(layers, extra=block if "hybrid" in types else ())


def _rwkv(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """RWKV-4 (kvplan.config.recurrent): LayerNorms with biases, ln_out after the last block."""
    return _Body(recurrent.rwkv(f, c.hidden, c.layers), norm_bias=True)


def _recurrent_gemma(f: ConfigReader, c: _Core, notes: list[str]) -> _Body:
    """RecurrentGemma (kvplan.config.recurrent): RMSNorms, final_norm, lm_head tied unless the config says not."""
    return _Body(recurrent.recurrent_gemma(f, c.hidden, c.layers))


_BUILDERS = {
    **dict.fromkeys(("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2"), _llama_like),
    "mixtral": _mixtral, "qwen3_moe": _qwen_moe, "qwen3_next": _qwen_moe, "qwen3_5_text": _qwen_moe,
    "qwen3_5_moe_text": _qwen_moe,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek, "gpt_oss": _gpt_oss, "llama4_text": _llama4,
    "phi": _phi, "phi3": _phi3, "gpt2": _gpt2, "gpt_bigcode": _gpt2, "gptj": _gptj, "gpt_neox": _gpt_neox,
    "starcoder2": _starcoder2, "falcon": _falcon, "mamba": _mamba, "falcon_mamba": _mamba, "jamba": _jamba,
    "mamba2": _mamba2, "nemotron_h": _nemotron_h, "nemotron-nas": _nas, "gemma4_text": _gemma4,
    "gemma3n_text": _gemma3n, "dory": _dory, "hrm_text": _hrm_text, "xlm": _xlm,
    "inkling_text": _inkling, "inkling2_text": _inkling2, "inkling2_loop_text": _inkling2,
    "zamba2": _zamba2, "zamba": _zamba, "deepseek_v4": _deepseek_v4, "rwkv": _rwkv,
    "recurrent_gemma": _recurrent_gemma,
}
