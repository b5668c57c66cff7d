"""Vision towers and projectors by rule, from a multimodal config's `vision_config` (a boundary module: it alone
knows the towers' field names).

vLLM and SGLang load the tower and the projector with the language model (in the model dtype, split across TP
ranks), so a plan that leaves them out overstates the KV pool: gemma-3-27b-it's SigLIP is 0.40 B parameters,
0.80 GiB in bf16. Each rule lists the tensors transformers 5.24 builds (`modeling_<tower>.py`), with the
defaults of its config class for fields a published config leaves out; tests/test_multimodal.py checks every rule
against `model.parameters()` of the model built on the meta device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import shown


@dataclass(frozen=True)
class Towers:
    """Parameters of the vision tower and of the projector into the language model's hidden size."""

    kind: str          # the tower's model_type, e.g. siglip_vision_model
    vision: int
    projector: int
    # the largest image in the language model's tokens, where kvplan knows it (vLLM's multimodal profiling):
    # `image_tokens` embeddings the projector emits, `image_span` prompt tokens its placeholder takes
    image_tokens: int = 0
    image_span: int = 0
    audio: int = 0     # an audio encoder (MOSS-Transcribe-Diarize's Whisper encoder), counted like the vision tower

    @property
    def total(self) -> int:
        return self.vision + self.projector + self.audio


def _lin(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


class _Fields:
    """vision_config values with the tower config class's defaults (transformers 5.24): whole sizes from 1 to
    2**40, and for the fractions (Llama 4's pixel_shuffle_ratio) a finite number in (0, 1]."""

    FRACTIONS = frozenset({"pixel_shuffle_ratio"})

    def __init__(self, data: Mapping[str, Any], defaults: Mapping[str, Any]):
        self.data, self.defaults = data, defaults

    def __getitem__(self, key: str):
        value = self.data.get(key, self.defaults.get(key))
        if key in self.FRACTIONS:
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1:
                return value
            raise ValueError(key)
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 2**40:
            return value
        raise ValueError(key)


def _siglip(v: _Fields, text_hidden: int, top: Mapping[str, Any], use_head: bool) -> tuple[int, int]:
    """SigLIP (modeling_siglip.py): conv patch embedding with bias, learned positions, pre-norm blocks of
    LayerNorms, biased q/k/v/out and fc1/fc2, a post LayerNorm; the attention-pooling head when vision_use_head.
    gemma-3-4b-it: 1152 hidden, 27 blocks, 896 / 14 = 64^2 = 4,096 positions -> 416,866,032."""
    h, i, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    block = 4 * h + 4 * _lin(h, h, True) + _lin(h, i, True) + _lin(i, h, True)
    vision = v["num_channels"] * p * p * h + h + (v["image_size"] // p) ** 2 * h + v["num_hidden_layers"] * block
    vision += 2 * h
    if use_head:  # probe + nn.MultiheadAttention (in_proj 3h x h + bias, out_proj) + LayerNorm + MLP
        vision += h + 3 * h * h + 3 * h + _lin(h, h, True) + 2 * h + _lin(h, i, True) + _lin(i, h, True)
    return vision, 0


def _gemma3(v: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """Gemma 3: SigLIP (its pooling head only where vision_use_head is left at SiglipVisionConfig's True: the
    published configs set it False); Gemma3MultiModalProjector = mm_input_projection_weight
    [vision hidden, text hidden] + mm_soft_emb_norm (RMSNorm over the vision hidden). 4b: 1152 x 2560 + 1152."""
    vision, _ = _siglip(v, text_hidden, top, use_head=bool(v.data.get("vision_use_head", True)))
    return vision, v["hidden_size"] * text_hidden + v["hidden_size"]


def _pixtral(v: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """Pixtral (modeling_pixtral.py): conv patches without bias, ln_pre, blocks of RMSNorms, q/k/v/o without bias
    and a gated MLP; 2-D RoPE, so no position table. Mistral3MultiModalProjector (modeling_mistral3.py): RMSNorm,
    patch_merger.merging_layer [h, h x merge^2], linear_1 [text, h] and linear_2 [text, text], biased when
    multimodal_projector_bias."""
    h, i, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    heads = v["num_attention_heads"]
    inner = heads * int(v.data.get("head_dim") or h // heads)
    block = 2 * h + 3 * h * inner + inner * h + 3 * h * i
    vision = v["num_channels"] * p * p * h + h + v["num_hidden_layers"] * block
    merge = int(top.get("spatial_merge_size", 2))
    bias = bool(top.get("multimodal_projector_bias", False))
    projector = h + h * merge * merge * h + _lin(h, text_hidden, bias) + _lin(text_hidden, text_hidden, bias)
    return vision, projector


def _llama4(v: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """Llama 4 (modeling_llama4.py Llama4VisionModel): class embedding, (image/p)^2 + 1 positions, a linear patch
    embedding [h, C p^2], pre and post LayerNorms, blocks of biased q/k/v/o and fc1/fc2 with two LayerNorms, and
    the pixel-shuffle adapter (Llama4VisionMLP2: fc1 [projector_input_dim, intermediate_size] + fc2 [out, out],
    no bias); the projector linear_1
    [text hidden, vision_output_dim]. Scout: 1408 hidden, 34 blocks -> 850,960,896 + 20,971,520."""
    h, i, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    block = 4 * h + 4 * _lin(h, h, True) + _lin(h, i, True) + _lin(i, h, True)
    positions = (v["image_size"] // p) ** 2 + 1
    adapter = i * v["projector_input_dim"] + v["projector_output_dim"] ** 2
    vision = h + positions * h + v["num_channels"] * p * p * h + 4 * h + v["num_hidden_layers"] * block + adapter
    bias = bool(v.data.get("multi_modal_projector_bias", False))
    return vision, _lin(v["vision_output_dim"], text_hidden, bias)


def _qwen_vision(v: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """Qwen3-VL / Qwen3.5 vision (modeling_qwen3_5.py): Conv3d patches [h, C, t, p, p] with bias, a learned
    position table, blocks of LayerNorms, fused biased qkv, proj and linear_fc1/fc2; the merger (LayerNorm, fc1
    [h m^2, h m^2], fc2 [out, h m^2]) and one deepstack merger per deepstack index (its norm over h m^2), all in
    `model.visual`. Qwen3.5-27B: 1152 hidden, 27 blocks, out 5120 -> 460,730,096."""
    h, i, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    block = 4 * h + _lin(h, 3 * h, True) + _lin(h, h, True) + _lin(h, i, True) + _lin(i, h, True)
    patch = v["in_channels"] * v["temporal_patch_size"] * p * p * h + h
    merged = h * v["spatial_merge_size"] ** 2
    merger = _lin(merged, merged, True) + _lin(merged, v["out_hidden_size"], True)
    deepstack = len(v.data.get("deepstack_visual_indexes", v.defaults.get("deepstack_visual_indexes")) or ())
    vision = patch + v["num_position_embeddings"] * h + v["depth"] * block + 2 * h + merger
    return vision + deepstack * (2 * merged + merger), 0


def _glm4v(v: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """GLM-4V / GLM-4.6V vision (modeling_glm4v_moe.py Glm4vMoeVisionModel): a position table [(image/p)^2, h],
    Conv3d patches [h, C, t, p, p] with bias, blocks of two RMSNorms, qkv [3h, h] (biased when attention_bias),
    proj [h, h] without bias and a gated MLP as wide as out_hidden_size (o), no bias; then an RMSNorm, a biased
    Conv2d downsample [o, h, m, m], an RMSNorm, and the merger in `model.visual`: proj [o, o], a LayerNorm over o and
    a gated MLP of intermediate_size (i), no bias. GLM-4.6V: 1536 hidden, 24 blocks, o 4096, i 10944."""
    h, o, i, p, m = (v["hidden_size"], v["out_hidden_size"], v["intermediate_size"], v["patch_size"],
                     v["spatial_merge_size"])
    bias = v.data.get("attention_bias", False)
    if not isinstance(bias, bool):
        raise ValueError("attention_bias")
    block = 2 * h + _lin(h, 3 * h, bias) + _lin(h, h, False) + 3 * h * o
    patch = v["in_channels"] * v["temporal_patch_size"] * p * p * h + h
    positions = (v["image_size"] // p) ** 2 * h
    tail = h + o * h * m * m + o + h + o * o + 2 * o + 3 * o * i
    return positions + patch + v["depth"] * block + tail, 0


def _qwen25_vision(v: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """Qwen2.5-VL vision (modeling_qwen2_5_vl.py): Conv3d patches without bias, no position table, blocks of
    RMSNorms, fused biased qkv, biased proj and a biased gated MLP; the merger (ln_q RMSNorm, mlp.0
    [h m^2, h m^2] and mlp.2 [out, h m^2], biased). Qwen2.5-VL-7B: 1280 hidden, 32 blocks, out 3584."""
    h, i, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    block = 2 * h + _lin(h, 3 * h, True) + _lin(h, h, True) + 2 * _lin(h, i, True) + _lin(i, h, True)
    merged = h * v["spatial_merge_size"] ** 2
    merger = h + _lin(merged, merged, True) + _lin(merged, v["out_hidden_size"], True)
    return v["in_channels"] * v["temporal_patch_size"] * p * p * h + v["depth"] * block + merger, 0


def _clip_vision(v: _Fields) -> int:
    """CLIP's vision transformer (modeling_clip.py CLIPVisionModel, GIT's GitVisionModel alike): class embedding,
    conv patches without bias, (image/p)^2 + 1 positions, pre and post LayerNorms, blocks of LayerNorms and biased
    q/k/v/out and fc1/fc2."""
    h, i, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    block = 4 * h + 4 * _lin(h, h, True) + _lin(h, i, True) + _lin(i, h, True)
    positions = (v["image_size"] // p) ** 2 + 1
    return h + v["num_channels"] * p * p * h + positions * h + 4 * h + v["num_hidden_layers"] * block


def _clip(v: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """CLIP, every layer built whatever vision_feature_layer picks. LlavaMultiModalProjector: linear_1 [text, h x
    the number of feature layers] and linear_2 [text, text], biased when multimodal_projector_bias (default True)."""
    h = v["hidden_size"]
    vision = _clip_vision(v)
    layers = top.get("vision_feature_layer", -2)
    width = h * (len(layers) if isinstance(layers, list) else 1)
    bias = bool(top.get("multimodal_projector_bias", True))
    return vision, _lin(width, text_hidden, bias) + _lin(text_hidden, text_hidden, bias)


def _gemma4(v: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """Gemma 4 vision (modeling_gemma4.py): a 2-D position table [2, position_embedding_size, h], input_proj
    [h, 3 p^2], blocks of q/k/v/o without bias, q/k RMSNorms over head_dim, a gated MLP and four RMSNorms;
    embed_vision.embedding_projection [text hidden, h]. 26B-A4B: 1152 hidden, 27 blocks -> 569,548,080 + 3,244,032."""
    h, i, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    heads, kv_heads, dim = v["num_attention_heads"], v["num_key_value_heads"], v["head_dim"]
    bias = bool(v.data.get("attention_bias", False))
    attention = (_lin(h, heads * dim, bias) + 2 * _lin(h, kv_heads * dim, bias) + _lin(heads * dim, h, bias)
                 + 2 * dim)
    block = attention + 3 * h * i + 4 * h
    vision = 2 * v["position_embedding_size"] * h + 3 * p * p * h + v["num_hidden_layers"] * block
    return vision, h * text_hidden


def _git(v: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """GIT (modeling_git.py): GitVisionModel is CLIP's vision transformer; GitProjection a biased Linear [text
    hidden, h] and a LayerNorm [text hidden]. Defaults: 85,798,656 + 592,896 (768 x 768 + 3 x 768)."""
    return _clip_vision(v), _lin(v["hidden_size"], text_hidden, True) + 2 * text_hidden


def _got_ocr2(v: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """GOT-OCR2 (modeling_got_ocr2.py): a SAM-style ViT: biased conv patches, an absolute position table
    [(image/p)^2, h] (use_abs_pos), blocks of LayerNorms, a fused qkv [3h, h] (qkv_bias), proj, lin1 / lin2 of mlp_dim,
    and per block relative positions rel_pos_h / rel_pos_w [2s - 1, h / heads] (use_rel_pos; s the window_size, or
    image/p on the global_attn_indexes blocks); a neck of a 1x1 conv [out, h] and a 3x3 conv [out, out], both
    bias-free, each followed by a LayerNorm. GotOcr2MultiModalProjector: 3x3 convs out -> 2 out -> text hidden
    without bias, then a biased Linear [text, text]. Defaults: 12 blocks (4 global: 127 rows, 8 windowed: 27)."""
    h, p, heads, out = v["hidden_size"], v["patch_size"], v["num_attention_heads"], v["output_channels"]
    side, window = v["image_size"] // p, v.data.get("window_size", 14)
    flags = {k: v.data.get(k, True) for k in ("qkv_bias", "use_abs_pos", "use_rel_pos")}
    global_blocks = v.data.get("global_attn_indexes", (2, 5, 8, 11))
    if not all(isinstance(x, bool) for x in flags.values()) or not isinstance(window, int) or \
            not isinstance(global_blocks, (list, tuple)):
        raise ValueError("got_ocr2_vision")
    block = 4 * h + 3 * h * h + (3 * h if flags["qkv_bias"] else 0) + _lin(h, h, True) + _lin(h, v["mlp_dim"], True) \
        + _lin(v["mlp_dim"], h, True)
    layers = v["num_hidden_layers"]
    rel = sum(2 * (2 * (side if i in global_blocks else window) - 1) * (h // heads) for i in range(layers))
    vision = (v["num_channels"] * p * p * h + h + (side * side * h if flags["use_abs_pos"] else 0)
              + layers * block + (rel if flags["use_rel_pos"] else 0) + out * h + 9 * out * out + 4 * out)
    return vision, 9 * out * 2 * out + 9 * 2 * out * text_hidden + _lin(text_hidden, text_hidden, True)


def _moss_audio(a: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """MOSS-Transcribe-Diarize (modeling_moss_transcribe_diarize.py): a Whisper encoder (conv1 [d, mel, 3] and
    conv2 [d, d, 3], biased; learned positions [max_source_positions, d]; blocks of q/v/out biased and k bias-free,
    two LayerNorms, fc1 / fc2 biased; a final LayerNorm) and the projector: linear_1 [text, d x audio_merge_size],
    linear_2 [text, text] (projector_bias), a LayerNorm [text]. Defaults: 24 blocks of 1024 -> 307,219,456 +
    5,243,904 (= 1024 x 4096 + 1024 x 1024 + 4 x 1024)."""
    d, i, mel = a["hidden_size"], a["intermediate_size"], a["num_mel_bins"]
    block = 4 * d + 3 * _lin(d, d, True) + d * d + _lin(d, i, True) + _lin(i, d, True)
    audio = _lin(mel * 3, d, True) + _lin(d * 3, d, True) + a["max_source_positions"] * d \
        + a["num_hidden_layers"] * block + 2 * d
    bias, merge = top.get("projector_bias", True), top.get("audio_merge_size", 4)
    if not isinstance(bias, bool) or not isinstance(merge, int) or isinstance(merge, bool) or merge < 1:
        raise ValueError("audio_merge_size")
    return audio, _lin(d * merge, text_hidden, bias) + _lin(text_hidden, text_hidden, bias) + 2 * text_hidden


def _phi4mm_vision(v: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """Phi-4-multimodal's image embedding (modeling_phi4_multimodal.py Phi4MultimodalImageEmbedding): a SigLIP
    tower (biased conv patches, (image/p)^2 positions, blocks of LayerNorms and biased q/k/v/out and fc1/fc2, a
    post LayerNorm and the attention-pooling head: probe [h], nn.MultiheadAttention in_proj [3h, h] and out_proj,
    a LayerNorm and an MLP), then img_projection_up [text, h] and img_projection_down [text, text], biased, and
    the global / sub-image separators [h] each. Defaults: 27 blocks of 1152 -> 428,278,512 + 12,983,040."""
    h, i, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    mlp = _lin(h, i, True) + _lin(i, h, True)
    block = 4 * h + 4 * _lin(h, h, True) + mlp
    head = h + 3 * h * h + 3 * h + _lin(h, h, True) + 2 * h + mlp
    vision = _lin(v["num_channels"] * p * p, h, True) + (v["image_size"] // p) ** 2 * h \
        + v["num_hidden_layers"] * block + 2 * h + head
    return vision, _lin(h, text_hidden, True) + _lin(text_hidden, text_hidden, True) + 2 * h


def _phi4mm_audio(a: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """Phi-4-multimodal's audio embedding (Phi4MultimodalAudioEmbedding): a conformer. NeMo subsampling: a 3x3
    Conv2d(1, c) then log2(time_reduction) - 1 pairs of a depthwise 3x3 and a 1x1 Conv2d(c, c), all biased, and
    `out` [h, c x the input width halved that many times]; a relative-attention bias table [max_distance (x 2
    unless symmetric), heads]; per block two MLPs (LayerNorm, gate_up [2i, h], down [h, i]), biased q/k/v/o, a
    conv module (LayerNorm, GLU pointwise conv [2e, h] with b1 / b2 [e], depthwise [h x m, k] and pointwise [o, h x
    m] convs, a pointwise conv [e, h], all biased) and two LayerNorms. Projections up [text, h x downsample_rate]
    and down [text, text], biased, once for speech and once for vision-speech. Defaults: 24 blocks of 1024 ->
    460,783,616 + 25,178,112."""
    h, i, heads, c = a["hidden_size"], a["intermediate_size"], a["num_attention_heads"], a["nemo_conv_channels"]
    e, m, k, o = a["ext_pw_out_channel"], a["depthwise_multiplier"], a["kernel_size"], \
        a["depthwise_separable_out_channel"]
    steps = a["time_reduction"].bit_length() - 1
    if a["time_reduction"] != 1 << steps or steps < 1:
        raise ValueError("time_reduction")
    width = a["input_size"]
    for _ in range(steps):   # Phi4MultimodalAudioConfig.__post_init__: nemo_final_size
        width = (width - 1) // 2 + 1
    symmetric = a.data.get("bias_symmetric", False)
    if not isinstance(symmetric, bool):
        raise ValueError("bias_symmetric")
    subsampling = 10 * c + (steps - 1) * (10 * c + c * c + c) + _lin(c * width, h, True)
    mlp = 2 * h + _lin(h, 2 * i, True) + _lin(i, h, True)
    conv = 2 * h + _lin(h, 2 * e, True) + 2 * e + (h * m * k + h * m) + _lin(h * m, o, True) + _lin(h, e, True)
    block = 2 * mlp + 4 * _lin(h, h, True) + conv + 4 * h
    audio = subsampling + a["bias_max_distance"] * (1 if symmetric else 2) * heads + a["num_blocks"] * block
    up = h * a["downsample_rate"]
    return audio, 2 * (_lin(up, text_hidden, True) + _lin(text_hidden, text_hidden, True))


# SiglipVisionConfig's defaults (configuration_siglip.py); the others below are their config classes' own
_SIGLIP = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
           "num_channels": 3, "image_size": 224, "patch_size": 16}
# tower model_type -> (the wrapper model_types it is verified in, rule, the tower config class's defaults)
_RULES: dict[str, tuple[frozenset[str], Callable, Mapping[str, Any]]] = {
    "siglip_vision_model": (frozenset({"gemma3"}), _gemma3, _SIGLIP),
    "pixtral": (frozenset({"mistral3"}), _pixtral,  # PixtralVisionConfig's defaults
                {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
                 "num_channels": 3, "image_size": 1024, "patch_size": 16}),
    "llama4_vision_model": (frozenset({"llama4"}), _llama4,
                            {"hidden_size": 768, "intermediate_size": 5632, "num_hidden_layers": 34,
                             "num_attention_heads": 16, "num_channels": 3, "image_size": 448, "patch_size": 14,
                             "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096, "projector_output_dim": 4096,
                             "vision_output_dim": 7680}),
    "qwen3_5_vision": (frozenset({"qwen3_5", "qwen3_5_moe"}), _qwen_vision,
                       {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "in_channels": 3,
                        "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 3584,
                        "num_position_embeddings": 2304}),
    "gemma4_vision": (frozenset({"gemma4"}), _gemma4,
                      {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 16,
                       "num_attention_heads": 12, "num_key_value_heads": 12, "head_dim": 64, "patch_size": 16,
                       "position_embedding_size": 10240}),
}
_RULES["qwen3_5_moe_vision"] = _RULES["qwen3_5_vision"]
_RULES["qwen2_5_vl_vision"] = (frozenset({"qwen2_5_vl"}), _qwen25_vision,
                               {"depth": 32, "hidden_size": 3584, "intermediate_size": 3420, "in_channels": 3,
                                "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2,
                                "out_hidden_size": 3584})
_RULES["clip_vision_model"] = (frozenset({"llava"}), _clip,  # CLIPVisionConfig's defaults
                               {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                                "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 32})
_RULES["git_vision_model"] = (frozenset({"git"}), _git,  # GitVisionConfig's defaults
                              {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                               "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 16})
_RULES["got_ocr2_vision"] = (frozenset({"got_ocr2"}), _got_ocr2,  # GotOcr2VisionConfig's defaults
                             {"hidden_size": 768, "output_channels": 256, "num_hidden_layers": 12,
                              "num_attention_heads": 12, "num_channels": 3, "image_size": 1024, "patch_size": 16,
                              "mlp_dim": 3072})
def _gemma4_audio(a: _Fields, text_hidden: int, top: Mapping[str, Any]) -> tuple[int, int]:
    """Gemma 4's audio encoder (modeling_gemma4.py Gemma4AudioModel, a conformer) and its embedder. Subsampling:
    two bias-free 3x3 convs (1 -> c0 -> c1 channels) each with a scale-only LayerNorm, then input_proj_linear
    [h, c0 / 4 x c1]. Per layer: two feed-forwards (h -> 4h -> h, pre and post RMSNorm), attention (q, k, v, post
    [h, h], relative_k_proj [heads x head_dim, h], per_dim_scale [head_dim]), a light conv (linear_start [2h, h],
    linear_end [h, h], depthwise [h, 1, kernel], two RMSNorms), three RMSNorms; output_proj [out, h] + bias. The
    embedder's embedding_projection [text, out] (embed_audio), its pre-norm scale-free. E2B: 12 layers of 1024 ->
    304,824,608 + 2,359,296 (= 1,536 x 1,536) = 307,183,904."""
    h, layers, heads, kernel, out = (a["hidden_size"], a["num_hidden_layers"], a["num_attention_heads"],
                                     a["conv_kernel_size"], a["output_proj_dims"])
    channels = a.data.get("subsampling_conv_channels", a.defaults["subsampling_conv_channels"])
    if not (isinstance(channels, (list, tuple)) and len(channels) == 2
            and all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 2**20 for c in channels)):
        raise ValueError("subsampling_conv_channels")
    if h % heads:
        raise ValueError("num_attention_heads")
    c0, c1 = channels
    subsample = 9 * c0 + c0 + 9 * c0 * c1 + c1 + c0 // 4 * c1 * h
    feed_forward = 2 * 4 * h * h + 2 * h
    attention = 4 * h * h + h * h + h // heads
    light_conv = 2 * h * h + h * h + h * kernel + 2 * h
    audio = subsample + layers * (2 * feed_forward + attention + light_conv + 3 * h) + _lin(h, out, True)
    return audio + out * text_hidden, 0    # the embedder with the tower, as the component names group it


_RULES["phi4_multimodal_vision"] = (frozenset({"phi4_multimodal"}), _phi4mm_vision,  # its config class's defaults
                                    {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27,
                                     "num_attention_heads": 16, "num_channels": 3, "image_size": 448,
                                     "patch_size": 14})
# audio towers by wrapper model_type: (rule, the audio config class's defaults, its aliases)
_AUDIO_RULES: dict[str, tuple[Callable, Mapping[str, Any], Mapping[str, str]]] = {
    "phi4_multimodal": (_phi4mm_audio, {"hidden_size": 1024, "intermediate_size": 1536, "num_blocks": 24,
                                        "num_attention_heads": 16, "ext_pw_out_channel": 1024,
                                        "depthwise_separable_out_channel": 1024, "depthwise_multiplier": 1,
                                        "kernel_size": 3, "input_size": 80, "time_reduction": 8,
                                        "bias_max_distance": 1000, "nemo_conv_channels": 1024,
                                        "downsample_rate": 1}, {}),
    "gemma4": (_gemma4_audio, {"hidden_size": 1024, "num_hidden_layers": 12, "num_attention_heads": 8,
                               "conv_kernel_size": 5, "output_proj_dims": 1536,
                               "subsampling_conv_channels": (128, 32)}, {}),
    "moss_transcribe_diarize": (_moss_audio, {"hidden_size": 1024, "intermediate_size": 4096, "num_mel_bins": 80,
                                              "num_hidden_layers": 24, "max_source_positions": 1500},
                                {"d_model": "hidden_size", "encoder_layers": "num_hidden_layers",
                                 "encoder_ffn_dim": "intermediate_size"}),
}
# the tower a wrapper's config builds when its vision_config names no model_type (sub_configs_defaults in each
# configuration_<wrapper>.py of transformers 5.24)
_DEFAULT_TOWER = {"gemma3": "siglip_vision_model", "mistral3": "pixtral", "llava": "clip_vision_model",
                  "llama4": "llama4_vision_model", "gemma4": "gemma4_vision", "qwen2_5_vl": "qwen2_5_vl_vision",
                  "qwen3_5": "qwen3_5_vision", "qwen3_5_moe": "qwen3_5_moe_vision"}
# published Qwen configs name the wrapper's own type in vision_config; transformers renames it
# (configuration_qwen3_5.py: `if self.vision_config.get("model_type") == "qwen3_5": ... = "qwen3_5_vision"`)
_RENAMED = frozenset({"qwen2_5_vl", "qwen3_5", "qwen3_5_moe"})
# Qwen3-VL's tower is the one Qwen3.5's inherits (modeling_qwen3_vl.py Qwen3VLVisionModel), renamed the same way
# (configuration_qwen3_vl.py: "qwen3_vl" -> "qwen3_vl_vision"), with three deepstack mergers by default
# (Qwen3VLVisionConfig.deepstack_visual_indexes (8, 16, 24)). Qwen3-VL-30B-A3B: 1152 hidden, 27 blocks, out 2048.
_QWEN3_VL = {**_RULES["qwen3_5_vision"][2], "deepstack_visual_indexes": (8, 16, 24)}
_RULES["qwen3_vl_vision"] = (frozenset({"qwen3_vl"}), _qwen_vision, _QWEN3_VL)
_RULES["qwen3_vl_moe_vision"] = (frozenset({"qwen3_vl_moe"}), _qwen_vision, _QWEN3_VL)
_DEFAULT_TOWER.update(qwen3_vl="qwen3_vl_vision", qwen3_vl_moe="qwen3_vl_moe_vision")
# GLM-4V's tower (Glm4vVisionConfig and Glm4vMoeVisionConfig have the same defaults)
_GLM4V = {"depth": 24, "hidden_size": 1536, "intermediate_size": 13696, "in_channels": 3, "patch_size": 14,
          "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 4096, "image_size": 336}
_RULES["glm4v_vision"] = (frozenset({"glm4v"}), _glm4v, _GLM4V)
_RULES["glm4v_moe_vision"] = (frozenset({"glm4v_moe"}), _glm4v, _GLM4V)
_DEFAULT_TOWER.update(glm4v="glm4v_vision", glm4v_moe="glm4v_moe_vision")
_RENAMED |= {"qwen3_vl", "qwen3_vl_moe"}


def tower_kind(vision: Mapping[str, Any], model_type: str | None) -> str:
    """The tower model_type transformers builds for this vision_config inside a `model_type` wrapper."""
    kind = vision.get("model_type")
    if not kind or not isinstance(kind, str):
        return _DEFAULT_TOWER.get(model_type or "", "")
    return f"{kind}_vision" if kind == model_type and kind in _RENAMED else kind


def read_towers(data: Mapping[str, Any], model_type: str | None, text_hidden: int) -> Towers | str | None:
    """The towers of a multimodal config; a sentence naming what kvplan cannot count; None without a tower."""
    vision = data.get("vision_config")
    other = [k for k in ("audio_config", "speech_config", "vision_tower_config") if isinstance(data.get(k), Mapping)
             and data.get(k)]
    if model_type == "fuyu" and not vision and not other:
        return _fuyu(data, text_hidden)
    if model_type == "emu3" and isinstance(data.get("vq_config"), Mapping):
        # Emu3ForConditionalGeneration holds a VQ-VAE image tokenizer (encoder, codebook, decoder: 270,740,287
        # parameters at Emu3VQVAEConfig's defaults) that no rule here counts
        return "its VQ-VAE image tokenizer (vq_config) is not counted by kvplan's rule"
    if (not isinstance(vision, Mapping) or not vision) and other == ["audio_config"] and model_type in _AUDIO_RULES:
        return _audio_towers(data["audio_config"], model_type, text_hidden, data)
    if not isinstance(vision, Mapping) or not vision:
        return f"its {other[0]} tower is not counted by kvplan's rule" if other else None
    kind = tower_kind(vision, model_type)
    rule = _RULES.get(kind)
    if rule is None or model_type not in rule[0]:
        return (f"its vision tower ({kind or 'no model_type'} in {model_type}) is not counted by kvplan's rule")
    heard = other == ["audio_config"] and model_type in _AUDIO_RULES   # Phi-4-multimodal: vision and audio
    if other and not heard:
        return f"its {other[0]} tower is not counted by kvplan's rule"
    try:
        fields = _Fields(vision, rule[2])
        counts = rule[1](fields, text_hidden, data)
        tokens = _image_tokens(model_type, fields, data)
    except (ValueError, TypeError, ZeroDivisionError, OverflowError):
        return f"its vision_config ({kind}) lacks or garbles a size kvplan's rule needs"
    towers = Towers(kind, *counts, *tokens)
    if not heard:
        return towers
    audio = _audio_towers(data["audio_config"], model_type, text_hidden, data)
    if isinstance(audio, str):
        return audio
    return Towers(kind, towers.vision, towers.projector + audio.projector, *tokens, audio=audio.audio)


def _fuyu(data: Mapping[str, Any], text_hidden: int) -> Towers | str:
    """Fuyu (modeling_fuyu.py FuyuModel): no vision tower, only vision_embed_tokens, a biased Linear [text hidden,
    patch_size^2 x num_channels] over raw patches. Defaults: 30 x 30 x 3 = 2,700 -> 4,096: 11,063,296."""
    try:
        fields = _Fields(data, {"patch_size": 30, "num_channels": 3})
        return Towers("fuyu_patches", 0, _lin(fields["patch_size"] ** 2 * fields["num_channels"], text_hidden, True))
    except ValueError:
        return "its patch_size / num_channels lack or garble a size kvplan's rule needs"


def _audio_towers(audio: Mapping[str, Any], model_type: str, text_hidden: int,
                  top: Mapping[str, Any]) -> Towers | str:
    rule, defaults, aliases = _AUDIO_RULES[model_type]
    named = {aliases.get(k, k): value for k, value in audio.items()}
    try:
        tower, projector = rule(_Fields(named, defaults), text_hidden, top)
    except (ValueError, TypeError, ZeroDivisionError, OverflowError):
        return f"its audio_config ({model_type}) lacks or garbles a size kvplan's rule needs"
    return Towers(f"{model_type}_audio", 0, projector, audio=tower)


def _image_tokens(model_type: str | None, v: _Fields, top: Mapping[str, Any]) -> tuple[int, int]:
    """(embeddings, placeholder span) of the largest image, as vLLM's processors build them.

    Gemma 3: mm_tokens_per_image (256) soft tokens inside "\n\n<start_of_image>" ... "<end_of_image>\n\n",
    4 tokens more (vllm 0.11 gemma3_mm.py `_get_prompt_updates`; the 0.11 log of gemma-3-27b-it profiles
    8192 // 260 = 31 images). Mistral 3: a 1540 px image is 110 x 110 patches of 14, merged 2 x 2 into 55 x 55
    = 3,025 embeddings, each row closed by [IMG_BREAK] or [IMG_END]: 3,080 tokens (pixtral.py)."""
    if model_type == "gemma3":
        n = int(top.get("mm_tokens_per_image", 256))
        return n, n + 4
    if model_type == "mistral3":
        side = v["image_size"] // v["patch_size"] // int(top.get("spatial_merge_size", 2))
        return side * side, side * side + side
    return 0, 0


def vit_size(data: Mapping[str, Any]) -> tuple[str, int, int] | None:
    """(architecture, layers, hidden) of the vision tower as SGLang reads them to shrink its memory fraction
    (`getattr(vision_config, "num_hidden_layers", 24)`, `hidden_size` 1024; the transformers config object answers
    `depth` for Qwen's num_hidden_layers and its class defaults for absent fields). None without a vision_config."""
    vision = data.get("vision_config")
    archs = data.get("architectures")
    if not isinstance(vision, Mapping) or not vision or not isinstance(archs, list) or not archs:
        return None
    wrapper = data.get("model_type") if isinstance(data.get("model_type"), str) else None
    defaults = _RULES.get(tower_kind(vision, wrapper), (None, None, {}))[2]
    layers = vision.get("num_hidden_layers", vision.get("depth", defaults.get("num_hidden_layers",
                                                                              defaults.get("depth", 24))))
    hidden = vision.get("hidden_size", defaults.get("hidden_size", 1024))
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**20 for v in (layers, hidden)):
        return None
    name = archs[0] if isinstance(archs[0], str) and len(archs[0]) <= 100 else shown(archs[0])
    return name, layers, hidden
