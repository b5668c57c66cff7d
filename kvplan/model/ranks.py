"""How many rows of a TP-split tensor one rank holds: the vocabulary (padded first), KV heads (replicated past
their number) and routed experts (whole under expert parallelism), and the bytes of a pipeline stage's layers. Pure
integer arithmetic, shared by the config rule (kvplan.weights.split), a checkpoint's headers
(kvplan.model.checkpoint) and the drafters (spec_decode).
"""

from __future__ import annotations

from math import ceil

# vLLM 0.6.0-0.33.0 model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE = 64, and SGLang
# 0.5.23 srt/layers/vocab_parallel_embedding.py the same: embed_tokens and lm_head rows padded to a multiple of it
VOCAB_PADDING = 64
# how the vocabulary pads: "pad64" (vLLM 0.6-0.33, SGLang before 0.5.22), "pad64_tp" (SGLang 0.5.22+), "" none
VOCAB_RULES = ("pad64", "pad64_tp", "")
SGLANG_PAD_TP_FROM = (0, 5, 22)


def vocab_rule(engine: str, version: tuple = ()) -> str:
    """The padding rule of an engine release: SGLang widens the padding to 64 x TP from 0.5.22 (before, only on
    CPU: 0.5.1-0.5.21 vocab_parallel_embedding.py `if _is_cpu and pad_vocab_size(...) % self.tp_size != 0`)."""
    if engine == "sglang":
        return "pad64_tp" if tuple(version) >= SGLANG_PAD_TP_FROM else "pad64"
    return "pad64" if engine == "vllm" else ""


def padded_vocab(vocab: int, tp: int, rule: str) -> int:
    """The rows VocabParallelEmbedding / ParallelLMHead allocate over all TP ranks.

    vLLM 0.33 (and 0.6.0) `VocabParallelEmbedding.__init__`: num_embeddings_padded = pad_vocab_size(vocab, 64), then
    num_embeddings_per_partition = divide(padded, tp), which asserts that TP divides it (`vocab_divides` lets the
    planner refuse such a TP first); SGLang before 0.5.22 the same on GPUs. SGLang 0.5.22-0.5.23
    `VocabParallelEmbedding.__init__`: "Support the case where the vocab size is not divisible by the TP size": if
    pad_vocab_size(vocab, 64) % tp, padding_size *= tp. gpt-j-6b's 50,400 rows pad to 50,432 (788 x 64); Qwen2's
    151,936 (2,374 x 64) stay, and SGLang 0.5.23 at TP 3 pads them to 152,064 (792 x 192)."""
    if not rule:
        return vocab
    padded = -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
    if rule == "pad64_tp" and padded % tp:
        step = VOCAB_PADDING * tp
        padded = -(-vocab // step) * step
    return padded


def vocab_divides(vocab: int, tp: int, rule: str) -> bool:
    """Whether TP divides the padded vocabulary, as `divide()` asserts at start-up (vLLM, SGLang before 0.5.22)."""
    return padded_vocab(vocab, tp, rule) % tp == 0


def vocab_refusal(name: str, vocab: int, tp: int, rule: str, engine: str) -> str:
    """Why the engine cannot split this vocabulary over TP, or "": vLLM 0.6-0.33 and SGLang before 0.5.22 pad it to
    a multiple of 64 and `divide()` the rows by TP, an assertion at start-up. Qwen2-7B's 151,936 rows (2,374 x 64)
    over TP 3: 50,645.33 a rank."""
    padded = padded_vocab(vocab, tp, rule)
    if not rule or padded % tp == 0:
        return ""
    return (f"{name}'s vocabulary of {vocab:,} rows pads to {padded:,} (a multiple of {VOCAB_PADDING}), which TP {tp} "
            f"does not divide: {engine}'s VocabParallelEmbedding asserts it does at start-up "
            "(vocab_parallel_embedding.py, divide()); use a TP that divides it")


def vocab_rows_per_rank(vocab: int, tp: int, rule: str) -> int:
    """Rows of the vocabulary one TP rank holds: the padded vocabulary / TP (vocab_range_from_global_vocab_size:
    `divide(global_vocab_size, world_size)`, every rank the same count). gpt-j-6b on vLLM TP 2: 50,432 / 2 = 25,216
    rows, not 25,200. Without an engine, ceil(vocab / TP)."""
    return -(-padded_vocab(vocab, tp, rule) // tp)


def vocab_share(size: int, vocab: int, tp: int, rule: str) -> int:
    """One rank's bytes of a [vocab, ...] tensor of `size` bytes: its rows per rank x the bytes of a row (a
    quantized lm_head's scales scale with its rows). gpt-j-6b's bf16 embed_tokens on vLLM TP 2: 50,400 x 4,096 x 2 B
    = 412,876,800 B whole; 25,216 rows x 8,192 B = 206,569,472 B a rank (131,072 B more than half)."""
    if not rule:
        return ceil(size / tp)
    return ceil(size * vocab_rows_per_rank(vocab, tp, rule) / vocab)


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads one rank holds: max(1, kv / tp). vLLM 0.6-0.33 layers/linear.py QKVParallelLinear: `if tp_size >=
    self.total_num_kv_heads: self.num_kv_heads = 1; self.num_kv_head_replicas = divide(tp_size,
    self.total_num_kv_heads)`; SGLang 0.5.23 srt/layers/linear.py QKVParallelLinear the same. Llama-3.1-70B's 8 KV
    heads on TP 16: 1 head a rank, each held by 2 ranks."""
    return max(1, kv_heads // tp)


def heads_share(size: int, even_rows: int, kv_rows: int, kv_heads: int, tp: int) -> int:
    """One rank's bytes of a projection whose `even_rows` split over TP (query heads) and whose `kv_rows` are
    `kv_heads` heads, replicated past TP = kv_heads. Llama-3.1-70B's k_proj [1,024, 8,192] bf16 (16 MiB) on TP 16:
    1 head of 128 rows = 2,097,152 B a rank, not 1,048,576."""
    rows = -(-even_rows // tp) + kv_rows // kv_heads * kv_heads_per_rank(kv_heads, tp)
    return ceil(size * rows / (even_rows + kv_rows))


def experts_per_rank(experts: int, ranks: int) -> int:
    """Whole experts the heaviest rank holds under expert parallelism: ceil(E / EP). vLLM 0.33
    fused_moe/expert_map_manager.py determine_expert_map: base = E // ep_size, and the first E % ep_size ranks take
    base + 1 ("linear" placement; "round_robin" gives the same counts). 256 experts over EP 24: 16 ranks hold 11,
    8 hold 10; the plan prices the heaviest, 11, not 256 / 24 = 10.67."""
    return -(-experts // ranks)


def experts_share(size: int, experts: int, ranks: int, expert_parallel: bool) -> int:
    """One rank's bytes of `experts` routed experts totalling `size` bytes over `ranks` MoE ranks: whole experts
    (the heaviest rank's ceil(E / EP)) under expert parallelism, else each expert sharded over every rank
    (ceil(size / ranks)). DeepSeek-V3's 256 experts of one layer, 11,277,041,664 B in fp8 (gate, up, down of
    [2,048, 7,168] with 128 x 128 float32 scales: 44,050,944 B an expert), on EP 24: 11 x 44,050,944 = 484,560,384 B,
    not 469,876,736."""
    if expert_parallel and experts > 0:
        return ceil(size * experts_per_rank(experts, ranks) / experts)
    return ceil(size / ranks)


def rank_share(group: str, size: int, whole: bool, split: tuple, tp: int, moe_ranks: int, attn_ranks: int,
               vocab_rule: str = "pad64", expert_parallel: bool = False) -> int:
    """One rank's bytes of a priced tensor (kvplan.weights.rule `_priced_rows`, or a checkpoint's header row: `kvplan.model.checkpoint.RankRules`): whole, the vocabulary padded and
    split over TP, KV heads over the attention ranks (one a rank past their number), routed experts over the MoE
    ranks (whole ones under expert parallelism), attention over its ranks, the rest over TP."""
    if whole:
        return size
    kind = split[0] if split else ""
    if kind == "vocab":
        return vocab_share(size, split[1], tp, vocab_rule)
    if kind == "kv":
        return heads_share(size, split[1], split[2], split[3], attn_ranks)
    if group == "experts":
        return experts_share(size, split[1] if kind == "experts" else 0, moe_ranks, expert_parallel)
    return ceil(size / (attn_ranks if group == "attention" else tp))


def layers_span(prefix: tuple[int, ...], layers: range) -> int:
    """The bytes of `layers` from `prefix` (prefix[i]: the bytes of layers 0..i-1), layers past the model ignored.

    A plain range is two lookups, clamped: range(3, 1) holds no layer and gives 0 B, not prefix[1] - prefix[3]; with
    prefix (0, 5, 12, 20) (3 layers), range(1, 9) gives 20 - 5 = 15. A strided range sums its layers one by one.
    """
    top = len(prefix) - 1
    if layers.step != 1:
        return sum(prefix[i + 1] - prefix[i] for i in layers if 0 <= i < top)
    start = max(0, min(layers.start, top))
    stop = max(start, min(layers.stop, top))
    return prefix[stop] - prefix[start]
