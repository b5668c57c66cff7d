"""Weights of the recurrent families, tensor by tensor as transformers 5.24 builds them (part of the config
boundary). Their caches are in `kvplan.config.families`; these are the parameters around them.

- RWKV-4 (modeling_rwkv.py, RwkvForCausalLM): no attention heads. Each RwkvBlock: two LayerNorms (ln1, ln2; block 0
  adds pre_ln, the "ln0"), time mixing (key / value / receptance [A, H], output [H, A], time_decay and time_first
  [A], time_mix_key / value / receptance [H]) and channel mixing (key [I, H], value [H, I], receptance [H, H],
  time_mix_key / receptance [H]), no biases; embeddings [V, H], ln_out, head [V, H] (tied by
  tie_word_embeddings, False in RwkvConfig).
- RecurrentGemma (modeling_recurrent_gemma.py): each block two RMSNorms (temporal_pre_norm, channel_pre_norm) and
  a gated MLP of intermediate_size // 2 with biases, plus a temporal block by `block_types`: attention (q / k / v
  biased by attention_bias, o_proj always biased) or a recurrent block (linear_x / linear_y [W, H], linear_out
  [H, W], all biased; a depthwise conv1d [W, 1, conv1d_width] + bias; the RG-LRU's recurrent_param [W] and two
  block-diagonal gates of heads blocks [W/heads, W/heads] with biases [W]). Embeddings tied to lm_head by default.
"""

from __future__ import annotations

from ..model.arch import AttentionDims, LayerDims, MLPDims
from .families import recurrent_gemma_heads, recurrent_gemma_types
from .reader import ConfigReader

Extra = tuple[str, int, tuple[int, int] | None]


def rwkv(r: ConfigReader, hidden: int, n: int) -> list[LayerDims]:
    """RWKV-4 defaults (H = A = 4,096, I = 16,384): time mixing 4 x 4,096^2 + 5 x 4,096 = 67,129,344, channel
    mixing 2 x 16,384 x 4,096 + 4,096^2 + 2 x 4,096 = 151,003,136, two LayerNorms 16,384: 218,148,864 a block."""
    # RwkvConfig.__post_init__: attention_hidden_size or hidden_size, intermediate_size or 4 x hidden_size
    att = r.opt_int("attention_hidden_size") or hidden
    inter = r.opt_int("intermediate_size") or 4 * hidden
    time_mix: tuple[Extra, ...] = ((("mixer", att * hidden, (att, hidden)),) * 3
                                   + (("mixer", hidden * att, (hidden, att)), ("mixer", 2 * att + 3 * hidden, None)))
    # the channel mix's key [I, H] and value [H, I] are an un-gated MLP; its receptance and mixes are the extra
    channel: tuple[Extra, ...] = (("mlp", hidden * hidden, (hidden, hidden)), ("mlp", 2 * hidden, None))
    block = LayerDims(None, MLPDims(inter, gated=False), 2, time_mix + channel)
    first = LayerDims(None, MLPDims(inter, gated=False), 3, time_mix + channel)   # pre_ln: LayerNorm [H] + bias
    return [first] + [block] * (n - 1)


def recurrent_gemma(r: ConfigReader, hidden: int, n: int) -> list[LayerDims]:
    """RecurrentGemma-2B defaults (26 blocks, 18 recurrent and 8 attention; H = W = 2,560, 10 heads x 256, MLP
    7,680 // 2 = 3,840): a recurrent block 3 x 2,560^2 + 3 x 2,560 + 2,560 x 4 + 2,560 + 2,560 + 2 x (10 x 256^2 +
    2,560) = 20,999,680, an attention block 4 x 2,560^2 + 2,560 = 26,216,960, the MLP 3 x 3,840 x 2,560 + 2 x 3,840
    + 2,560 = 29,501,440; with the tied embeddings [256,000, 2,560] 2,010,263,040 in all."""
    heads, kv, head_dim = recurrent_gemma_heads(r)
    bias = r.flag("attention_bias")
    attn = AttentionDims(heads, kv, head_dim, head_dim, bias, bias, bias, True)
    width = r.opt_int("lru_width") or hidden
    kernel = r.req_int("conv1d_width", default=4)
    block = width // heads   # RecurrentGemmaRglru.block_width: lru_width // num_attention_heads
    recurrent: tuple[Extra, ...] = (
        ("mixer", width * hidden, (width, hidden)), ("mixer", width, None),     # linear_y
        ("mixer", width * hidden, (width, hidden)), ("mixer", width, None),     # linear_x
        ("mixer", hidden * width, (hidden, width)), ("mixer", hidden, None),    # linear_out
        ("mixer", width * kernel + width, None),                                # conv_1d weight [W, 1, k] + bias
        # rg_lru: recurrent_param [W], input and recurrent gate weights [heads, block, block] and biases
        ("mixer", width + 2 * heads * block * block + 2 * heads * block, None))
    mlp = MLPDims(r.req_int("intermediate_size") // 2, bias=True)   # RecurrentGemmaMlp: intermediate_size // 2
    layers = {"sliding_attention": LayerDims(attn, mlp, 2), "linear_attention": LayerDims(None, mlp, 2, recurrent)}
    return [layers[t] for t in recurrent_gemma_types(r, n)]
