"""Multimodal models in the plans: vision towers and projectors by rule (checked against transformers on the meta
device), vLLM's multimodal profiling (the dummy images' encoder cache), language-model-only serving, linear-RoPE
tables, and the published start-ups of Mistral-Small-3.x and Gemma 3 (validation/vllm_holdout.csv)."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path

import pytest

import kvplan
from kvplan.config.load import load_model
from kvplan.config.reader import text_config
from kvplan.config.towers import read_towers
from kvplan.planning.engines.vllm_mm import encoder_cache_bytes
from kvplan.sources.library import bundled_ids, library_dir
from kvplan.sources.safetensors import component_of
from kvplan.units import GiB, fmt_bytes
from kvplan.weights.rule import param_count, stored_bytes_by_rule, weights_bytes
from kvplan.weights.split import rope_cache_bytes as _rope_cache

REPO = Path(__file__).resolve().parents[1]
# every bundled config with a vision tower whose weights kvplan counts at all (not only those it found a rule
# for: a tower it silently missed would fail here)
MULTIMODAL = sorted(i for i in bundled_ids() if load_model(i).arch is not None
                    and json.loads((library_dir() / (i.replace("/", "__", 1) + ".json")).read_text()).get("vision_config"))


def meta_towers(data: dict) -> Counter:
    """Parameters of the tower and the projector of the model transformers 5.24 builds, by kvplan's own
    component names for its parameters (model.vision_tower.* -> vision, model.multi_modal_projector.* -> ...)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**data)
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    counts: Counter = Counter()
    for name, p in model.named_parameters():
        counts[component_of(name, 10**6)[0]] += p.numel()
    return counts


# towers no rule counts yet, each with why: expected to fail (strictly: once one is counted, drop its entry); every
# plan of them says the weights leave the tower out
UNCOUNTED = {"moonshotai/Kimi-K2.5": "MoonViT (model_type kimi_k25) exists only as remote code: transformers 5.24 has "
                                     "no class to count it against"}


@pytest.mark.parametrize("model_id", [pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=UNCOUNTED[m]))
                                      if m in UNCOUNTED else m for m in MULTIMODAL])
def test_tower_rule_equals_transformers(model_id):
    data = json.loads((library_dir() / (model_id.replace("/", "__", 1) + ".json")).read_text())
    arch = load_model(model_id).require_arch()
    assert arch.towers_missing is None and arch.towers, arch.towers_missing
    towers = dict(arch.towers)
    truth = meta_towers(data)
    assert (towers.get("vision", 0), towers.get("projector", 0), towers.get("audio", 0)) == \
        (truth["vision"], truth["projector"], truth["audio"])


@pytest.mark.parametrize("model_type", ["gemma3", "mistral3", "llama4", "qwen3_5", "qwen3_5_moe", "qwen2_5_vl",
                                        "llava", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm4v_moe"])
def test_tower_rule_at_transformers_defaults(model_type):
    """The config classes' defaults (a tower with vision_use_head, other widths) are read as transformers reads
    them: a resized tower counts right too, not just the published sizes."""
    transformers = pytest.importorskip("transformers")
    data = transformers.AutoConfig.for_model(model_type).to_dict()
    text, _ = text_config(data)
    towers = read_towers(data, model_type, text["hidden_size"])
    truth = meta_towers({"model_type": model_type})
    assert (towers.vision, towers.projector) == (truth["vision"], truth["projector"])


def test_unknown_tower_is_a_warning_in_the_plan():
    """A tower type kvplan has no rule for in that wrapper (here CLIP inside a Gemma 3 config): the plan's
    weights leave it out and say so, in every face's warnings."""
    data = json.loads((library_dir() / "google__gemma-3-4b-it.json").read_text())
    data["vision_config"] = {**data["vision_config"], "model_type": "clip_vision_model"}
    model = load_model(data, name="gemma-with-clip")
    assert "clip_vision_model in gemma3" in model.require_arch().towers_missing
    p = kvplan.plan(model, max_model_len=8192)
    assert not p.verified and any("vision tower" in w and "not counted" in w for w in p.warnings)
    assert kvplan.plan("Qwen/Qwen2.5-VL-7B-Instruct", max_model_len=8192).weights_components["vision"] == (
        # transformers 5.24 Qwen2_5_VLForConditionalGeneration on meta: model.visual holds 676,550,144 parameters
        676_550_144 * 2)


def test_towers_ride_on_the_first_stage_split_by_tp():
    model = load_model("google/gemma-3-27b-it")
    towers = sum(b for _, b in weights_bytes(model.require_arch()).towers)
    assert towers == (416_866_032 + 6_194_304) * 2  # SigLIP 27 x 1152 + projector 1152 x 5376 + 1152, bf16
    whole = kvplan.plan(model, max_model_len=8192, language_model_only=True)
    with_towers = kvplan.plan(model, max_model_len=8192)
    assert with_towers.weights_bytes - whole.weights_bytes == towers
    pp = kvplan.plan(model, max_model_len=8192, pp=2)
    text_pp = kvplan.plan(model, max_model_len=8192, pp=2, language_model_only=True)
    assert pp.stages[0].weights_bytes - text_pp.stages[0].weights_bytes == towers
    assert pp.stages[1].weights_bytes == text_pp.stages[1].weights_bytes
    tp2 = kvplan.plan(model, max_model_len=8192, tp=2)
    tp2_text = kvplan.plan(model, max_model_len=8192, tp=2, language_model_only=True)
    assert tp2.weights_bytes - tp2_text.weights_bytes == towers // 2


def test_language_model_only_command_follows_the_version():
    p = kvplan.plan("mistralai/Mistral-Small-3.2-24B-Instruct-2506", max_model_len=8192, language_model_only=True)
    assert p.vllm_command.endswith("--language-model-only")
    old = kvplan.plan("mistralai/Mistral-Small-3.2-24B-Instruct-2506", max_model_len=8192,
                      language_model_only=True, engine_version="0.11.0")
    assert old.vllm_command.endswith("--limit-mm-per-prompt '{\"image\": 0}'")
    full_old = kvplan.plan("mistralai/Mistral-Small-3.2-24B-Instruct-2506", max_model_len=8192,
                           engine_version="0.11.0")
    assert full_old.weights_bytes - old.weights_bytes == (403_305_472 + 35_652_608) * 2  # 0.11 skips Pixtral
    gemma_old = kvplan.plan("google/gemma-3-27b-it", max_model_len=8192, language_model_only=True,
                            engine_version="0.11.0")
    gemma_new = kvplan.plan("google/gemma-3-27b-it", max_model_len=8192, language_model_only=True)
    assert gemma_old.weights_bytes - gemma_new.weights_bytes == (416_866_032 + 6_194_304) * 2  # 0.11 loads SigLIP
    with pytest.raises(kvplan.KVPlanError, match="language-model-only serving for vLLM"):
        kvplan.plan("google/gemma-3-27b-it", engine="sglang", max_model_len=8192, language_model_only=True)
    with pytest.raises(kvplan.KVPlanError, match="are vLLM settings"):
        kvplan.plan("google/gemma-3-4b-it", engine="hf", gpu="H100", max_model_len=4096, images_per_prompt=1)
    with pytest.raises(kvplan.KVPlanError, match="from 0 to 999"):
        kvplan.plan("google/gemma-3-4b-it", max_model_len=4096, images_per_prompt=-1)


def test_images_per_prompt_caps_the_dummy_batch(capsys):
    """N = min(budget // item, max_num_seqs x min(limit, max_model_len // item)): 4 sequences x 2 images = 8 of
    gemma-3's 256-embedding images, not 32; --images-per-prompt 0 is the language model alone, in the CLI too."""
    from kvplan.cli import main

    few = kvplan.plan("google/gemma-3-27b-it", max_model_len=8192, max_num_seqs=4, images_per_prompt=2,
                      engine_version="0.19.0")
    assert any("8 dummy images" in n for n in few.notes)
    assert few.vllm_command.endswith("--limit-mm-per-prompt '{\"image\": 2}'")
    default = kvplan.plan("google/gemma-3-27b-it", max_model_len=8192, max_num_seqs=4, engine_version="0.19.0")
    # gemma-3-27b: 32 - 8 dummy images x 256 tokens an image (mm_tokens_per_image) x hidden 5,376 x 2 B
    assert default.activation_bytes - few.activation_bytes == (32 - 8) * 256 * 5376 * 2
    assert main(["plan", "google/gemma-3-27b-it", "--max-model-len", "8192", "--images-per-prompt", "0"]) == 0
    out = capsys.readouterr().out
    text = kvplan.plan("google/gemma-3-27b-it", max_model_len=8192, language_model_only=True)
    assert "--language-model-only" in out and re.search(rf"weights +{re.escape(fmt_bytes(text.weights_bytes))}", out)


@pytest.mark.parametrize(("version", "kept"), [
    ((0, 11, 0), 31 * 8192 * 5376 * 2),    # 8192 // (256 + 4) = 31 items, each padded to the 8,192 budget
    ((0, 19, 0), 32 * 256 * 5376 * 2),     # 8192 // 256 = 32 items of 256 embeddings
])
def test_gemma3_encoder_cache(version, kept):
    shape = load_model("google/gemma-3-27b-it").require_arch()
    assert encoder_cache_bytes(shape, version, 8192, 2, text_only=False)[0] == kept
    assert encoder_cache_bytes(shape, version, 8192, 2, text_only=True) == (0, "")


def test_mistral3_encoder_cache():
    """1540 px / 14 = 110 patches a side, merged 2 x 2: 55 x 55 = 3,025 embeddings, 3,080 with the row breaks."""
    shape = load_model("mistralai/Mistral-Small-3.2-24B-Instruct-2506").require_arch()
    assert shape.image_tokens == (3025, 3080)
    # Mistral-Small-3.2 (hidden 5,120): before 0.13 two images padded to the 8,192-token budget, from 0.13
    # two images of 3,025 embeddings
    assert encoder_cache_bytes(shape, (0, 11, 0), 8192, 2, False)[0] == 2 * 8192 * 5120 * 2
    assert encoder_cache_bytes(shape, (0, 19, 0), 8192, 2, False)[0] == 2 * 3025 * 5120 * 2


def test_linear_rope_table_is_scaled():
    """vLLM's LinearScalingRotaryEmbedding caches max_position x factor positions: gemma-3-4b-it's global table
    131,072 x 8 x 256 x 2 B = 512 MiB and its local one 64 MiB (the 0.45 GiB its weights used to miss)."""
    model = load_model("google/gemma-3-4b-it")
    assert _rope_cache(model, kvplan.resolve_dtype("bf16")) == (131072 * 8 + 131072) * 256 * 2
    plain = load_model("meta-llama/Llama-3.1-8B")  # llama3 scaling, not linear: one unscaled table
    assert _rope_cache(plain, kvplan.resolve_dtype("bf16")) == 131072 * 128 * 2


# ---------------------------------------------------------------- the published start-ups


def _row(run_id: str) -> dict:
    with (REPO / "validation" / "vllm_holdout.csv").open() as f:
        return next(r for r in csv.DictReader(f) if r["run_id"] == run_id)


def test_mistral_small_3_2_on_vllm_0_11():
    """llm-d-benchmark's Mistral-Small-3.2-24B on vLLM 0.11.0 (H100, util 0.95, 16,000 tokens, blocks of 128):
    weights 44.76 GiB, KV pool 28.20 GiB. The tower (0.82 GiB) and the two padded dummy images (160 MiB)
    are what the language model alone misses."""
    row = _row("llmd-bench-mistral-small-3.2-24b-2506-h100-tp1-v0.11.0")
    p = kvplan.plan("mistralai/Mistral-Small-3.2-24B-Instruct-2506", gpu="H100", max_model_len=16000,
                    gpu_memory_utilization=0.95, engine_version="0.11.0", block_size=128)
    assert p.weights_bytes / GiB == pytest.approx(float(row["weights_memory_gib"]), rel=0.01)
    assert p.kv_pool_bytes / GiB == pytest.approx(float(row["available_kv_cache_gib"]), rel=0.02)
    assert p.activation_bytes / GiB == pytest.approx(float(row["activation_peak_torch_gib"]), rel=0.02)


def test_gemma_3_27b_on_vllm_0_19():
    row = _row("llmd-planner-gemma-3-27b-it-h100-tp1-8192-v0.19.0")
    p = kvplan.plan("google/gemma-3-27b-it", gpu="H100", max_model_len=8192, gpu_memory_utilization=0.95,
                    engine_version="0.19.0")
    assert p.kv_cache_tokens == pytest.approx(int(row["gpu_kv_cache_tokens"]), rel=0.02)
    assert p.weights_bytes / GiB == pytest.approx(float(row["weights_memory_gib"]), rel=0.01)


# ---------------------------------------------------------------- bundled checkpoint records


RECORDS = sorted(p.stem.replace("__", "/", 1) for p in (library_dir() / "checkpoints").glob("*.json"))


@pytest.mark.parametrize("model_id", RECORDS)
def test_record_agrees_with_the_rule_or_says_why(model_id):
    model = load_model(model_id)
    total = model.checkpoint_total
    rule = stored_bytes_by_rule(model.require_arch())
    off = abs(rule - total.total_bytes) / total.total_bytes
    assert off < 1e-6 or (total.explained and off < 0.01), (model_id, rule, total.total_bytes)
    p = kvplan.plan(model, max_model_len=4096, gpu="H200", num_gpus=8 if rule > 400 * GiB else 1)
    assert (p.checkpoint_stored_bytes, p.rule_stored_bytes) == (total.total_bytes, rule)


def test_minimax_m2_by_rule_offline():
    """hf-mem reads 230,121,630,720 B from MiniMax-M2's headers; the rule gives 230,024,081,408 (-0.042 %)."""
    rule = stored_bytes_by_rule(load_model("MiniMaxAI/MiniMax-M2").require_arch())
    assert rule == pytest.approx(230_121_630_720, rel=0.01)
    assert 230_121_630_720 - rule == 62 * (256 * 3072 + 256) * 2  # router + bias stored in float32


def test_sglang_scales_its_fraction_for_vision_models():
    """sglang 0.5.1 adjust_mem_fraction_for_vlm: Pixtral (24 x 1024) is ViT-L's size, 0.95 x 1.0; Gemma 3 is in
    mm_disabled_models (multimodal off unless --enable-multimodal): no change; an explicit fraction is kept."""
    from kvplan.planning.engines.sglang_pool import vlm_factor

    mistral = load_model("mistralai/Mistral-Small-3.2-24B-Instruct-2506").require_arch()
    assert mistral.vit == ("Mistral3ForConditionalGeneration", 24, 1024)
    assert vlm_factor(mistral.vit, (0, 5, 1)) == pytest.approx(0.95)
    assert vlm_factor(mistral.vit, (0, 4, 9)) == 1.0
    assert vlm_factor(load_model("google/gemma-3-27b-it").require_arch().vit, (0, 5, 1)) == 1.0
    assert vlm_factor(("Qwen2_5_VLForConditionalGeneration", 27, 1152), (0, 5, 1)) == pytest.approx(
        # inputs: a 27-layer, 1,152-wide ViT against SGLang's 24 x 1,024 reference, the rule in the docstring
        0.95 * (1 - 0.1 * (27 * 1152**2 / (24 * 1024**2) - 1)))
    text = kvplan.plan("mistralai/Mistral-Small-3.1-24B-Instruct-2503", engine="sglang", max_model_len=8192,
                       engine_version="0.5.3")
    # 0.5.3: 13,440 MB of nvidia-smi's 81,559 MiB on an H100 -> 0.835, x 0.95
    assert text.gpu_memory_utilization == pytest.approx(0.835 * 0.95, abs=1e-4)
    given = kvplan.plan("mistralai/Mistral-Small-3.1-24B-Instruct-2503", engine="sglang", max_model_len=8192,
                        gpu_memory_utilization=0.8)
    assert given.gpu_memory_utilization == 0.8


@pytest.mark.parametrize("model_id", ["mistralai/Mistral-Small-3.2-24B-Instruct-2506", "google/gemma-3-27b-it",
                                      "meta-llama/Llama-4-Scout-17B-16E-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct"])
def test_hostile_vision_config_values(model_id):
    """Any value in any vision_config field (or the wrapper's own): an answer with a tower, one that names the
    field it could not read, or a kvplan error; never a traceback (hypothesis found a list as model_type)."""
    base = json.loads((library_dir() / (model_id.replace("/", "__", 1) + ".json")).read_text())
    for key in [*base["vision_config"], "model_type"]:
        for value in (None, "x", -1, 0, 1.5, float("nan"), float("inf"), True, [1], {"a": 1}, 10**30):
            data = json.loads(json.dumps(base))
            data["vision_config"][key] = value
            try:
                model = load_model(data, name="hostile")
                kvplan.plan(model, max_model_len=4096)
                kvplan.plan(model, engine="sglang", max_model_len=4096)
            except kvplan.KVPlanError:
                pass
    for key in ("model_type", "spatial_merge_size", "mm_tokens_per_image", "architectures", "vision_feature_layer"):
        data = {**base, key: [1]}
        try:
            kvplan.plan(load_model(data, name="hostile"), max_model_len=4096)
        except kvplan.KVPlanError:
            pass


# flat-tower families (their causal LM or conditional-generation class is the whole model): the language model and
# the towers kvplan counts against every parameter transformers builds, at the defaults and resized
WHOLE = [
    ("git", {}),
    ("git", dict(hidden_size=640, num_attention_heads=10, num_hidden_layers=3, vocab_size=3000,
                 vision_config=dict(hidden_size=512, intermediate_size=1500, num_hidden_layers=3, image_size=96,
                                    num_attention_heads=8,
                                    patch_size=8))),
    ("got_ocr2", {}),
    ("got_ocr2", dict(vision_config=dict(hidden_size=384, num_attention_heads=6, num_hidden_layers=5, image_size=256,
                                         window_size=7, global_attn_indexes=[1, 4], output_channels=128, mlp_dim=1000),
                      text_config=dict(model_type="qwen2", hidden_size=512, intermediate_size=1000,
                                       num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                                       vocab_size=5000))),
    ("phi4_multimodal", {}),
    ("phi4_multimodal", dict(hidden_size=1024, intermediate_size=2000, num_hidden_layers=2, num_attention_heads=8,
                             num_key_value_heads=2,
                             vision_config=dict(hidden_size=384, intermediate_size=1000, num_hidden_layers=3,
                                                num_attention_heads=6, image_size=224, patch_size=16),
                             audio_config=dict(hidden_size=256, intermediate_size=600, num_blocks=2,
                                               num_attention_heads=4, ext_pw_out_channel=256,
                                               depthwise_separable_out_channel=256, nemo_conv_channels=128,
                                               time_reduction=4, input_size=64, bias_max_distance=500,
                                               bias_symmetric=True))),
    ("fuyu", {}),   # vision_embed_tokens [4096, 30 x 30 x 3] + bias: 11,063,296 beside Persimmon
    ("fuyu", dict(patch_size=16, num_channels=1,
                  text_config=dict(model_type="persimmon", hidden_size=512, intermediate_size=1000,
                                   num_hidden_layers=2, num_attention_heads=8, vocab_size=5000))),
    ("moss_transcribe_diarize", {}),
    ("moss_transcribe_diarize", dict(audio_merge_size=3, projector_bias=False,
                                     audio_config=dict(hidden_size=512, num_hidden_layers=3, intermediate_size=1500,
                                                       num_mel_bins=64, max_source_positions=700,
                                                       num_attention_heads=8),
                                     text_config=dict(model_type="qwen3", hidden_size=768, intermediate_size=1000,
                                                      num_hidden_layers=2, num_attention_heads=8,
                                                      num_key_value_heads=2, head_dim=64, vocab_size=5000))),
]


@pytest.mark.parametrize("model_type, kwargs", WHOLE, ids=[f"{m}-{'resized' if k else 'default'}" for m, k in WHOLE])
def test_flat_tower_families_are_counted_whole(model_type, kwargs):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.auto.modeling_auto import MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES

    from kvplan.config import verified
    from kvplan.weights.rule import param_count

    config = transformers.CONFIG_MAPPING[model_type](**kwargs)
    name = MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES.get(model_type)
    cls = getattr(transformers, name) if name else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        model = (cls._from_config if name else cls.from_config)(config, dtype=torch.bfloat16)
    verified.ENFORCE = False
    try:
        arch = kvplan.parse_config({**config.to_dict(), "dtype": "bfloat16"}).require_arch()
    finally:
        verified.ENFORCE = True
    assert arch.towers_missing is None and arch.towers
    assert param_count(arch).total + sum(n for _, n in arch.towers) == sum(p.numel() for p in model.parameters())


def test_emu3_says_its_vq_tokenizer_is_left_out():
    # Emu3ForConditionalGeneration's VQ-VAE (270,740,287 parameters at its defaults) has no rule: the weights say
    # they are the language model's only, in one line naming the tower
    transformers = pytest.importorskip("transformers")
    arch = kvplan.parse_config(transformers.CONFIG_MAPPING["emu3"]().to_dict()).arch
    assert arch is not None and "VQ-VAE image tokenizer (vq_config)" in arch.towers_missing
@pytest.mark.parametrize("model_id", ["Qwen/Qwen3-VL-4B-Thinking", "Qwen/Qwen3-VL-30B-A3B-Instruct",
                                      "Qwen/Qwen3-VL-235B-A22B-Instruct", "zai-org/GLM-4.6V"])
def test_vl_language_model_is_its_text_familys(model_id):
    """Qwen3-VL's text model is planned as the Qwen3 (-MoE) decoder it is, GLM-4.6V's as GLM-4.5's: the parameters
    equal those of the image-text model transformers 5.24 builds, minus `model.visual`, and every plan of it is
    verified. Before, each was 'not one transformers ships': the 4B 9,216 parameters short (its q/k norms), GLM-4.6V
    778,567,680 (its shared experts, 'n_shared_experts ... not read')."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    data = json.loads((library_dir() / (model_id.replace("/", "__", 1) + ".json")).read_text())
    with torch.device("meta"):
        built = transformers.AutoModelForImageTextToText.from_config(transformers.AutoConfig.for_model(**data))
    language = sum(p.numel() for n, p in built.named_parameters() if not n.startswith("model.visual."))
    assert param_count(load_model(model_id).require_arch()).total == language
    # a text-only server: vLLM skips the encoder's profile run, which kvplan does not size (and says so otherwise)
    p = kvplan.plan(model_id, gpu="H100", max_model_len=4096, num_gpus=8, images_per_prompt=0)
    assert p.verified and not p.warnings, p.warnings


@pytest.mark.parametrize("model_id, dtypes", [("Qwen/Qwen3-VL-4B-Thinking", ("bf16", "fp32")),
                                              ("Qwen/Qwen3-VL-30B-A3B-Instruct", ("bf16",)),
                                              ("zai-org/GLM-4.6V", ("bf16",))])
def test_vl_cache_equals_transformers(model_id, dtypes):
    """The cache transformers' Qwen3-VL (GLM-4.6V alike) keeps for a text prompt (meta device, batch 1 and 3,
    after the prefill and one decode step): logical bytes, storage and scalars equal kvplan's. fp32 on the dense
    model only: meta's grouped-mm experts take bf16 alone."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from truth import DTYPES, Tally, compare, decode, measure, prefill

    data = json.loads((library_dir() / (model_id.replace("/", "__", 1) + ".json")).read_text())
    spec, tally = load_model(model_id), Tally(model_id)
    for dtype in dtypes:
        with torch.device("meta"):
            built = transformers.AutoModelForImageTextToText.from_config(
                transformers.AutoConfig.for_model(**data), dtype=DTYPES[dtype])
        for batch, length in ((1, 7), (3, 131)):
            cache, token = prefill(built, batch, length)
            est = kvplan.estimate(spec, length, batch, dtype=dtype, prompt_len=length)
            compare(tally, f"{dtype} b{batch} p{length}", measure(cache), est, after_prefill=True)
            decode(built, cache, token, 1)
            est = kvplan.estimate(spec, length + 1, batch, dtype=dtype, prompt_len=length)
            compare(tally, f"{dtype} b{batch} {length} + 1", measure(cache), est, after_prefill=False)
    assert tally.checked == 4 * len(dtypes) and not tally.mismatches, tally.mismatches
