"""Speculative decoding's memory: the drafter's weights on each rank and its KV layers in the same pool.

Read from vLLM 0.33.0 (v1/spec_decode/, model_executor/models/{deepseek_mtp,llama_eagle3}.py) and SGLang 0.5.23
(srt/speculative/, model_executor/model_runner.py):

- `mtp` (DeepSeek-V3 / R1: num_nextn_predict_layers = 1; Qwen3.5 / 3.6: mtp_num_hidden_layers = 1, a full-attention
  layer): the checkpoint's MTP block, one decoder layer like the
  last (MLA + MoE) with enorm, hnorm and eh_proj [H, 2H]; vLLM shares embed_tokens and shared_head with the target
  (deepseek_mtp.py), so they cost nothing more. DeepSeek's eh_proj is a plain nn.Linear, whole on every rank (2 x
  7,168 x 7,168 x 2 B = 196 MiB in bf16); Qwen3.5's and Qwen3-Next's fc [H, 2H] is a ColumnParallelLinear
  (qwen3_5_mtp.py:98, qwen3_next_mtp.py:79, gather_output=True), split over TP. Its KV is one more MLA layer per MTP layer: 62 x 1,152 B = 71,424 B per token.
  k speculative tokens reuse the n MTP layers (spec_step_idx % n), so k must be a multiple of n.
- `eagle3` (a head such as yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): its one layer TP-sharded like a target layer,
  except that q/k/v read 2 x hidden (the embedding and the fused hidden state); fc [H, aux x target_hidden_size]
  replicated ([H, 3H] for yuhuili's), with its input norms where the config asks; its own lm_head over
  draft_vocab_size rows, vocabulary-parallel; d2t, int64 per draft token; embed_tokens shared. A head trained for
  another width than the target's hidden states is refused.
- `eagle` (EAGLE-1 heads): one layer over hidden whose first input_layernorm is an nn.Identity (llama_eagle.py,
  0.8.4+), fc [H, 2H] replicated, embed and lm_head shared.
- `draft_model` (a whole small model): all of its weights, TP-sharded like the target, all of its layers' KV.

The draft's layers are cached in the target's pool, so a token costs the target's bytes plus the draft's: in vLLM
they join the target's uniform group, or the buckets of equal specs a hybrid's groups are cut from (engines/vllm_kv.py
`kv_groups`; v1/core/kv_cache_planning.py); SGLang 0.5.23 sizes its cell as target x (1 + draft layers / target
layers) and gives the draft its own pool of as many tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...errors import WorkloadError, shown
from ...model.layers import StateSpec
from ...model.ranks import heads_share, vocab_share
from ...units import fmt_bytes
from ...weights.rule import tensor_bytes
from ...weights.split import rank_share, stage_weight_bytes
from .vllm_kv import VllmLayerSpec, rank_layer_specs

METHODS = ("mtp", "eagle3", "eagle", "draft_model")
# families vLLM 0.33 drafts with deepseek_mtp.py (config/speculative.py: deepseek_v3, deepseek_v32 and glm_moe_dsa
# become "deepseek_mtp"), whose eh_proj is a plain nn.Linear (deepseek_mtp.py:87), whole on every rank
DEEPSEEK_MTP = frozenset({"deepseek_v3", "deepseek_v32", "glm_moe_dsa"})


@dataclass(frozen=True)
class Speculative:
    """--speculative-config: the method, k tokens, and the drafter's config (eagle / eagle3 / draft_model)."""

    method: str
    num_speculative_tokens: int
    draft: object | None = None   # a ModelSpec
    draft_argument: str = ""      # what the command names the draft by


def check(model, spec: Speculative) -> Speculative:
    """A speculative config kvplan can size, or a WorkloadError saying what to pass instead."""
    if spec.method not in METHODS:
        raise WorkloadError(f"speculative method {shown(spec.method)} is not one kvplan sizes: use "
                            f"{', '.join(METHODS)}")
    k = spec.num_speculative_tokens
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
        raise WorkloadError(f"speculative tokens must be a whole number from 1 to 64, got {shown(k)}")
    if spec.method == "mtp":
        shape = model.require_arch()
        n = shape.mtp_layers
        if not n and shape.mtp_unloaded:
            raise WorkloadError(f"{model.name}: {shape.mtp_unloaded}: use an EAGLE head or a draft model")
        if not n:
            raise WorkloadError(f"{model.name}'s config declares no MTP layers kvplan reads (num_nextn_predict_layers "
                                "of DeepSeek-V3 / V3.2 and GLM-5 configs, mtp_num_hidden_layers of Qwen3.5 / 3.6; Qwen3-Next's "
                                "one, unnamed): use an EAGLE head or a draft model")
        if unlike := _unlike_last(model):
            raise WorkloadError(f"{unlike}: use an EAGLE head or a draft model")
        if k % n:
            raise WorkloadError(f"{k} speculative tokens do not divide over {model.name}'s {n} MTP layers: use a "
                                f"multiple of {n}")
        if spec.draft is not None:
            raise WorkloadError("MTP drafts with the checkpoint's own layers: leave the draft model out")
    elif spec.draft is None:
        raise WorkloadError(f"speculative method {spec.method} needs the draft's config: name the draft model")
    if spec.method == "draft_model":
        _check_vocab(model, spec.draft)
    if spec.method == "eagle3" and not spec.draft.require_arch().draft_vocab:
        raise WorkloadError(f"{spec.draft.name} is not an EAGLE-3 head (its config has no draft_vocab_size with an "
                            "Eagle architecture): use method draft_model for a whole model")
    if spec.method in ("eagle", "eagle3"):
        _check_head(model, spec)
    return spec


def _check_vocab(model, draft) -> None:
    """A draft model proposes token ids of its own vocabulary, so both engines ask it to be the target's: vLLM
    (config/speculative.py `verify_equal_vocab_size_if_draft_model`, 0.19.0 :824, 0.33.0 :2040, called by
    v1/spec_decode/draft_model.py `_raise_if_vocab_size_mismatch` unless use_heterogeneous_vocab, 0.25+, which
    kvplan does not plan) and SGLang (0.5.23 speculative/standalone_worker_v2.py `_validate_vocab_compatibility`)
    raise at start-up. gemma-3-1b-it's 262,144 entries do not draft for gemma-3-27b-it's 262,208."""
    ours, theirs = draft.require_arch().vocab, model.require_arch().vocab
    if ours != theirs:
        raise WorkloadError(f"the draft model {draft.name} has a vocabulary of {ours:,} tokens and {model.name} one "
                            f"of {theirs:,}: vLLM and SGLang refuse a draft model whose vocab_size is not the "
                            "target's, so use a draft of the same tokenizer")


def check_vllm_draft_state(model, spec: Speculative) -> None:
    """A draft model with state layers (Mamba, Gated DeltaNet) beside a target without any. vLLM 0.33 assumes
    there is none (v1/core/kv_cache_coordinator.py :873-874: "draft models have no mamba layers"): its V1 runner
    asserts "All drafting layers should belong to the same kv cache group" at start-up (v1/spec_decode/
    llm_base_proposer.py `validate_same_kv_cache_group` :1689-1709), and under V2 the draft's own config hook sets
    the Mamba cache mode and gives its states k speculative pages and k more conv columns, where kvplan, reading the
    mode from the target, planned one page: tiiuae/falcon-mamba-7b drafting for tiiuae/falcon-40b-instruct (one
    vocabulary of 65,024). SGLang's draft pool keeps no state (engines/sglang.py `_check_draft`). A hybrid target's
    mode and widening are the draft's too (the cache config is shared), and that case is planned, with the block
    from the target alone and a draft state too large for the target's padded page refused
    (vllm_kv.hybrid_block_size)."""
    draft = spec.draft
    if spec.method == "draft_model" and draft.has_state and not model.has_state:
        raise WorkloadError(f"the draft model {draft.name} holds {' and '.join(sorted(draft.state_mixers))} state "
                            f"and {model.name} none, which vLLM's draft-model path does not expect (its V1 runner "
                            "refuses it at start-up) and kvplan does not plan: use a draft of attention layers")


def _check_head(model, spec: Speculative) -> None:
    """An EAGLE head reads the target's hidden states, so it is trained for one width: EAGLE-3's fc takes
    target_hidden_size (else its hidden_size) per aux state, EAGLE-1's fc [2H] the embedding and the target's hidden
    state, both H (vLLM 0.33 / SGLang 0.5.23 llama_eagle3.py, llama_eagle.py). A head for another width fails at the
    engine's first forward: yuhuili's Llama-3.1-8B head (4,096) on gpt-oss-20b (2,880) was planned without a word."""
    head, target = spec.draft.require_arch(), model.require_arch()
    fc = head.eagle_fc if spec.method == "eagle3" else None
    if fc is not None and fc.unsized:
        raise WorkloadError(f"{spec.draft.name} sets {fc.unsized}, which vLLM and SGLang build differently and kvplan "
                            "does not size: plan the head as the engine you run reads it, or without drafting")
    width = fc.target_hidden if fc is not None else head.hidden
    if width != target.hidden:
        field = "target_hidden_size" if fc is not None and fc.target_hidden != head.hidden else "hidden_size"
        raise WorkloadError(f"{spec.draft.name} reads hidden states {width:,} wide (its {field}), and "
                            f"{model.name}'s are {target.hidden:,}: use an EAGLE head trained for {model.name}")


def _unlike_last(model) -> str:
    """Why the model's last layer cannot stand for its MTP layer, or "". kvplan prices the MTP layer as a copy of the
    last (weights/rule.py mtp_module; its KV in draft_layer_specs), and vLLM 0.33 builds it as attention: DeepSeek's
    mtp_block an MLA DeepseekV2DecoderLayer (deepseek_mtp.py), Qwen3.5's and Qwen3-Next's `layer_type=
    "full_attention"` (qwen3_5_mtp.py:121, qwen3_next_mtp.py:92). Published configs end in such a layer (Qwen3.5-27B's
    64th, full_attention_interval 4); one ending in linear attention priced a 3,207,168 B Gated DeltaNet state and
    0 B a token as the drafter's KV. (The MTP families' layers are MLA, attention or Gated DeltaNet: no other kind.)"""
    states = [s.mixer for s in model.layers[-1] if isinstance(s, StateSpec)]
    if not states:
        return ""
    return (f"{model.name}'s last layer is {states[0]}, not attention, and kvplan prices the MTP layer as a "
            "copy of the last, where vLLM 0.33 builds it as attention (qwen3_5_mtp.py, qwen3_next_mtp.py: "
            "layer_type \"full_attention\")")


# vLLM's v1 EAGLE-1 head drops layer 0's input_layernorm (llama_eagle.py LlamaDecoderLayer.__init__: `if
# disable_input_layernorm: del self.input_layernorm; self.input_layernorm = nn.Identity()`, read in 0.8.4, where
# llama_eagle.py first ships, 0.8.5, 0.10.0 and 0.33.0); before it the V0 eagle.py (read in 0.6.0 and 0.8.0-0.8.3)
# keeps it ("but we do as HF implementation also does")
EAGLE_NO_INPUT_NORM_FROM = (0, 8, 4)


def draft_weight_bytes(model, spec: Speculative, act, tp: int, moe_ranks: int, vocab_rule: str = "pad64",
                       expert_parallel: bool = False, version: tuple = (0, 33, 0),
                       layout_tp: int | None = None) -> tuple[int, str]:
    """(bytes one rank holds of the drafter, how they add up). `moe_ranks`: the ranks a MoE drafter's routed experts
    spread over, as the target's: vLLM 0.33 TP x DP (fused_moe/config.py FusedMoEParallelConfig.make,
    `flatten_tp_across_dp_and_pcp`: "shard across all devices"), SGLang 0.5.23 its whole TP group under DP attention
    (moe_tp x moe_ep = TP, distributed/parallel_state.py; a draft model builds in the target's layout,
    speculative/draft_parallel.py TARGET_LAYOUT), while `tp` is SGLang's attention TP. A Qwen1.5-MoE draft on vLLM
    TP 2 x DP 2 holds 60 / 4 experts' worth a layer, 259,522,560 B, not 60 / 2. `vocab_rule`: the engine's
    vocabulary padding (kvplan.model.ranks.vocab_rule); `expert_parallel`: whole experts over the MoE ranks;
    `version`: vLLM's. `layout_tp`: the TP a whole draft model splits its other weights over where `tp` is only its
    attention's (SGLang under DP attention: its TARGET_LAYOUT draft is priced as the target is, attention over
    TP / DP, the rest over TP, experts over `moe_ranks`); None: `tp`. EAGLE-3 heads run in one group of `tp`
    ranks (SINGLE_GROUP, 0.5.23 llama_eagle3.py draft_parallel_spec)."""
    if spec.method == "mtp":
        return _mtp_bytes(model.require_arch(), act, tp, moe_ranks, expert_parallel)
    shape = spec.draft.require_arch()
    layers = range(len(shape.layers))
    if spec.method == "draft_model":
        dense = layout_tp or tp
        total = stage_weight_bytes(shape, act, dense, layers, True, True, moe_ranks=moe_ranks, attn_ranks=tp,
                                   vocab_rule=vocab_rule, expert_parallel=expert_parallel)
        attention = f", its attention over {tp}" if dense != tp else ""
        experts = f", its routed experts over {moe_ranks} ranks" if shape.has_experts and moe_ranks != dense else ""
        return total, f"{spec.draft.name}: every weight, split over TP {dense}{attention}{experts}"
    body = stage_weight_bytes(shape, act, tp, layers, False, False, moe_ranks=moe_ranks, vocab_rule=vocab_rule,
                              expert_parallel=expert_parallel)
    h, b = shape.hidden, act.bytes
    fc = shape.eagle_fc if spec.method == "eagle3" else None
    # fc [H, aux x target_hidden] (Llama-3.1-8B's head: [4,096, 3 x 4,096]; EAGLE-1: [H, 2H]), replicated
    fused = (fc.aux_states * fc.target_hidden if fc is not None else 2 * h) * h * b
    total = body + int(fused)
    parts = f"{len(shape.layers)} layer(s) {body:,} B + fc {int(fused):,} B (whole on every rank)"
    if fc is not None and (fc.norm_before_fc or fc.fc_norm):
        # input_norm over the whole fc input and fc_norm's one norm per aux state: each aux x target_hidden, whole
        norms = int((fc.norm_before_fc + fc.fc_norm) * fc.aux_states * fc.target_hidden * b)
        total += norms
        parts += f" + fc input norms {norms:,} B"
    if spec.method == "eagle" and tuple(version) >= EAGLE_NO_INPUT_NORM_FROM:
        # layer 0's input_layernorm [H] is an nn.Identity: Llama-3.1-8B's EAGLE-1 head holds 4,096 x 2 B = 8,192 B
        # less than its config's layer
        dropped = int(h * (2 if shape.norm_bias else 1) * b)
        total -= dropped
        parts += f" - layer 0's input_layernorm {dropped:,} B (an nn.Identity in vLLM's EAGLE-1)"
    if spec.method == "eagle3":
        attn = shape.layers[0].mixer
        # q/k/v read 2H, not H (llama_eagle3.py: qkv_input_size = 2 * hidden_size at layer 0): the second copy,
        # its KV heads one a rank past TP = kv_heads as the target's (kvplan.model.ranks.heads_share)
        q, kv = attn.heads * attn.head_dim, 2 * attn.kv_heads * attn.head_dim
        wider = heads_share((q + kv) * h * b, q, kv, attn.kv_heads, tp)
        # its lm_head is a ParallelLMHead over draft_vocab_size rows, padded as the target's (llama_eagle3.py:329)
        head = vocab_share(shape.draft_vocab * h * b, shape.draft_vocab, tp, vocab_rule)
        d2t = shape.draft_vocab * 8
        # llama_eagle3.py (0.33): the decoder layer adds `hidden_norm` beside its input / post-attention norms
        # (LlamaDecoderLayer.__init__ :98), and the model ends in a `norm` (LlamaModel.__init__ :253), both [H] RMSNorms
        # and whole: 2 x 4,096 x 2 B = 16 KiB for Llama-3.1-8B's head
        norms = int(2 * h * b)
        total += int(wider + head) + d2t + norms
        parts += (f" + q/k/v over 2 x hidden {int(wider):,} B + lm_head {shape.draft_vocab:,} x {h:,} / TP "
                  f"{int(head):,} B + d2t {d2t:,} B + hidden_norm and final norm {norms:,} B")
    return total, f"{spec.draft.name}: {parts}; embed_tokens shared with the target"


def _mtp_bytes(shape, act, tp: int, moe_ranks: int, expert_parallel: bool = False) -> tuple[int, str]:
    from ...weights.rule import mtp_module, mtp_quant

    total = 0
    for t in mtp_module(shape):
        size = tensor_bytes(t, act, mtp_quant(shape))
        # DeepSeek's eh_proj is a plain nn.Linear (deepseek_mtp.py:87), whole; Qwen3.5's fc a ColumnParallelLinear
        # (qwen3_5_mtp.py:98, qwen3_next_mtp.py:79), split; norms are whole
        # the layer's own q_a / kv_a, their norms and router are whole too (deepseek_mtp.py's mtp_block is a
        # DeepseekV2DecoderLayer); KV heads and experts split as the target's layer (weights.split.rank_share)
        replicated = (t.group in ("norms", "router") or t.replicated
                      or (t.group == "other" and shape.model_type in DEEPSEEK_MTP))
        split = t.split or (("experts", t.copies) if t.group == "experts" else ())
        total += rank_share(t.group, size, replicated, split, tp, moe_ranks, tp, "", expert_parallel)
    total *= shape.mtp_layers
    fused = ("eh_proj [H, 2H] and norms whole on every rank" if shape.model_type in DEEPSEEK_MTP
             else f"fc [H, 2H] split over TP {tp} (a ColumnParallelLinear), norms whole on every rank")
    return total, (f"{shape.mtp_layers} MTP layer(s): one decoder layer like the last, {fused}; embed_tokens and "
                   "the head shared with the target")


def idle_mtp_note(model, act, kv_bytes: float, tp: int, moe_ranks: int,
                  expert_parallel: bool = False) -> str | None:
    """What the checkpoint's MTP layers would add if drafting were on, for a plan without it; None without them.

    Without speculative decoding vLLM 0.33 never loads them (deepseek_v2.py load_weights: `spec_layer =
    get_spec_layer_idx_from_weight_name(...)`, `continue  # skip spec decode layers for main model`; Qwen3.5's
    `mtp.*` weights are skipped alike), so the plan holds none of them and only says what --speculative mtp costs.
    DeepSeek-V3 on TP 8: 1 layer, its experts split 8 ways, eh_proj whole; KV one more MLA layer, 1,152 B a token."""
    shape = model.arch
    if shape is None or not shape.mtp_layers:
        return None
    if unlike := _unlike_last(model):
        return f"MTP: the checkpoint's {shape.mtp_layers} MTP layer(s) are not loaded, and kvplan cannot size them: " + unlike
    weights, _ = _mtp_bytes(shape, act, tp, moe_ranks, expert_parallel)
    last = rank_layer_specs(model, range(model.num_layers - 1, model.num_layers), tp, kv_bytes, int(act.bytes))
    per_token = sum(x.bytes_per_token for x in last) * shape.mtp_layers
    return (f"MTP: the checkpoint's {shape.mtp_layers} MTP layer(s) are not loaded without speculative decoding "
            f"(vLLM deepseek_v2.py / qwen3_next.py / qwen3_5.py skip them), so this plan holds none; drafting with "
            f"them adds {fmt_bytes(weights)} of weights per GPU and {per_token:,} B of KV per token: plan with "
            "--speculative mtp")


def draft_layer_specs(model, spec: Speculative, tp: int, kv_bytes: float, act_bytes: int) -> list[VllmLayerSpec]:
    """The drafter's KV layers on one rank, as the pool sees them, each marked `draft` (the hybrid block size is
    the target's alone: vllm_kv.hybrid_block_size)."""
    if spec.method == "mtp":
        last = rank_layer_specs(model, range(model.num_layers - 1, model.num_layers), tp, kv_bytes, act_bytes)
        layers = last * model.require_arch().mtp_layers
    else:
        layers = rank_layer_specs(spec.draft, range(spec.draft.num_layers), tp, kv_bytes, act_bytes)
    marked = {id(x): dataclasses.replace(x, draft=True) for x in layers}   # a few distinct objects, each once
    return [marked[id(x)] for x in layers]


def config_json(spec: Speculative) -> str:
    """vLLM's --speculative-config value (method "mtp" for DeepSeek's layers since 0.26's rename of
    deepseek_mtp)."""
    parts = [f'"method": "{spec.method}"']
    if spec.draft is not None:
        parts.append(f'"model": "{spec.draft_argument or spec.draft.name}"')
    parts.append(f'"num_speculative_tokens": {spec.num_speculative_tokens}')
    return "{" + ", ".join(parts) + "}"


def layer_count(spec: Speculative, model) -> int:
    return model.require_arch().mtp_layers if spec.method == "mtp" else spec.draft.num_layers
