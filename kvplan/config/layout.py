"""The cache layout a config describes: one tuple of frozen layer specs (`kvplan.model.layers`) per layer.

Attention decoders of every kind (MHA, GQA, MQA, MLA, sliding windows, chunks, indexer keys, KV sharing, looped
layers) go through `_build_transformer`; the families whose cache has another shape (Mamba, Jamba, Qwen3-Next,
xLSTM, models transformers caches nothing for) have a builder of their own in `_FAMILY_BUILDERS`. Each rule
mirrors what transformers 5.24's config class and cache build from the same file, with the model and the number
beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError, UnsupportedArchitectureError, shown
from ..model.layers import (ChunkedAttentionSpec, FullAttentionSpec, IndexedMLASpec, MLASpec, NoCacheSpec,
                            PrefixedAttentionSpec, SlidingWindowSpec, StateSpec)
from .families import build_deepseek_v4, build_inkling, build_recurrent_gemma, build_rwkv
from .per_layer import V_HEAD_DIM_FAMILIES, layer_overrides
from .reader import HEAD_DIM_KEYS, HEAD_KEYS, HIDDEN_KEYS, KV_HEAD_KEYS, LAYER_KEYS, ConfigReader
from .state import STATE_TYPES, mlstm_layers, pattern_types, state_spec


def build_layers(r: ConfigReader, notes: list[str]) -> list[tuple]:
    """One tuple of specs per layer, by the family's own builder, else as an attention decoder."""
    return _FAMILY_BUILDERS.get(r.model_type, _build_transformer)(r, notes)


SUPPORTED_LAYER_TYPES = {"full_attention", "sliding_attention", "chunked_attention", "linear_attention",
                         "mamba", "conv", "moe", "mlp", "dummy", "indexed_attention", "hybrid"}


# Causal LMs whose transformers class keeps no cache between generate() steps (transformers 5.24): GPT-1 takes no
# cache argument (models/openai/modeling_openai.py); XLM builds an EncoderDecoderCache inside forward and returns
# none (models/xlm/modeling_xlm.py, XLMWithLMHeadModel -> MaskedLMOutput). Every new token re-runs the sequence.
UNCACHED = {"openai-gpt": "OpenAIGPTLMHeadModel", "xlm": "XLMWithLMHeadModel"}


def _build_uncached(r: ConfigReader, notes: list[str]) -> list[tuple]:
    g = _geometry(r, notes)
    notes.append(f"transformers' {UNCACHED[r.model_type]} keeps no KV cache between steps: every generated token "
                 "re-runs the whole sequence")
    return [(NoCacheSpec("no cache in transformers (recomputes the sequence)"),)] * g.num_layers


def _build_prefixed(r: ConfigReader, notes: list[str]) -> list[tuple]:
    """CPM-Ant (transformers 5.24 modeling_cpmant.py, CpmAntModel.forward): the first forward prepends
    prompt_length learned prompt tokens to input_ids, so every layer caches them ahead of the sequence."""
    prefix = r.req_int("prompt_length", minimum=0)
    notes.append(f"{prefix} learned prompt tokens are cached ahead of every sequence (prompt_length)")
    return [tuple(PrefixedAttentionSpec(s.kv_heads, s.k_head_dim, s.v_head_dim, prefix_tokens=prefix)
                  if type(s) is FullAttentionSpec else s for s in layer) for layer in _build_transformer(r, notes)]


def layer_kind(layer: tuple) -> str:
    """What one layer's weights are around: "attn" (a KV-shared layer still has its attention), "attn_sliding" /
    "attn_chunked" (MiMo-V2-Flash's sliding layers have other heads than its full ones), "state:<mixer>", "none"
    (an MLP-only block), joined with "+" for a hybrid layer."""
    kinds = []
    for spec in layer:
        if spec.kind == "state":
            kinds.append("state:" + spec.mixer)
        elif spec.kind in ("sliding", "chunked"):
            kinds.append("attn_" + spec.kind)
        elif isinstance(spec, IndexedMLASpec):  # HY-V4: the indexer's weights sit on its "full" layers only
            kinds.append("attn_indexed")
        elif spec.kind != "none" or "reuses" in spec.reason:
            kinds.append("attn")
        else:  # Nemotron-H's "E" blocks route to experts, its "-" blocks are a dense MLP
            kinds.append("none_moe" if spec.reason.startswith("MoE") else "none")
    return "+".join(dict.fromkeys(kinds))


@dataclass(frozen=True)
class _Geometry:
    num_layers: int
    num_heads: int
    kv_heads: int
    head_dim: int


def _geometry(r: ConfigReader, notes: list[str]) -> _Geometry:
    o = r.overrides
    pattern = pattern_types(r) if r.first(LAYER_KEYS) is None and o.num_layers is None else None
    # Nemotron-H has no layer count: its pattern has one entry per layer
    num_layers = len(pattern) if pattern else r.need_int(LAYER_KEYS, "num_layers", "--num-layers", o.num_layers)
    num_heads = r.need_int(HEAD_KEYS, "num_heads", "--num-heads", o.num_heads)
    kv_heads = o.kv_heads if o.kv_heads is not None else _kv_heads(r, num_heads, notes)
    head_dim = o.head_dim if o.head_dim is not None else _head_dim(r, num_heads, notes)
    if o.kv_heads is not None:
        r.used["kv_heads"] = kv_heads
    return _Geometry(num_layers, num_heads, kv_heads, head_dim)


def _kv_heads(r: ConfigReader, num_heads: int, notes: list[str]) -> int:
    found = r.first(KV_HEAD_KEYS)
    if found is None:
        return num_heads  # no KV field: plain multi-head attention (GPT-2, LLaMA-1)
    return r.int_(found[0], found[1])


# Families whose attention computes hidden // heads and never reads a head_dim key (transformers 5.24
# modeling_gpt2.py: `self.head_dim = self.embed_dim // self.num_heads`); a stray head_dim must not count.
HEAD_DIM_FROM_HIDDEN = frozenset({"gpt2", "gpt_bigcode", "gptj", "gpt_neox", "falcon"})
# Families whose attention reads its head width from a key of their own (transformers 5.24 modeling_cpmant.py,
# CpmAntAttention: `self.dim_head = config.dim_head`, the K and V views `(batch, len, num_heads, dim_head)`), whatever
# hidden_size / heads gives: at dim_head 64 transformers caches 405,798,912 B after 1,000 tokens where reading
# hidden / heads (128) gave 811,597,824 B.
HEAD_DIM_KEY = {"cpmant": "dim_head"}


def _head_dim(r: ConfigReader, num_heads: int, notes: list[str]) -> int:
    own = HEAD_DIM_KEY.get(r.model_type)
    found = None if r.model_type in HEAD_DIM_FROM_HIDDEN else r.first((own,) if own else HEAD_DIM_KEYS)
    if found is not None and not (isinstance(found[1], int) and not isinstance(found[1], bool) and found[1] <= 0):
        head_dim = r.int_(found[0], found[1])
        hidden = r.first(HIDDEN_KEYS)
        if hidden and isinstance(hidden[1], int) and hidden[1] % num_heads == 0 and hidden[1] // num_heads != head_dim:
            notes.append(f"head_dim {head_dim} comes from the config ({found[0]}); "
                         f"hidden_size / heads would give {hidden[1] // num_heads}")
        return head_dim
    hidden = r.need_int(HIDDEN_KEYS, "hidden_size", "--head-dim", r.overrides.hidden_size)
    if hidden < num_heads:  # hidden_size 1 over 32 heads: head_dim 0, and every per-token size divides by it
        raise ConfigError(f"hidden size {hidden:,} over {num_heads:,} heads gives head_dim 0: fix the config.json "
                          "or pass --head-dim N", field="head_dim", flag="--head-dim")
    if hidden % num_heads:  # GLM-4.5's class defaults: 4096 // 96 = 42, what its attention module computes
        notes.append(f"hidden size {hidden:,} is not a multiple of {num_heads} heads: head_dim = {hidden:,} // "
                     f"{num_heads} = {hidden // num_heads}, as transformers computes it (pass --head-dim N to change)")
    return hidden // num_heads


def _window(r: ConfigReader) -> int | None:
    if r.model_type == "mimo_v2_flash" and r.get("sliding_window_size") is not None:
        # MiMoV2FlashConfig: the window is sliding_window_size + 1 (the published 128 -> 129 tokens)
        return r.req_int("sliding_window_size") + 1
    if r.has("use_sliding_window") and not r.flag("use_sliding_window"):
        return None  # Qwen2/Qwen3: __post_init__ drops sliding_window unless use_sliding_window
    return r.opt_int("sliding_window")


def _layer_types(r: ConfigReader, num_layers: int) -> list[str] | None:
    value = r.get("layer_types")
    if value is None:
        value = pattern_types(r)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != num_layers or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"config field 'layer_types' must list one string per layer ({num_layers}): "
                          "fix the config.json")
    unknown = sorted(set(value) - SUPPORTED_LAYER_TYPES)
    if unknown:
        raise UnsupportedArchitectureError(f"layer type(s) {', '.join(unknown)} are not supported yet: "
                                           "open an issue with the model id")
    r.used["layer_types"] = f"{len(value)} entries"
    return value


def _derived_layer_types(r: ConfigReader, g: _Geometry, window: int | None) -> list[str]:
    """The per-layer pattern a family's config class derives when `layer_types` is absent."""
    n, mt = g.num_layers, r.model_type
    chunk = r.opt_int("attention_chunk_size")
    if r.get("index_head_dim") is not None and r.get("kv_lora_rank") is not None:
        # DeepseekV32Config / GlmMoeDsaConfig: every layer indexed_attention (MLA + indexer keys) by default
        return ["indexed_attention"] * n
    if mt in ("qwen3_5_text", "qwen3_5_moe_text"):
        # Qwen3_5(Moe)TextConfig.__post_init__ without layer_types: every full_attention_interval-th layer (kwargs'
        # default 4) is full attention, the rest Gated DeltaNet; Qwen3.5-27B's 64 layers give 16 full, 48 linear
        interval = r.req_int("full_attention_interval", default=4)
        return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)]
    if mt == "falcon_h1":  # FalconH1Config has no pattern field: every layer is attention beside Mamba-2
        return ["hybrid"] * n
    if mt == "mimo_v2_flash":  # MiMoV2FlashConfig: layer 0 and every 6th layer full, the rest sliding (48: 9 full)
        return ["full_attention" if i == 0 or (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]
    if mt in ("qwen2", "qwen3", "qwen2_moe", "qwen2_5_vl") and window is not None:
        first_sliding = r.opt_int("max_window_layers", minimum=0) or 0
        return ["sliding_attention" if i >= first_sliding else "full_attention" for i in range(n)]
    if mt in ("gemma2", "gpt_oss", "cohere2", "gemma3_text") or r.has("sliding_window_pattern"):
        default = {"gemma2": 2, "gpt_oss": 2, "cohere2": 4}.get(mt, 6)
        # an explicit null pattern: gemma2/gpt_oss/cohere2 classes ignore the key, so keep the family's
        pattern = r.opt_int("sliding_window_pattern", default=r.get("_sliding_window_pattern", default)) or default
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if mt == "llama4_text":
        return _llama4_layer_types(r, n, chunk)
    if window is not None:  # transformers: no layer_types + a window => every layer slides (Mistral, Phi-3)
        return ["sliding_attention"] * n
    if chunk is not None:
        return ["chunked_attention"] * n
    return ["full_attention"] * n


def _llama4_layer_types(r: ConfigReader, n: int, chunk: int | None) -> list[str]:
    # no_rope_layers[i] == 1 means layer i uses RoPE, i.e. chunked; every 4th layer is NoPE and full.
    flags = r.get("no_rope_layers")
    if not flags:
        interval = r.req_int("no_rope_layer_interval")
        flags = [int((i + 1) % interval != 0) for i in range(n)]
    if not isinstance(flags, list) or len(flags) != n:
        raise ConfigError("config field 'no_rope_layers' must list one flag per layer: fix the config.json")
    return ["chunked_attention" if f and chunk is not None else "full_attention" for f in flags]


def _indexed(r: ConfigReader, kv: int, kd: int, vd: int, i: int) -> MLASpec:
    if r.used.get("kv_lora_rank") is None:
        raise UnsupportedArchitectureError("indexed_attention layers without an MLA latent (kv_lora_rank) are not "
                                           "supported yet: open an issue with the model id")
    # Dots3-Note (transformers 5.24 modeling_dots3_note.py, Dots3NoteTextModel.forward) computes its indexed layers'
    # RoPE from `inputs_embeds.float()`, so the float32 cos / sin promote the indexer keys to float32 whatever the
    # model dtype (no config field says so: it is the family's code); the latent stays in the model dtype
    index_bytes = 4 if r.family.startswith("dots3_note") else 0
    shared = r.get("indexer_types")
    if isinstance(shared, list) and i < len(shared) and shared[i] == "shared":
        # HY-V4 (transformers 5.24 modeling_hy_v4.py): a "shared" layer reuses the indexer keys of the last
        # "full" one and caches only its latent; default config: 24 of 34 layers, 128 index values fewer each
        r.used["indexer_types"] = f"{len(shared)} entries"
        return MLASpec(kv, kd, vd)
    return IndexedMLASpec(kv, kd, vd, index_head_dim=r.req_int("index_head_dim"), index_bytes=index_bytes)


def _attention_spec(layer_type: str, kv: int, kd: int, vd: int, r: ConfigReader, window: int | None, mla=False):
    if layer_type == "full_attention":
        return MLASpec(kv, kd, vd) if mla else FullAttentionSpec(kv, kd, vd)
    if layer_type == "sliding_attention":
        if window is None:
            raise ConfigError("layer_types has sliding layers but no sliding_window: fix the config.json",
                              field="sliding_window")
        return SlidingWindowSpec(kv, kd, vd, sliding_window=window)
    chunk = r.opt_int("attention_chunk_size")
    if chunk is None:
        raise ConfigError("layer_types has chunked layers but no attention_chunk_size: fix the config.json",
                          field="attention_chunk_size")
    return ChunkedAttentionSpec(kv, kd, vd, chunk_size=chunk)


def _build_transformer(r: ConfigReader, notes: list[str]) -> list[tuple]:
    """Every attention-only decoder: MHA, GQA, MQA, MLA, windows, chunks, KV sharing."""
    g = _geometry(r, notes)
    base = kv, kd, vd = _kv_shape(r, g, notes)
    mla = r.used.get("kv_lora_rank") is not None
    window = _window(r)
    if r.get("use_bidirectional_attention") is True and window is not None:
        window = window // 2 + 1  # Gemma 3 config class: exclusive bound for bidirectional attention
    types = _layer_types(r, g.num_layers) or _derived_layer_types(r, g, window)
    overrides = layer_overrides(r, types, base, notes)
    layers = []
    for i, layer_type in enumerate(types):
        kv, kd, vd = overrides.get(i, base)
        if layer_type in ("moe", "mlp", "dummy"):
            layers.append((NoCacheSpec("MoE-only layer" if layer_type == "moe" else "MLP-only layer"),))
        elif layer_type in STATE_TYPES:
            layers.append((state_spec(r, layer_type),))
        elif layer_type == "hybrid":  # Falcon-H1: attention and Mamba-2 side by side in one layer
            layers.append((_attention_spec("full_attention", kv, kd, vd, r, window, mla), state_spec(r, layer_type)))
        elif layer_type == "indexed_attention":
            layers.append((_indexed(r, kv, kd, vd, i),))
        else:
            layers.append((_attention_spec(layer_type, kv, kd, vd, r, window, mla),))
    cross = r.layer_set("cross_attention_layers") or set()
    for i in sorted(cross):
        if i < len(layers):  # Mllama: these layers attend to the image, and cache its tokens, never the text's
            layers[i] = (NoCacheSpec("cross-attention layer (caches image tokens, not text)"),)
    if cross:
        notes.append(f"{len(cross)} cross-attention layers cache the image tokens' K and V, not the text's")
    shared = r.opt_int("num_kv_shared_layers", minimum=0) or 0
    if shared:
        layers[-shared:] = [(NoCacheSpec("reuses the KV of an earlier layer", shares=layer[0]),)
                            for layer in layers[-shared:]]
        notes.append(f"the last {shared} layers reuse earlier layers' KV and store nothing")
    return _looped(r, layers, notes)


def _looped(r: ConfigReader, layers: list[tuple], notes: list[str]) -> list[tuple]:
    """Recurrent-depth decoders (Dory, transformers 5.24 modeling_dory.py) run their middle n_recurrent_layers
    n_recurrent_loops times, and with recurrent_kv_cache_mode "per_loop" each pass caches its own K and V: the
    cache has input + loops x recurrent + output layers (default: 16 + 2 x 40 + 16 = 112 of 72 built)."""
    loops = r.opt_int("n_recurrent_loops")
    if loops is None or loops == 1:
        return layers
    mode = r.get("recurrent_kv_cache_mode")
    if mode != "per_loop":
        raise UnsupportedArchitectureError(f"recurrent_kv_cache_mode {shown(mode)} is not supported yet (kvplan sizes "
                                           "'per_loop'): open an issue with the model id")
    first, middle = r.req_int("n_input_layers", minimum=0), r.req_int("n_recurrent_layers")
    if first + middle > len(layers):
        raise ConfigError(f"n_input_layers + n_recurrent_layers ({first + middle}) exceed the {len(layers)} layers: "
                          "fix the config.json", field="n_recurrent_layers")
    notes.append(f"layers {first}-{first + middle - 1} run {loops} times and cache K and V on every pass")
    r.layer_kinds = tuple(layer_kind(layer) for layer in layers)
    return layers[:first] + layers[first:first + middle] * loops + layers[first + middle:]


def _kv_shape(r: ConfigReader, g: _Geometry, notes: list[str]) -> tuple[int, int, int]:
    """(kv heads, K head dim, V head dim) as the cache stores them."""
    rank = r.get("kv_lora_rank")
    if rank is not None and r.get("qk_rope_head_dim") is not None:
        rank = r.int_("kv_lora_rank", rank)
        rope = r.int_("qk_rope_head_dim", r.get("qk_rope_head_dim"))
        notes.append(f"MLA (kv_lora_rank {rank}, qk_rope_head_dim {rope}): one latent of {rank + rope} "
                     f"per token per layer; num_key_value_heads ({r.get('num_key_value_heads')}) does not apply")
        return 1, rank, rope
    kv = _family_kv_heads(r, g, notes)
    if g.num_heads % kv and r.overrides.kv_heads is None:
        raise ConfigError(f"{g.num_heads} attention heads are not divisible by {kv} KV heads: pass --kv-heads N",
                          field="kv_heads", flag="--kv-heads")
    # MiMo-V2-Flash: K 192, V 128 per head; v_head_dim is read only where the family's attention uses it
    v_dim = r.req_int("v_head_dim") if r.model_type in V_HEAD_DIM_FAMILIES and r.get("v_head_dim") else g.head_dim
    return kv, g.head_dim, v_dim


def _family_kv_heads(r: ConfigReader, g: _Geometry, notes: list[str]) -> int:
    mt = r.model_type
    if r.overrides.kv_heads is not None:
        return g.kv_heads
    if mt == "falcon":
        if r.flag("new_decoder_architecture"):
            notes.append(f"Falcon new_decoder_architecture: transformers caches all {g.num_heads} attention "
                         f"heads, not the {g.kv_heads} KV heads (vLLM caches {g.kv_heads})")
            r.used["engine_kv_heads"] = g.kv_heads  # what serving engines cache (kvplan.planning.engines)
            return g.num_heads
        if r.flag("multi_query", True):
            notes.append("Falcon multi_query: 1 KV head, whatever num_kv_heads says")
            return 1
        return g.kv_heads
    if mt == "gpt_bigcode":
        return 1 if r.flag("multi_query", True) else g.num_heads
    if mt == "chatglm":
        return g.kv_heads if r.flag("multi_query_attention") else g.num_heads
    return g.kv_heads


def _mamba_spec(r: ConfigReader, notes: list[str], prefix: str = "") -> StateSpec:
    """Mamba-1 mixer: conv [I, kernel] + SSM [I, d_state].

    Mamba/FalconMamba: `__post_init__` sets I = expand x hidden, then re-applies the leftover kwargs, so an
    `intermediate_size` in config.json wins (falcon-mamba-7b: expand 16 but intermediate_size 8,192, which
    the weights use; measured 8,192 channels). Jamba always uses mamba_expand x hidden (modeling code).
    """
    hidden = r.need_int(HIDDEN_KEYS, "hidden_size", "--hidden-size", r.overrides.hidden_size)
    expand_key = prefix + "expand"
    given = None if prefix else r.data.get("intermediate_size")
    if given is not None:
        inner = r.int_("intermediate_size", given)
        expand = r.get(expand_key)
        if isinstance(expand, int) and not isinstance(expand, bool) and expand * hidden != inner:
            notes.append(f"intermediate_size {inner:,} from the config wins over expand x hidden "
                         f"= {expand * hidden:,} (as in transformers 5.24)")
    else:
        inner = r.int_(expand_key, r.get(expand_key)) * hidden
    kernel = r.int_(prefix + ("d_conv" if prefix else "conv_kernel"), r.get(prefix + ("d_conv" if prefix else "conv_kernel")))
    state = r.int_(prefix + ("d_state" if prefix else "state_size"), r.get(prefix + ("d_state" if prefix else "state_size")))
    return StateSpec(conv_shape=(inner, kernel), recurrent_shape=(inner, state), mixer="mamba")


def _build_mamba(r: ConfigReader, notes: list[str]) -> list[tuple]:
    n = r.need_int(LAYER_KEYS, "num_layers", "--num-layers", r.overrides.num_layers)
    spec = _mamba_spec(r, notes)
    notes.append("pure SSM: the cache is a constant state per sequence and does not grow with tokens")
    return [(spec,)] * n


def _build_mamba2(r: ConfigReader, notes: list[str]) -> list[tuple]:
    n = r.need_int(LAYER_KEYS, "num_layers", "--num-layers", r.overrides.num_layers)
    hidden = r.need_int(HIDDEN_KEYS, "hidden_size", "--hidden-size", r.overrides.hidden_size)
    inner = r.int_("expand", r.get("expand")) * hidden
    groups, state = r.int_("n_groups", r.get("n_groups")), r.int_("state_size", r.get("state_size"))
    heads, head_dim = r.int_("num_heads", r.get("num_heads")), r.int_("head_dim", r.get("head_dim"))
    kernel = r.int_("conv_kernel", r.get("conv_kernel"))
    spec = StateSpec(conv_shape=(inner + 2 * groups * state, kernel), recurrent_shape=(heads, head_dim, state),
                     mixer="mamba2", groups=groups, group_state=state)
    return [(spec,)] * n


def _build_jamba(r: ConfigReader, notes: list[str]) -> list[tuple]:
    g = _geometry(r, notes)
    period, offset = r.layer_period("attn", g.num_layers)
    attention = FullAttentionSpec(g.kv_heads, g.head_dim, g.head_dim)
    mamba = _mamba_spec(r, notes, prefix="mamba_")
    notes.append(f"attention every {period} layers from layer {offset}; the other layers keep Mamba state")
    return [(attention,) if i % period == offset else (mamba,) for i in range(g.num_layers)]


def _build_qwen3_next(r: ConfigReader, notes: list[str]) -> list[tuple]:
    g = _geometry(r, notes)
    types = _layer_types(r, g.num_layers)
    if types is None:
        interval = r.req_int("full_attention_interval")
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(g.num_layers)]
    k_heads, v_heads = r.req_int("linear_num_key_heads"), r.req_int("linear_num_value_heads")
    k_dim, v_dim = r.req_int("linear_key_head_dim"), r.req_int("linear_value_head_dim")
    kernel = r.req_int("linear_conv_kernel_dim")
    # Gated DeltaNet: conv over q, k and v channels; recurrent state [v_heads, k_dim, v_dim] per sequence.
    gdn = StateSpec(conv_shape=(2 * k_heads * k_dim + v_heads * v_dim, kernel),
                    recurrent_shape=(v_heads, k_dim, v_dim), mixer="gated_deltanet")
    attention = FullAttentionSpec(g.kv_heads, g.head_dim, g.head_dim)
    return [(attention,) if t == "full_attention" else (gdn,) for t in types]


_FAMILY_BUILDERS = {
    "mamba": _build_mamba,
    "falcon_mamba": _build_mamba,
    "mamba2": _build_mamba2,
    "jamba": _build_jamba,
    "qwen3_next": _build_qwen3_next,
    **dict.fromkeys(UNCACHED, _build_uncached),
    # families whose cache no shared rule states (transformers 5.24 modeling files; kvplan.config.families)
    "cpmant": _build_prefixed,
    "deepseek_v4": build_deepseek_v4,
    "rwkv": build_rwkv,
    **dict.fromkeys(("inkling_text", "inkling2_text", "inkling2_loop_text"),
                    lambda r, notes: build_inkling(r, notes, layer_kind)),
    "recurrent_gemma": build_recurrent_gemma,
    "xlstm": lambda r, notes: mlstm_layers(r, r.num_layers()),
}
