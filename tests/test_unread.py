"""Warnings only for what matters (issue #23 item 3): a config field kvplan does not read is silent only where a
test here proves it redundant with one it reads, or ignored by transformers 5.24 (and, cited, by vLLM 0.33); any
other value of it gets a warning that names it and bounds its effect (kvplan/config/unread.py).

Each proof is against transformers itself: its config class (what __post_init__ keeps or drops), its modeling
source (the field is never read), or its model built on the meta device from the bundled config (the same
parameters with the field changed, and kvplan's count equal to them)."""

from __future__ import annotations

import copy
import inspect
import json
import math

import pytest

import kvplan
from kvplan.sources.files import read_config_file
from kvplan.sources.library import bundled_index
from kvplan.weights.rule import param_count

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

QWEN35 = ["Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-122B-A10B", "Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-397B-A17B",
          "Qwen/Qwen3.6-35B-A3B"]


def bundled(model_id: str) -> dict:
    return copy.deepcopy(read_config_file(bundled_index()[model_id.lower()]))


def hf_config(data: dict):
    """transformers' config class built from a config.json dict, as from_pretrained does (model_type picks it)."""
    from transformers import CONFIG_MAPPING

    kwargs = {k: v for k, v in data.items() if k not in ("model_type", "transformers_version", "architectures")}
    return CONFIG_MAPPING[data["model_type"]](**kwargs)


def meta_shapes(data: dict) -> dict[str, tuple[int, ...]]:
    """Every parameter transformers builds from `data`, by name, on the meta device (shapes only)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(data), dtype=torch.bfloat16)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def modeling_source(family: str) -> str:
    import importlib

    return inspect.getsource(importlib.import_module(f"transformers.models.{family}.modeling_{family}"))


def warnings_of(data: dict, name: str = "x") -> tuple[str, ...]:
    return kvplan.parse_config(data, name=name).warnings


# ------------------------------------------------------------------ Qwen3.5 / 3.6 full_attention_interval


@pytest.mark.parametrize("model_id", QWEN35)
def test_full_attention_interval_is_the_layer_types_it_would_derive(model_id):
    """Qwen3_5TextConfig pops full_attention_interval only when layer_types is None: beside one it is dropped.
    The published configs say the same thing twice: interval 4, layer_types [linear x 3, full] repeated."""
    text = bundled(model_id)["text_config"]
    n, interval = text["num_hidden_layers"], text["full_attention_interval"]
    assert interval == 4 and text["layer_types"] == (["linear_attention"] * 3 + ["full_attention"]) * (n // 4)
    assert kvplan.load_model(model_id).warnings == ()
    # transformers keeps the given layer_types whatever the interval says (2 would make every other layer full)
    assert hf_config({**text, "full_attention_interval": 2}).layer_types == text["layer_types"]


def test_without_layer_types_the_interval_is_read_as_transformers_derives_it():
    data = bundled("Qwen/Qwen3.5-27B")
    text = data["text_config"]
    derived = hf_config({k: v for k, v in text.items() if k != "layer_types"}).layer_types
    assert derived == text["layer_types"]          # transformers' derivation from interval 4
    without = copy.deepcopy(data)
    del without["text_config"]["layer_types"]
    same = kvplan.parse_config(without, name="no-layer-types")
    assert same.warnings == ()
    # 16 full-attention layers x 2 x 4 KV heads x 256 x 2 B x 4,096 tokens = 268,435,456 B, plus 48 DeltaNet states:
    # the figure with layer_types, where all-full (64 layers) would be 1,073,741,824 B of KV alone
    assert kvplan.estimate(same, 4096).kv_cache_bytes == kvplan.estimate("Qwen/Qwen3.5-27B", 4096).kv_cache_bytes
    interval_2 = copy.deepcopy(without)
    interval_2["text_config"]["full_attention_interval"] = 2
    full = sum(t == "full_attention" for t in hf_config(interval_2["text_config"]).layer_types)
    assert full == 32 and sum(1 for layer in kvplan.parse_config(interval_2).layers
                              if type(layer[0]).__name__ == "FullAttentionSpec") == 32


def test_an_interval_that_contradicts_layer_types_is_named():
    data = bundled("Qwen/Qwen3.5-27B")
    data["text_config"]["full_attention_interval"] = 2
    (warning,) = warnings_of(data)
    assert "full_attention_interval (2) disagrees with layer_types (16 full-attention layers of 64)" in warning


# ------------------------------------------------------------------ gemma-2 sliding_window_size


@pytest.mark.parametrize("model_id", ["google/gemma-2-9b", "google/gemma-2-27b"])
def test_gemma2_sliding_window_size_repeats_sliding_window(model_id):
    data = bundled(model_id)
    # gemma-2 config.json: both fields 4,096
    assert data["sliding_window_size"] == data["sliding_window"] == 4096
    assert kvplan.load_model(model_id).warnings == ()
    # Gemma2Config has no such field and modeling_gemma2 never reads it: the window is sliding_window's
    assert "sliding_window_size" not in modeling_source("gemma2")
    assert hf_config({**data, "sliding_window_size": 128}).sliding_window == 4096


def test_a_gemma2_sliding_window_size_that_differs_is_named():
    (warning,) = warnings_of({**bundled("google/gemma-2-9b"), "sliding_window_size": 1024})
    assert "sliding_window_size (1024) differs from sliding_window (4096)" in warning


# ------------------------------------------------------------------ aliases: mamba's n_layer, ChatGLM's num_layers


def test_mamba_n_layer_is_num_hidden_layers_said_twice():
    data = bundled("state-spaces/mamba-2.8b-hf")
    assert data["n_layer"] == data["num_hidden_layers"] == 64
    assert kvplan.load_model("state-spaces/mamba-2.8b-hf").warnings == ()
    # MambaConfig reads num_hidden_layers; n_layer is no alias of it there (no attribute_map entry)
    assert hf_config({**data, "n_layer": 3}).num_hidden_layers == 64


def test_a_layer_alias_that_disagrees_is_named():
    (warning,) = warnings_of({**bundled("state-spaces/mamba-2.8b-hf"), "n_layer": 48})
    assert "num_hidden_layers (64) and n_layer (48) disagree on the layers: kvplan reads num_hidden_layers" in warning
    glm = bundled("THUDM/glm-4-9b-chat")
    assert glm["num_layers"] == glm["num_hidden_layers"] == 40       # remote code: the same count twice
    assert not any("num_layers" in w for w in kvplan.load_model("THUDM/glm-4-9b-chat").warnings)


# ------------------------------------------------------------------ Nemotron-H time_step_rank


def test_nemotron_h_time_step_rank_is_read_by_nothing():
    data = bundled("nvidia/Nemotron-H-56B-Base-8K")
    assert "time_step_rank" not in modeling_source("nemotron_h")
    assert not hasattr(transformers.NemotronHConfig(), "time_step_rank")
    assert meta_shapes(data) == meta_shapes({**data, "time_step_rank": 7})
    assert not any("time_step_rank" in w for w in kvplan.load_model("nvidia/Nemotron-H-56B-Base-8K").warnings)


# ------------------------------------------------------------------ MiMo-V2-Flash attention sinks


def test_mimo_swa_sinks_are_counted_as_transformers_builds_them():
    data = bundled("XiaomiMiMo/MiMo-V2-Flash")
    assert data["add_swa_attention_sink_bias"] is True and data["add_full_attention_sink_bias"] is False
    shapes = meta_shapes(data)
    sinks = {n: s for n, s in shapes.items() if n.endswith("self_attn.sinks")}
    # layer 0 and every 6th are full (9 of 48): 39 sliding layers x 64 heads
    assert len(sinks) == 39 and set(sinks.values()) == {(64,)}
    model = kvplan.load_model("XiaomiMiMo/MiMo-V2-Flash")
    assert param_count(model.require_arch()).total == sum(math.prod(s) for s in shapes.values())
    assert model.warnings == ()
    # transformers builds them whatever the flags say; only "false" makes vLLM 0.33 drop them
    assert meta_shapes({**data, "add_full_attention_sink_bias": True}) == shapes
    (warning,) = warnings_of({**data, "add_swa_attention_sink_bias": False})
    assert "add_swa_attention_sink_bias is false" in warning and "48 x 64 parameters" in warning


# ------------------------------------------------------------------ MiniMax-M2 fields


MINIMAX_UNREAD = ("attn_type_list", "layernorm_full_attention_beta", "layernorm_linear_attention_beta",
                  "layernorm_mlp_beta", "mlp_intermediate_size", "shared_intermediate_size", "shared_moe_mode")


def test_minimax_m2_fields_transformers_never_reads():
    data = bundled("MiniMaxAI/MiniMax-M2")
    source = modeling_source("minimax_m2")
    assert not [k for k in MINIMAX_UNREAD if k in source]
    assert data["attn_type_list"] == [1] * 62 and data["shared_intermediate_size"] == 0
    shapes = meta_shapes(data)
    assert meta_shapes({k: v for k, v in data.items() if k not in MINIMAX_UNREAD}) == shapes
    # and kvplan's count is that model: 228,689,748,992 parameters
    arch = kvplan.load_model("MiniMaxAI/MiniMax-M2").require_arch()
    assert param_count(arch).total == sum(math.prod(s) for s in shapes.values()) == 228_689_748_992
    assert kvplan.load_model("MiniMaxAI/MiniMax-M2").warnings == ()


def test_minimax_m2_values_that_would_matter_are_named():
    data = bundled("MiniMaxAI/MiniMax-M2")
    linear = [0 if i % 8 else 1 for i in range(62)]
    (warning,) = warnings_of({**data, "attn_type_list": linear})
    assert "marks 54 layer(s) as linear (lightning) attention" in warning and "upper bound" in warning
    (warning,) = warnings_of({**data, "shared_intermediate_size": 1024})
    assert "shared_intermediate_size is 1024" in warning and "3 x 3072 x 1024" in warning


# ------------------------------------------------------------------ MTP fields


@pytest.mark.parametrize("model_id,layers", [("deepseek-ai/DeepSeek-V3.2", 61), ("zai-org/GLM-5", 78)])
def test_num_nextn_predict_layers_is_read_for_drafting(model_id, layers):
    """vLLM 0.33 config/speculative.py maps deepseek_v32 and glm_moe_dsa to deepseek_mtp (DeepseekV32MTPModel) and
    loads their layer `num_hidden_layers` only then (deepseek_v2.py load_weights skips spec layers otherwise)."""
    model = kvplan.load_model(model_id)
    assert bundled(model_id)["num_nextn_predict_layers"] == 1
    assert model.warnings == () and model.require_arch().mtp_layers == 1
    assert len(model.layers) == layers     # the MTP layer is not one of the model's own
    plain = kvplan.plan(model_id, gpu="H200", tp=8, max_model_len=4096)
    drafted = kvplan.plan(model_id, gpu="H200", tp=8, max_model_len=4096,
                          speculative={"method": "mtp", "num_speculative_tokens": 1})
    # one more MLA layer per token: 576 latent values x 2 B + its indexer key (128 fp8 + a 4-byte scale)
    assert drafted.kv_bytes_per_token - plain.kv_bytes_per_token == 576 * 2 + 132


def test_qwen3_next_mtp_layer_is_there_without_a_key():
    """Qwen3-Next's config names no MTP layers, but its checkpoint holds one (Qwen3-Next-80B-A3B-Instruct's
    published tensor table: mtp.fc [2048, 4096], mtp.layers.0.* with 512 experts, 1,650,471,424 parameters) and
    vLLM 0.33 drafts with it (qwen3_next_mtp.py: `getattr(config, "num_nextn_predict_layers", 1)`)."""
    data = bundled("Qwen/Qwen3-Next-80B-A3B-Thinking")
    assert not {"num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers"} & set(data)
    assert kvplan.parse_config(data).require_arch().mtp_layers == 1
    assert kvplan.parse_config({**data, "mtp_num_hidden_layers": 2}).require_arch().mtp_layers == 2
    assert kvplan.parse_config({**data, "num_nextn_predict_layers": 0}).require_arch().mtp_layers == 0
    h = 2048  # the MTP block: full attention (q with its gate 2 x 16 x 256, k / v 2 x 256, o), 512 experts + shared
    block = (8192 + 2 * 512) * h + h * 4096 + 2 * 256 + (512 + 1) * 3 * 512 * h + 512 * h + h + 2 * h
    assert param_count(kvplan.parse_config(data).require_arch()).mtp == block + 2 * h * h + 3 * h == 1_650_471_424


@pytest.mark.parametrize("model_id", ["MiniMaxAI/MiniMax-M2", "MiniMaxAI/MiniMax-M2.5"])
def test_minimax_mtp_modules_are_read_and_cost_nothing(model_id):
    """num_mtp_modules 3: vLLM 0.33 (minimax_m2.py hf_to_vllm_mapper) and SGLang 0.5.23 drop those layers and
    draft with none of them; the published MiniMax-M2 checkpoint's 230,121,630,720 B hold none either (the rule
    without them is 97,549,312 B short, all of it the float32 routers: tests/test_multimodal.py)."""
    model = kvplan.load_model(model_id)
    assert model.warnings == () and model.require_arch().mtp_layers == 0
    assert {"use_mtp", "num_mtp_modules", "mtp_transformer_layers"} <= set(model.fields)
    with pytest.raises(kvplan.KVPlanError, match=r"3 MTP module\(s\) of 1 layer\(s\) each .* no MiniMax-M2 MTP"):
        kvplan.plan(model_id, gpu="H200", tp=8, max_model_len=4096,
                    speculative={"method": "mtp", "num_speculative_tokens": 1})


# ------------------------------------------------------------------ remote-code families keep a bounded warning


def test_phi3_small_blocksparse_fields_say_what_they_move():
    (field_warning,) = [w for w in kvplan.load_model("microsoft/Phi-3-small-8k-instruct").warnings
                        if "config field" in w]
    assert "blocksparse_vert_stride" in field_warning and "dense_attention_every_n_layers" in field_warning
    assert "upper bound" in field_warning and "mup_attn_multiplier" not in field_warning


def test_chatglm_post_layer_norm_true_is_the_final_norm_counted():
    model = kvplan.load_model("THUDM/chatglm3-6b")
    assert not any("post_layer_norm" in w for w in model.warnings)
    (warning,) = [w for w in warnings_of({**bundled("THUDM/chatglm3-6b"), "post_layer_norm": False})
                  if "post_layer_norm" in w]
    assert "count one (4096 parameters" in warning


def test_an_unknown_structural_field_is_still_named():
    data = {**bundled("google/gemma-2-9b"), "num_mystery_layers": 3}
    assert any("num_mystery_layers may change the cache" in w for w in warnings_of(data))


def test_rules_name_real_families():
    """Every (family, field) rule is for a model_type kvplan knows, so none is dead."""
    from kvplan.config import unread

    families = {family for family, _ in unread.RULES}
    shipped = set(json.loads((kvplan.config.verified._DATA).read_text())["families"])
    assert families - shipped <= {"chatglm", "phi3small"}     # remote code only


# ------------------------------------------------------------------ Qwen2.5-VL: shipped as an image-text model


def test_qwen2_5_vl_is_verified_against_the_image_text_model_transformers_ships():
    """transformers 5.24 ships qwen2_5_vl as Qwen2_5_VLForConditionalGeneration only (no causal LM, so the sweep
    never built it). Built on meta from the bundled config, its language model and vision tower are kvplan's
    counts, and one prefill through its language model caches what kvplan's estimate says."""
    from validation.measure import walk_cache

    data = bundled("Qwen/Qwen2.5-VL-7B-Instruct")
    with torch.device("meta"):
        model = transformers.Qwen2_5_VLForConditionalGeneration._from_config(hf_config(data), dtype=torch.bfloat16)
    named = dict(model.named_parameters())
    vision = sum(p.numel() for n, p in named.items() if n.startswith("model.visual."))
    text = sum(p.numel() for n, p in named.items() if not n.startswith("model.visual."))
    spec = kvplan.load_model("Qwen/Qwen2.5-VL-7B-Instruct")
    arch = spec.require_arch()
    # 28 layers' q/k/v biases (3,584 + 2 x 512) are what the llama-like fallback missed: 129,024 parameters
    assert param_count(arch).total == text == 7_615_616_512
    assert dict(arch.towers) == {"vision": vision} and vision == 676_550_144
    assert spec.warnings == () and kvplan.estimate(spec, 4096).verified is True
    with torch.no_grad():
        out = model.model.language_model(input_ids=torch.zeros((1, 64), dtype=torch.long, device="meta"),
                                         use_cache=True)
    held = walk_cache(out.past_key_values)
    est = kvplan.estimate(spec, seq_len=64, batch_size=1, dtype="bf16", prompt_len=64)
    # 28 layers x 2 x 4 KV heads x 128 x 2 B x 64 tokens = 3,670,016 B
    assert held.logical == est.logical_bytes == 28 * 2 * 4 * 128 * 2 * 64


def test_qwen2_5_vl_defaults_are_its_text_config_class_defaults():
    """A flat Qwen2.5-VL config fills its text_config from Qwen2_5_VLTextConfig: kvplan's table for absent keys
    says the same (80 layers, max_window_layers 80, where Qwen2Config has 32 and 28)."""
    import dataclasses

    from kvplan.config.reader import FAMILY_DEFAULTS

    fields = {f.name: f.default for f in dataclasses.fields(transformers.Qwen2_5_VLTextConfig)}
    for key, value in FAMILY_DEFAULTS["qwen2_5_vl"].items():
        assert fields[key] == value, key


def test_multimodal_types_are_what_transformers_ships():
    """kvplan/data/multimodal_types.json equals transformers' mappings (tools/gen_multimodal_types.py), and a
    family in it is said to ship as its class, never "not one transformers ships"."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("gen", root / "tools" / "gen_multimodal_types.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    stored = json.loads((root / "kvplan" / "data" / "multimodal_types.json").read_text())
    assert stored["types"] == gen.multimodal_types() and stored["transformers"] == transformers.__version__
    assert stored["types"]["qwen2_vl"] == "Qwen2VLForConditionalGeneration"
    data = {**bundled("Qwen/Qwen2.5-VL-7B-Instruct"), "model_type": "qwen2_vl"}
    (warning,) = warnings_of(data)
    assert "ships in transformers 5.24.0 only as Qwen2VLForConditionalGeneration" in warning


@pytest.mark.parametrize("model_id,kv_per_token", [
    ("deepseek-ai/DeepSeek-V3", 576 * 2),          # one more MLA layer: 512 latent + 64 RoPE values x 2 B
    ("deepseek-ai/DeepSeek-V3.2", 576 * 2 + 132),  # and its indexer key: 128 fp8 values + a 4-byte scale
    ("Qwen/Qwen3.5-27B", 2 * 1 * 256 * 2),         # a full-attention layer: 4 KV heads over TP 8 keep 1 a rank
])
def test_a_plan_without_drafting_says_what_mtp_would_add(model_id, kv_per_token):
    """vLLM 0.33 loads no MTP layer without speculative decoding (deepseek_v2.py load_weights skips spec layers,
    qwen3_5.py maps `mtp.` to nothing): the plan holds none and its note says what --speculative mtp adds."""
    from kvplan.units import fmt_bytes

    # a text-only server: Qwen3.5's vision tower would add vLLM's unsized encoder-profile warning (vllm_mm.py)
    text_only = {"images_per_prompt": 0} if kvplan.load_model(model_id).require_arch().towers else {}
    plain = kvplan.plan(model_id, gpu="H200", tp=8, max_model_len=4096, **text_only)
    drafted = kvplan.plan(model_id, gpu="H200", tp=8, max_model_len=4096, **text_only,
                          speculative={"method": "mtp", "num_speculative_tokens": 1})
    (note,) = [n for n in plain.notes if n.startswith("MTP:")]
    assert drafted.kv_bytes_per_token - plain.kv_bytes_per_token == kv_per_token
    assert f"adds {fmt_bytes(drafted.extra['draft model weights'])} of weights per GPU" in note
    assert f"{kv_per_token:,} B of KV per token: plan with --speculative mtp" in note
    assert plain.warnings == [] and not [n for n in drafted.notes if n.startswith("MTP:")]
