"""DeepSeek-V4's weights, block by block as transformers 5.24 builds them (part of the config boundary:
models/deepseek_v4/modeling_deepseek_v4.py and configuration_deepseek_v4.py).

No generic trait says how a V4 block is wired:
- attention (DeepseekV4Attention): q through q_lora_rank (q_a_proj [q, H], q_a_norm [q], q_b_proj [heads x d, q]),
  one shared KV head (kv_proj [d, H], kv_norm [d]), a grouped output projection (o_a_proj [g x r, heads x d / g],
  o_b_proj [H, g x r]) and a sink logit per head, where d = head_dim, g = o_groups, r = o_lora_rank;
- a compressor on CSA and HCA layers (DeepseekV4CSACompressor / HCACompressor): kv_proj and gate_proj [w, H],
  position_bias [rate, w], kv_norm [d], with w = 2d on CSA layers (two overlapping series) and d on HCA ones; a
  CSA compressor adds a lightning indexer (DeepseekV4Indexer) of the same shape at index_head_dim c, plus
  q_b_proj [index_n_heads x c, q] and scorer.weights_proj [index_n_heads, H];
- MoE on every layer (DeepseekV4SparseMoeBlock): experts gate_up [E, 2I, H] and down [E, H, I], a router [E, H],
  one shared MLP of moe_intermediate_size; the first hash_moe layers route by a persistent int64 tid2eid
  [vocab, top_k] (DeepseekV4HashRouter), the others keep an e_score_correction_bias [E] in float32;
- hyper-connections (DeepseekV4HyperConnection, attn_hc and ffn_hc): fn [(2 + n) x n, n x H], base [(2 + n) x n]
  and scale [3] with n = hc_mult; at the top hc_head (DeepseekV4HyperHead): [n, n x H], [n], [1].

_keep_in_fp32_modules_strict keeps the hyper-connections, sinks, position biases, q_a_norm, kv_norm and the block
and final norms in float32 (extras marked float32); _keep_in_fp32_modules leaves the compressor's and indexer's kv_proj,
gate_proj and weights_proj unquantized in an fp8 checkpoint (listed without a matrix shape). The num_nextn_predict
MTP layers are in the checkpoint but not built ("not instantiated here", DeepseekV4Config), so not counted.
V4-Flash: 284,332,230,231 parameters.
"""

from __future__ import annotations

from ..errors import ConfigError, shown
from ..model.arch import AttentionDims, LayerDims, MLPDims, MoEDims
from .families import CSA, HCA, V4_TYPES, _types, _v4_derived, _v4_rates
from .reader import VOCAB_KEYS, ConfigReader

Extra = tuple[str, int, tuple[int, int] | None]
Fp32 = tuple[str, int]
MLP_TYPES = ("hash_moe", "moe")
HASH_LAYERS = 3  # DeepseekV4Config.default_num_hash_layers


def _linear(rows: int, cols: int, packed: bool = True) -> Extra:
    """An nn.Linear(cols -> rows) weight; `packed` False: left unquantized in an fp8 checkpoint."""
    return ("attention", rows * cols, (rows, cols) if packed else None)


def _attention(r: ConfigReader, hidden: int, heads: int, d: int) -> tuple[list[Extra], list[Fp32]]:
    """The projections every layer has. V4-Flash: o_a_proj [8 x 1,024, 64 x 512 / 8] = [8,192, 4,096]."""
    q = r.req_int("q_lora_rank")
    groups, rank = r.req_int("o_groups"), r.req_int("o_lora_rank")
    if heads * d % groups:
        raise ConfigError(f"o_groups {groups} does not divide num_attention_heads x head_dim ({heads} x {d}): fix "
                          "the config.json", field="o_groups")
    extra = [_linear(q, hidden), _linear(heads * d, q), _linear(d, hidden),
             _linear(groups * rank, heads * d // groups), _linear(hidden, groups * rank)]
    return extra, [("attention", heads + q + d)]   # sinks [heads], q_a_norm [q], kv_norm [d]


def _compressor(r: ConfigReader, hidden: int, d: int, kind: str, rate: int) -> tuple[list[Extra], list[Fp32]]:
    """A CSA layer's compressor and indexer, or an HCA layer's compressor. V4-Flash CSA: [1,024, 4,096] x 2,
    position_bias [4, 1,024]; indexer [256, 4,096] x 2, [4, 256], q_b_proj [8,192, 1,024], weights_proj [64, 4,096]."""
    width = 2 * d if kind == CSA else d
    extra = [_linear(width, hidden, packed=False)] * 2
    fp32 = [("attention", rate * width + d)]   # position_bias [rate, w], kv_norm [d]
    if kind == CSA:
        c, index_heads = r.req_int("index_head_dim"), r.req_int("index_n_heads")
        extra += [_linear(2 * c, hidden, packed=False)] * 2 + [_linear(index_heads * c, r.req_int("q_lora_rank")),
                                                                _linear(index_heads, hidden, packed=False)]
        fp32.append(("attention", rate * 2 * c + c))
    return extra, fp32


def _hyper(r: ConfigReader, hidden: int) -> int:
    """One hyper-connection's parameters: hc_mult 4 at 4,096 wide: 24 x 16,384 + 24 + 3 = 393,243."""
    n = r.req_int("hc_mult")
    return (2 + n) * n * n * hidden + (2 + n) * n + 3


def _mlp_types(r: ConfigReader, n: int) -> list[str]:
    """`mlp_layer_types`, else DeepseekV4Config.__post_init__'s: the first num_hash_layers (default 3) hash_moe."""
    value = r.get("mlp_layer_types")
    if value is None:
        hashed = r.opt_int("num_hash_layers", minimum=0, default=HASH_LAYERS)
        return ["hash_moe"] * min(n, hashed) + ["moe"] * max(0, n - hashed)
    if not isinstance(value, list) or len(value) != n or any(v not in MLP_TYPES for v in value):
        raise ConfigError(f"config field 'mlp_layer_types' must give hash_moe or moe for each of the {n} layers, got "
                          f"{shown(value)}: fix the config.json", field="mlp_layer_types")
    return value


def _moe(r: ConfigReader, hashed: bool, notes: list[str]) -> MoEDims:
    """The MoE block; its shared MLP is DeepseekV4MLP of `intermediate_size`, which attribute_map reads as
    moe_intermediate_size, one of it whatever n_shared_experts says."""
    inter = r.req_int("moe_intermediate_size")
    expert = MLPDims(inter, fused_gate_up=True)
    bias = r.flag("mlp_bias")
    return MoEDims(r.req_int("n_routed_experts"), r.req_int("num_experts_per_tok"), expert,
                   shared=MLPDims(inter, bias=bias), score_bias=not hashed,
                   hash_vocab=r.need_int(VOCAB_KEYS, "vocabulary size") if hashed else 0)


def deepseek_v4(r: ConfigReader, hidden: int, heads: int, n: int,
                notes: list[str]) -> tuple[list[LayerDims], tuple[Fp32, ...]]:
    """DeepseekV4Model's blocks and its float32 tensors outside them (the final norm, hc_head)."""
    d = r.req_int("head_dim")
    types = _types(r, n, V4_TYPES, _v4_derived)
    rates = _v4_rates(r)
    mlp = _mlp_types(r, n)
    shared = r.get("n_shared_experts")
    if shared is not None and shared != 1:
        notes.append(f"n_shared_experts {shown(shared)}: transformers 5.24 builds one shared MLP of "
                     "moe_intermediate_size per layer whatever it says (DeepseekV4SparseMoeBlock), and so does "
                     "kvplan's count")
    mtp = r.opt_int("num_nextn_predict_layers", minimum=0) or 0
    if mtp:
        notes.append(f"num_nextn_predict_layers {mtp}: the checkpoint also stores {mtp} MTP layer(s), which "
                     "transformers 5.24 does not build (DeepseekV4Config: \"not instantiated here\"); not counted")
    attn, attn_fp32 = _attention(r, hidden, heads, d)
    hyper = _hyper(r, hidden)
    dims = AttentionDims(heads, 1, d, d, sinks=True)   # sizes activations; the tensors are the extras
    moes = {kind: _moe(r, kind == "hash_moe", notes) for kind in set(mlp)}
    kinds: dict[tuple[str, str], LayerDims] = {}
    for key in set(zip(types, mlp)):
        extra, fp32 = _compressor(r, hidden, d, key[0], rates[key[0]]) if key[0] != "sliding_attention" else ([], [])
        # input_layernorm and post_attention_layernorm [H], attn_hc and ffn_hc
        fp32 = attn_fp32 + fp32 + [("norms", 2 * hidden), ("other", 2 * hyper)]
        kinds[key] = LayerDims(dims, moes[key[1]], 0, tuple(attn + extra) + _float32(fp32), mixer_weights=False)
    n_hc = r.req_int("hc_mult")
    top = _float32([("norms", hidden), ("other", n_hc * n_hc * hidden + n_hc + 1)])
    return [kinds[key] for key in zip(types, mlp)], top


def _float32(tensors: list[tuple[str, int]]) -> tuple[tuple[str, int, None, bool], ...]:
    """(group, elements) as family extras marked float32 (kvplan.model.arch.LayerDims.extra's fourth element)."""
    return tuple((group, numel, None, True) for group, numel in tensors)
