"""What an SGLang plan says beside its figures: the rules that shaped them (the card size SGLang reads, the pipeline
split, the sliding-window and Mamba pools, DSA's layout, the ReqToTokenPool inside the reserve) and the warnings for
what kvplan has not read. Paths are under `sglang/srt/` of the wheel named."""

from __future__ import annotations

from ...gpus import GPU
from ...model.layers import MLASpec
from ...units import MiB, fmt_bytes
from .sglang_layers import dsa_latent_bytes, is_dsa
from .sglang_pool import SglangSettings, mamba_fixed, mamba_requests_ratio
from .sglang_rules import MAMBA_POOL_ARCHS, TOWER_EVERY_STAGE, lm_head_every_stage, multimodal, release_text, swa_pool


def plan_notes(model, shape, device: GPU, s: SglangSettings, stages, binding: int, kv, speculative, lora,
               running: int, max_len: int) -> list[str]:
    version = s.version
    notes = ["SGLang: activations and CUDA graphs live in the (1 - mem_fraction_static) reserve",
             "the command field holds the `sglang.launch_server` command for this engine",
             _card_note(device, s), _req_to_token_note(running, max_len, version, speculative is not None)]
    if version >= (0, 5, 10):
        notes.append("prefill CUDA graphs " + ("on by default here: their 8 MB a captured size (1.5 GiB for MLA) is "
                                               "in the reserve" if s.prefill_graphs else
                                               "off by default for these settings: nothing reserved for them"))
    if s.pipeline_parallel_size > 1:
        notes.append(_pp_note(model, stages, binding, version))
    if any(spec.kind in ("sliding", "chunked") for _, spec in model.specs()):
        notes.append(swa_pool(model.architecture, version, _sm_major(device), speculative is not None)[1])
    if model.has_state:
        notes.append(_state_note(model, stages[binding].pool, version)
                     + ("; every stage is charged the largest stage's share of a request's state, so all size the "
                        "same pool (kv_cache_configurator.py _handle_max_mamba_cache pp_layer_scale)"
                        if s.pipeline_parallel_size > 1 else ""))
    if is_dsa(model):
        notes.append(_dsa_note(model, kv, device, version, s.page_size))
    if s.dp_attention > 1:
        notes.append(f"DP attention: {s.dp_attention} ranks of attention TP {s.tensor_parallel_size // s.dp_attention}, "
                     f"each with its own pool (the figures are one rank's); requests spread over the "
                     f"{s.dp_attention} ranks")
    if speculative is not None:
        notes.append(f"speculative decoding ({speculative.method}): the draft's KV layers join the cell, its pool "
                     "holds as many tokens as the target's (0.5.23 model_runner; SGLang sizes it as target x (1 + "
                     "draft layers / target layers), exact where the draft's layers match the target's); "
                     "max_running_requests 48 unless set"
                     + ("; before 0.5.14 the draft loads into the reserve, which holds 2-6 GiB more for it" if
                        version < (0, 5, 14) else ""))
    if lora is not None:
        notes.append(f"LoRA: {lora.max_loras} adapter slots (--max-loras-per-batch) of rank {lora.max_lora_rank} "
                     "for every linear layer, no embed_tokens / lm_head (--lora-target-modules all adds them)")
    if shape.towers:
        notes.append(_vlm_note(model, s))
    return notes


def engine_warnings(model, pp: int, version) -> list[str]:
    """What the plan's figures rest on that kvplan has not read in SGLang's source."""
    out = []
    placement = lm_head_every_stage(model.architecture, version)
    if pp > 1 and placement is None:
        out.append(f"SGLang's lm_head placement under pipeline parallelism was not read for "
                   f"{model.architecture or model.model_type}: planned on every stage, as Llama builds it (the larger)")
    if pp > 1 and placement and model.require_arch().tied_embeddings:
        out.append(f"{model.name} ties its lm_head to embed_tokens, which SGLang's {model.architecture} builds on the "
                   "first stage only (a PPMissingLayer elsewhere): whether it serves under PP was not read")
    return out


def _sm_major(device: GPU) -> int | None:
    return device.compute_capability[0] if device.compute_capability else None


def _card_note(device: GPU, s: SglangSettings) -> str:
    """SGLang's default fraction reads the card's size from nvidia-smi (0.5.23 srt/utils/common.py
    `get_nvgpu_memory_capacity` :802-830: `nvidia-smi --query-gpu=memory.total`), the pool the runtime's free
    memory."""
    runtime = fmt_bytes(device.memory_bytes)
    if s.mem_fraction_static is not None:
        return "mem_fraction_static as given; the pool sized from the runtime's free memory"
    if device.smi_memory_bytes:
        return (f"default mem_fraction_static from nvidia-smi's memory.total, {device.smi_memory_bytes // MiB:,} MiB "
                f"(what SGLang reads: utils get_nvgpu_memory_capacity), the pool from the runtime's {runtime}")
    return (f"no nvidia-smi total in kvplan's catalog for {device.name}: the default mem_fraction_static is computed "
            f"from the runtime's {runtime}, 0.3-0.9 GiB below what SGLang reads on the cards kvplan has both for, so "
            "its third decimal may be one low")


def _req_to_token_note(running: int, max_len: int, version, drafting: bool) -> str:
    """mem_cache/memory_pool.py ReqToTokenPool: int32 (size [+ 1 padding row from 0.5.11]) x (context + 4)
    (`get_req_to_token_extra_context_len`: 4 + draft tokens), built after the budget is read (0.5.23
    kv_cache_configurator.py `configure`: `_resolve_memory_pool_config` before `_init_pools`; 0.5.1
    init_memory_pool the same order), so it sits in the reserve. Its size is max_running_requests from 0.5.10
    (`_resolve_max_num_reqs`), the 2,048-4,096 estimate before. Llama-3.1-8B at 131,072 with 2,048 requests:
    2,049 x 131,076 x 4 B = 1.00 GiB."""
    rows = running if version >= (0, 5, 10) else max(running, 2048)
    rows += version >= (0, 5, 11)
    size = rows * (max_len + 4) * 4
    return (f"the ReqToTokenPool, {rows:,} x {max_len + 4:,} x 4 B = {fmt_bytes(size)}"
            + (" (+ the draft tokens a row)" if drafting else "")
            + ", is allocated after the budget is read: it sits in the reserve, and the KV pool is not reduced for it")


def _pp_note(model, stages, binding: int, version) -> str:
    split = "/".join(str(len(x.layers)) for x in stages)
    rule = "the last L % pp stages one more" if version >= (0, 5, 6) else "the last stage the remainder"
    head = "on the last stage" if lm_head_every_stage(model.architecture, version) is False else "on every stage"
    tokens = ("every stage holds the fewest tokens of any stage (all_reduce MIN, 0.5.2+)" if version >= (0, 5, 2)
              else "each stage keeps its own quotient (0.5.1): the plan reports the smallest")
    tower = ("; its vision tower on every stage (qwen3_vl.py builds it on every rank)"
             if model.architecture in TOWER_EVERY_STAGE else "")
    return (f"pipeline stages of {split} layers (distributed/utils.py get_pp_indices: {rule}); embeddings on the "
            f"first, the lm_head {head}{tower}; every stage's budget is what the most loaded leaves (free memory "
            f"MIN-reduced over the ranks), and {tokens}; the figures are stage {binding}'s")


def _state_note(model, pool, version) -> str:
    mixer = MAMBA_POOL_ARCHS[model.architecture]
    ratio = mamba_requests_ratio(mixer, version)
    if mamba_fixed(mixer, version):
        how = "512 slots (its radix cache off for this model)"
    else:
        how = "rest x 0.9 / 1.9 in whole slots" + (" plus one padding slot" if version >= (0, 5, 17) else "")
    return (f"Mamba state in SGLang's MambaPool, {how}: {pool.state_slots:,} slots of "
            f"{fmt_bytes(pool.state_per_request)} a request ({fmt_bytes(pool.state_bytes)}), the KV cell counting "
            f"the full-attention layers alone; max_running_requests at most {pool.state_slots:,} // {ratio}")


def _dsa_note(model, kv, device: GPU, version, page: int) -> str:
    spec = next(spec for _, spec in model.specs() if isinstance(spec, MLASpec))
    raw = spec.kv_lora_rank + spec.qk_rope_head_dim
    scaled = kv.bits == 8 and dsa_latent_bytes(spec, kv, device, version, model.architecture) > raw
    layout = ("the fp8 latent counted as 656 B a layer (per-block scales: flashmla_kv, or GLM's flashinfer_sparse_mla "
              "on SM 12.x)" if scaled else "the latent counted raw (kv_lora_rank + rope)")
    early = (" (before 0.5.17 the cell counts the raw latent while an fp8 pool on a scaled-layout backend allocates "
             "656 B a layer: the pool outgrows its budget by 80 B a layer a token)"
             if kv.bits == 8 and version < (0, 5, 17) else "")
    return (f"DeepSeek sparse attention: KV {kv.name} (auto is fp8 on SM 10.x and newer, bfloat16 below), {layout}"
            f"{early}, 132 B of index keys a layer on every rank, {page}-token pages")


def _vlm_note(model, s: SglangSettings) -> str:
    if not multimodal(model.architecture, s.version):
        return (f"{model.architecture or model.model_type} is not multimodal to SGLang {release_text(s.version)} at "
                "its defaults: its tower loads, the fraction is not scaled and no image cache is held back")
    cache = ("its 100 MiB image cache (SGLANG_VLM_CACHE_SIZE_MB) comes out of the KV budget"
             if s.version >= (0, 5, 18) else "its image cache is not taken from the KV budget before 0.5.18")
    return (f"SGLang loads the vision tower with the language model and scales a default mem_fraction_static by "
            f"{s.vlm_factor:.4f} for it (adjust_mem_fraction_for_vlm); {cache}")
