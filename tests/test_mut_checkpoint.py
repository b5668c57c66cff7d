"""Tests that kill the mutants tools/mutation.py found surviving in kvplan/model/checkpoint.py (#26).

Checkpoints here are `CheckpointWeights` built by hand from `WeightRow`s (what the safetensors header readers
produce), so every figure is small and its arithmetic is written beside it. Pinned: the order of `by_dtype`
(largest bytes first, not the dtype name's order); a pipeline stage that owns no layers, strided stages past the
last layer, and a checkpoint with no layer rows; float32 kept among 16-bit floats on a stage; every embeddings,
tower and head row summed; `RankRules.share` (vocab padded to 64 then split, whole KV heads, whole experts under
EP over the MoE ranks, attention over its ranks); and `is_usize`'s u64 bound."""
from __future__ import annotations

import pytest

from kvplan.dtypes import BFLOAT16
from kvplan.model.checkpoint import CheckpointWeights, RankRules, WeightRow, is_usize


def _row(component: str, layer: int, dtype: str, nbytes: int) -> WeightRow:
    """One float row, split over TP (not replicated), loaded in the model dtype."""
    return WeightRow(component=component, layer=layer, replicated=False, dtype=dtype, castable=True, tensors=1,
                     bytes=nbytes)


# ----------------------------------------------------------------------------- by_dtype: largest first

def test_by_dtype_orders_by_bytes_not_by_name():
    """F32 holds 300 + 200 = 500 B, BF16 100 B, I32 50 B: largest first gives F32, BF16, I32. The names' own
    order ("BF16" < "F32" < "I32") would put BF16 first, so the order pins the sort key."""
    ck = CheckpointWeights("hand", (
        _row("language_model", 0, "F32", 300),
        _row("language_model", 1, "BF16", 100),
        _row("language_model", 1, "F32", 200),
        _row("embeddings", -1, "I32", 50),
    ), files=1)
    assert list(ck.by_dtype().items()) == [("F32", 500), ("BF16", 100), ("I32", 50)]


# ----------------------------------------------------------------------------- stage_bytes: a stage without layers

def test_stage_owning_no_layers_holds_none_of_them():
    """One layer of 4096 B in BF16 (4096 * 8 // 16 = 2048 elements, back to 2048 * 16 / 8 = 4096 B in bfloat16),
    TP 1: the prefix table is [0, 4096]. A middle stage owning range(0, 0) takes prefix[0] -
    prefix[0] = 0 B; range(0, 1) takes prefix[1] - prefix[0] = 4096 B."""
    ck = CheckpointWeights("hand", (_row("language_model", 0, "BF16", 4096),), files=1)  # 4096 B: 2048 bf16 elements
    args = dict(model_dtype=BFLOAT16, tp=1, first=False, last=False, tied=False)
    assert ck.stage_bytes(layers=range(0, 0), **args) == 0
    assert ck.stage_bytes(layers=range(0, 1), **args) == 4096  # 4096 B / TP 1


def test_a_reversed_range_holds_no_layer():
    """Four layers of 100 B (BF16, TP 1): prefix [0, 100, 200, 300, 400]. range(3, 1) is empty, so the stage holds
    0 B; the bare difference prefix[1] - prefix[3] was -200 B. range(1, 3) holds layers 1 and 2: 200 B. The config
    rule's table (weights/split.py `_StageParts.layers`) answers the same."""
    from kvplan.weights.split import _StageParts

    ck = CheckpointWeights("hand", tuple(_row("language_model", i, "BF16", 100) for i in range(4)), files=1)
    args = dict(model_dtype=BFLOAT16, tp=1, first=False, last=False, tied=False)
    assert ck.stage_bytes(layers=range(3, 1), **args) == 0
    assert ck.stage_bytes(layers=range(1, 3), **args) == 200  # 2 x 100 B
    parts = _StageParts((0, 100, 200, 300, 400), 0, 0, 0, 0, 0, 0, 0)
    assert parts.layers(range(3, 1)) == 0 and parts.layers(range(1, 3)) == 200


def test_stage_of_a_checkpoint_without_layer_rows():
    """Only embeddings (1024 B BF16) and a final norm (64 B, component language_model at layer -1): the prefix
    table is [0] (no layer rows), so a stage's layers add 0 B. The first stage holds the embeddings, 1024 B at
    TP 1; the last holds the norm, 64 B."""
    ck = CheckpointWeights("hand", (
        _row("embeddings", -1, "BF16", 1024),   # 1024 B: 512 bf16 elements, kept at 1024 B
        _row("language_model", -1, "BF16", 64),
    ), files=1)
    args = dict(model_dtype=BFLOAT16, tp=1, tied=False)
    assert ck.stage_bytes(layers=range(0, 0), first=True, last=False, **args) == 1024  # embeddings, 1024 B
    assert ck.stage_bytes(layers=range(0, 4), first=False, last=True, **args) == 64


def test_strided_layers_past_the_last_are_skipped():
    """Two layers of 4096 B and 2048 B (BF16, TP 1): prefix [0, 4096, 6144], top = 2. A strided stage
    range(0, 3, 2) asks layers 0 and 2; layer 2 does not exist, so the stage holds layer 0 only: 4096 B.
    range(1, 6, 2) asks 1, 3, 5: only layer 1, 2048 B."""
    ck = CheckpointWeights("hand", (
        _row("language_model", 0, "BF16", 4096),   # 4096 B: 2048 bf16 elements
        _row("language_model", 1, "BF16", 2048),   # 2048 B: 1024 bf16 elements
    ), files=1)
    args = dict(model_dtype=BFLOAT16, tp=1, first=False, last=False, tied=False)
    assert ck.stage_bytes(layers=range(0, 3, 2), **args) == 4096  # layer 0's 4096 B
    assert ck.stage_bytes(layers=range(1, 6, 2), **args) == 2048  # layer 1's 2048 B


# ----------------------------------------------------------------------------- a stage keeps float32 among bf16

def test_stage_keeps_float32_router_among_bf16():
    """Layer 0 holds a 4096 B BF16 weight and a 1024 B F32 router (MiniMax-M2's gate, kept in float32:
    vllm 0.19 minimax_m2.py params_dtype=torch.float32). With 16-bit floats present the checkpoint keeps F32, so
    in a bfloat16 model the stage holds 4096 + 1024 = 5120 B at TP 1, not 4096 + 512 (the router cast to bf16:
    1024 * 8 // 32 = 256 elements * 2 B = 512 B). The whole-model figure agrees: 5120 B."""
    ck = CheckpointWeights("hand", (
        _row("language_model", 0, "BF16", 4096),   # 4096 B
        _row("language_model", 0, "F32", 1024),    # 1024 B: 256 float32 elements
    ), files=1)
    assert ck.keeps_f32 is True
    assert ck.stage_bytes(BFLOAT16, 1, range(0, 1), first=True, last=True, tied=False) == 5120  # 4096 + 1024
    assert ck.resident_bytes(BFLOAT16) == 5120  # 4096 + 1024 B


def test_all_float32_checkpoint_is_cast_on_a_stage():
    """An all-F32 copy (no 16-bit float rows): keeps_f32 is False, so the 2048 B F32 layer (512 elements) is
    served in bfloat16: 512 * 2 B = 1024 B on the stage, TP 1."""
    ck = CheckpointWeights("hand", (_row("language_model", 0, "F32", 2048),), files=1)  # 2048 B: 512 f32 elements
    assert ck.keeps_f32 is False
    assert ck.stage_bytes(BFLOAT16, 1, range(0, 1), first=True, last=True, tied=False) == 1024  # 512 x 2 B


# ----------------------------------------------------------------------------- _shares: every row summed

def test_skipped_mtp_row_does_not_stop_the_sum():
    """An MTP row listed first (2048 B, skipped: not loaded without speculative decoding) and then layer 0
    (4096 B BF16, TP 1): the stage still holds layer 0's 4096 B, and the skipped row adds nothing."""
    ck = CheckpointWeights("hand", (
        _row("mtp", -1, "BF16", 2048),             # 2048 B, skipped
        _row("language_model", 0, "BF16", 4096),   # 4096 B
    ), files=1)
    assert ck.stage_bytes(BFLOAT16, 1, range(0, 1), first=True, last=True, tied=False) == 4096  # layer 0 only


def test_two_embeddings_rows_both_on_the_first_stage():
    """Token embeddings 1024 B and learned position embeddings 512 B (two `embeddings` rows, BF16, TP 1): the
    first stage holds 1024 + 512 = 1536 B of them; a tied head copied to the last stage of PP 2 is that same
    1536 B rank share again (no lm_head row)."""
    ck = CheckpointWeights("hand", (
        _row("embeddings", -1, "BF16", 1024),      # 1024 B
        _row("embeddings", -1, "BF16", 512),
        _row("language_model", 0, "BF16", 256),
        _row("language_model", 1, "BF16", 256),
    ), files=1)
    assert ck.stage_bytes(BFLOAT16, 1, range(0, 1), first=True, last=False, tied=True) == 1792  # 1536 + 256
    assert ck.stage_bytes(BFLOAT16, 1, range(1, 2), first=False, last=True, tied=True) == 1792  # 256 + 1536 copy


def test_two_tower_rows_and_two_head_rows_are_summed():
    """A vision tower 1024 B and a projector 512 B (both TOWERS) on the first stage: 1536 B; an lm_head weight
    2048 B and a second lm_head row of 256 B (a quantized head's scales) on the last stage: 2304 B. Layers 0
    and 1 of 128 B each, BF16, TP 1, PP 2."""
    ck = CheckpointWeights("hand", (
        _row("vision", -1, "BF16", 1024),          # 1024 B
        _row("projector", -1, "BF16", 512),
        _row("lm_head", -1, "BF16", 2048),         # 2048 B
        _row("lm_head", -1, "BF16", 256),
        _row("language_model", 0, "BF16", 128),
        _row("language_model", 1, "BF16", 128),
    ), files=1)
    assert ck.stage_bytes(BFLOAT16, 1, range(0, 1), first=True, last=False, tied=False) == 1664  # 1536 + 128
    assert ck.stage_bytes(BFLOAT16, 1, range(1, 2), first=False, last=True, tied=False) == 2432  # 128 + 2304


# ----------------------------------------------------------------------------- RankRules.share: the engine's splits
# Rows here are BF16 with `size` the resident bytes; the split rules are kvplan.model.ranks (vLLM 0.33
# vocab_parallel_embedding.py pad to 64, QKVParallelLinear KV heads, determine_expert_map ceil(E / EP)).

def _flag_row(component="language_model", layer=0, nbytes=1024, **flags) -> WeightRow:
    return WeightRow(component=component, layer=layer, replicated=False, dtype="BF16", castable=True, tensors=1,
                     bytes=nbytes, **flags)


@pytest.mark.parametrize("component", ["embeddings", "lm_head"])
def test_vocab_rows_pad_to_64_then_split(component):
    """A 100-row vocabulary of 8 B rows (800 B) on TP 2 under vLLM's pad64: 100 pads to 128 rows, 64 a rank,
    so a rank holds ceil(800 x 64 / 100) = 512 B, not the plain ceil(800 / 2) = 400 B."""
    rules = RankRules(vocab=100, vocab_rule="pad64")
    assert rules.share(_flag_row(component, -1, 800), 800, tp=2, moe_ranks=2, attn_ranks=2) == 512


def test_vocab_rule_leaves_layer_rows_plain():
    """With a vocabulary set, a layer row (1000 B, TP 2) still splits plainly: ceil(1000 / 2) = 500 B (the
    vocab padding would give ceil(1000 x 64 / 100) = 640 B)."""
    rules = RankRules(vocab=100, vocab_rule="pad64")
    assert rules.share(_flag_row(nbytes=1000), 1000, tp=2, moe_ranks=2, attn_ranks=2) == 500  # 1000 / 2


def test_no_vocab_means_a_plain_embeddings_split():
    """vocab 0 (learned positions in the rows): a plain split even with a padding rule named, ceil(800 / 2) =
    400 B, not a padded split of a 0-row vocabulary."""
    rules = RankRules(vocab=0, vocab_rule="pad64")
    assert rules.share(_flag_row("embeddings", -1, 800), 800, tp=2, moe_ranks=2, attn_ranks=2) == 400


@pytest.mark.parametrize("layer", [0, 1])
def test_routed_experts_whole_under_expert_parallelism(layer):
    """4 experts a layer (1200 B of them) over 3 MoE ranks with EP: the heaviest rank holds ceil(4 / 3) = 2
    whole experts, ceil(1200 x 2 / 4) = 600 B, not the sharded ceil(1200 / 3) = 400 B. TP 1, so the MoE ranks
    (not TP) must be the divisor. Layer 0 and layer 1 both read their own count."""
    rules = RankRules(experts=(4, 4), expert_parallel=True)
    assert rules.share(_flag_row(layer=layer, nbytes=1200, expert=True), 1200, tp=1, moe_ranks=3,
                       attn_ranks=1) == 600  # 1200 B x 2 / 4


def test_experts_past_the_table_are_sharded():
    """An expert row at layer 5 where the table knows 1 layer: no expert count, so the experts shard over the 3
    MoE ranks, ceil(1200 / 3) = 400 B (a count of 1 would keep all 1200 B whole on one rank)."""
    rules = RankRules(experts=(4,), expert_parallel=True)
    assert rules.share(_flag_row(layer=5, nbytes=1200, expert=True), 1200, tp=1, moe_ranks=3,
                       attn_ranks=1) == 400  # 1200 B / 3


def test_experts_shard_over_moe_ranks_without_ep():
    """Without expert parallelism, 1200 B of experts over moe_ranks 3 (TP 1): ceil(1200 / 3) = 400 B."""
    rules = RankRules(experts=(4,), expert_parallel=False)
    assert rules.share(_flag_row(nbytes=1200, expert=True), 1200, tp=1, moe_ranks=3, attn_ranks=1) == 400


def test_kv_projection_keeps_whole_heads():
    """A k_proj of 2 KV heads (1024 B) over 4 attention ranks: one head a rank (max(1, 2 // 4) = 1), so
    ceil(1024 x 1 / 2) = 512 B, not ceil(1024 / 4) = 256 B."""
    rules = RankRules(kv_heads=2)
    assert rules.share(_flag_row(nbytes=1024, attention=True, kv=True), 1024, tp=4, moe_ranks=4,
                       attn_ranks=4) == 512  # 1024 B x 1 / 2


def test_query_projection_splits_over_attention_ranks():
    """A q_proj (attention, not kv) of 1024 B with kv_heads 2 known: split over the 2 attention ranks, not TP 4
    and not by KV heads: ceil(1024 / 2) = 512 B. With attention ranks 4: 256 B."""
    rules = RankRules(kv_heads=2)
    row = _flag_row(nbytes=1024, attention=True)   # 1024 B
    assert rules.share(row, 1024, tp=4, moe_ranks=4, attn_ranks=2) == 512   # 1024 / 2
    assert rules.share(row, 1024, tp=4, moe_ranks=4, attn_ranks=4) == 256   # 1024 / 4, not 1 head of 2 = 512


def test_kv_row_without_kv_heads_splits_plainly():
    """kv_heads 0 (unknown): a k_proj of 1024 B splits over its 4 attention ranks, ceil(1024 / 4) = 256 B."""
    assert RankRules().share(_flag_row(nbytes=1024, attention=True, kv=True), 1024, tp=4, moe_ranks=4,
                             attn_ranks=4) == 256  # 1024 / 4


# ----------------------------------------------------------------------------- is_usize: a u64 count

@pytest.mark.parametrize("value, expected", [
    (0, True),
    (2**64 - 1, True),      # u64::MAX = 18,446,744,073,709,551,615: the largest usize safetensors stores
    (2**64, False),         # one past u64::MAX: no usize holds it
    (2**64 + 1, False),
    (-1, False),
    (True, False),          # JSON true, a bool, not a count
    (1.0, False),
])
def test_is_usize_bounds(value, expected):
    """safetensors reads shapes and offsets as usize (u64 on 64-bit hosts: 0 to 2**64 - 1), so 2**64 is out."""
    assert is_usize(value) is expected
