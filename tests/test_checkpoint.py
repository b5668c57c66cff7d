"""Weights from the checkpoint itself: safetensors headers read from a folder and from a Hub on 127.0.0.1.

The checkpoints are real: written by transformers' `save_pretrained` (several shards and an index) or by the
`safetensors` package (a GPTQ layout: int32 qweight / qzeros, fp16 scales, int32 g_idx). The truth is the sum of
every tensor's bytes as `safetensors.safe_open` reads them back; kvplan reads only the headers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from test_hub import MAIN, FakeRepo, fake_hub, go_offline, hub_env  # noqa: E402,F401

import kvplan  # noqa: E402
from kvplan.cli import main  # noqa: E402
from kvplan.errors import ConfigError, ModelNotAvailableError  # noqa: E402
from kvplan.sources.safetensors import component_of  # noqa: E402

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 160,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
        # inputs: a tiny Llama config
        "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def stored_bytes(folder: Path) -> int:
    """What the checkpoint holds, read back tensor by tensor: the truth kvplan's header sum must equal."""
    total = 0
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                total += t.numel() * t.element_size()
    return total


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """A 4-layer Llama saved by transformers in 100 KB shards: 5 files and an index."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    config = transformers.LlamaConfig(**{k: v for k, v in TINY.items() if k not in ("architectures", "model_type")})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder, max_shard_size="100KB")
    return folder


def llama_tensors(config: dict, dtype, projection) -> dict[str, torch.Tensor]:
    """A Llama checkpoint's tensors: embeddings, norms and lm_head in `dtype`, and each projection of
    [rows = out, cols = in] as `projection(prefix, rows, cols)` stores it."""
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = config["num_key_value_heads"] * (h // config["num_attention_heads"])
    shapes = {"self_attn.q_proj": (h, h), "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h),
              "self_attn.o_proj": (h, h), "mlp.gate_proj": (inter, h), "mlp.up_proj": (inter, h),
              "mlp.down_proj": (h, inter)}
    out = {"model.embed_tokens.weight": torch.zeros(vocab, h, dtype=dtype), "model.norm.weight": torch.ones(h, dtype=dtype),
           "lm_head.weight": torch.zeros(vocab, h, dtype=dtype)}
    for i in range(config["num_hidden_layers"]):
        for norm in ("input_layernorm", "post_attention_layernorm"):
            out[f"model.layers.{i}.{norm}.weight"] = torch.ones(h, dtype=dtype)
        for name, (rows, cols) in shapes.items():
            out.update(projection(f"model.layers.{i}.{name}", rows, cols))
    return out


def gptq_tensors(config: dict, bits: int = 4, group: int = 32) -> dict[str, torch.Tensor]:
    """A GPTQ checkpoint's tensors as AutoGPTQ / transformers write them: every projection as qweight
    [in x bits / 32, out] int32, qzeros [groups, out x bits / 32] int32, scales [groups, out] fp16, g_idx [in] int32."""
    def packed(p, rows, cols):
        groups = cols // group
        return {p + ".qweight": torch.zeros(cols * bits // 32, rows, dtype=torch.int32),
                p + ".qzeros": torch.zeros(groups, rows * bits // 32, dtype=torch.int32),
                p + ".scales": torch.zeros(groups, rows, dtype=torch.float16),
                p + ".g_idx": torch.zeros(cols, dtype=torch.int32)}

    return llama_tensors(config, torch.float16, packed)


@pytest.fixture(scope="module")
def gptq_checkpoint(tmp_path_factory) -> Path:
    """A 4-bit GPTQ checkpoint in two shards with an index, as a quantized repository ships it."""
    folder = tmp_path_factory.mktemp("tiny-gptq")
    config = {**TINY, "torch_dtype": "float16", "quantization_config": {"quant_method": "gptq", "bits": 4,
                                                                          "group_size": 32, "desc_act": False}}
    tensors = gptq_tensors(config)
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, keys in shards.items():
        save_file({k: tensors[k].contiguous() for k in keys}, str(folder / file))
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
             "weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# ---------------------------------------------------------------- a local folder


def test_folder_headers_sum_to_the_stored_bytes(tiny_checkpoint):
    model = kvplan.load_model(tiny_checkpoint)
    truth = stored_bytes(tiny_checkpoint)
    assert len(list(tiny_checkpoint.glob("*.safetensors"))) >= 3  # really sharded, with an index
    assert model.checkpoint.stored_bytes == truth
    assert model.checkpoint.files == len(list(tiny_checkpoint.glob("*.safetensors")))
    # the config rule counts the same tensors: bf16, untied, 4 layers
    from kvplan.weights.rule import weights_bytes

    assert weights_bytes(model.require_arch()).total_bytes == truth
    plan = kvplan.plan(model, gpu="L4", max_model_len=2048)
    assert (plan.weights_source, plan.weights_checkpoint_bytes, plan.weights_rule_bytes) == ("checkpoint", truth, truth)
    # embeddings and head: vocab 1,000 x hidden 64 x 2 B = 128,000 each (TINY above)
    assert plan.weights_components == {"language_model": truth - 2 * 1000 * 64 * 2, "embeddings": 128_000,
                                       "lm_head": 128_000}


def test_folder_split_over_tp_and_pp(tiny_checkpoint):
    """Per GPU, the checkpoint is split as the config rule splits it: the same bytes on every stage."""
    by_checkpoint = kvplan.load_model(tiny_checkpoint)
    by_rule = kvplan.load_model(tiny_checkpoint, weights="config")
    assert by_rule.checkpoint is None
    for tp, pp in ((1, 1), (2, 1), (1, 2), (2, 2)):
        a = kvplan.plan(by_checkpoint, gpu="L4", tp=tp, pp=pp, max_model_len=2048)
        b = kvplan.plan(by_rule, gpu="L4", tp=tp, pp=pp, max_model_len=2048)
        assert [s.weights_bytes for s in a.stages] == [s.weights_bytes for s in b.stages], (tp, pp)
        assert b.weights_source == "config rule"


def test_quantized_layout_is_counted_as_stored(gptq_checkpoint):
    model = kvplan.load_model(gptq_checkpoint)
    truth = stored_bytes(gptq_checkpoint)
    assert model.checkpoint.stored_bytes == truth
    assert model.checkpoint.by_dtype().keys() == {"I32", "F16"}
    assert model.checkpoint.resident_bytes(kvplan.resolve_dtype("fp16")) == truth
    from kvplan.weights.rule import weights_bytes

    assert weights_bytes(model.require_arch()).total_bytes == truth  # the GPTQ rule matches its layout
    assert kvplan.plan(model, gpu="L4", max_model_len=2048).weights_checkpoint_bytes == truth


def test_a_float32_copy_is_served_in_the_model_dtype(tmp_path, tiny_checkpoint):
    """vLLM loads float tensors into the model dtype: a float32 checkpoint of a bf16 config is bf16 once loaded."""
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    tensors = {}
    for path in tiny_checkpoint.glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as f:
            tensors.update({k: f.get_tensor(k).float() for k in f.keys()})
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = kvplan.load_model(tmp_path)
    truth = stored_bytes(tiny_checkpoint)
    assert model.checkpoint.stored_bytes == 2 * truth
    assert kvplan.plan(model, gpu="L4", max_model_len=2048).weights_checkpoint_bytes == truth


def test_missing_shard_and_corrupt_header_are_one_line(tmp_path, tiny_checkpoint):
    shards = sorted(p.name for p in tiny_checkpoint.glob("*.safetensors"))
    for path in tiny_checkpoint.iterdir():
        if path.name != shards[1]:
            (tmp_path / path.name).write_bytes(path.read_bytes())
    partial = kvplan.load_model(tmp_path)
    assert partial.checkpoint is None and f"lacks 1 of the {len(shards)} shards" in partial.checkpoint_note
    with pytest.raises(ConfigError, match=f"lacks 1 of the {len(shards)} shards its index names") as err:
        kvplan.load_model(tmp_path, weights="checkpoint")
    assert "\n" not in str(err.value)
    (tmp_path / shards[1]).write_bytes(b"\xff" * 8 + b"{}")
    with pytest.raises(ConfigError, match="does not start like a safetensors file"):
        kvplan.load_model(tmp_path, weights="checkpoint")


def test_cli_weights_checkpoint_needs_one(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    assert main(["plan", str(tmp_path), "--gpu", "L4", "--weights", "checkpoint"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no .safetensors files" in err
    assert main(["plan", str(tmp_path), "--gpu", "L4"]) == 0
    assert "weights: config rule" in capsys.readouterr().out


@pytest.mark.parametrize(("name", "component"), [
    ("model.embed_tokens.weight", ("embeddings", -1)), ("lm_head.weight", ("lm_head", -1)),
    ("model.layers.3.mlp.down_proj.weight", ("language_model", 3)), ("model.norm.weight", ("language_model", -1)),
    ("model.layers.61.eh_proj.weight", ("mtp", -1)),                     # DeepSeek-V3: the layer past 61
    ("mtp.layers.0.mlp.experts.0.up_proj.weight", ("mtp", -1)),          # Qwen3-Next / Qwen3.5
    ("vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", ("vision", -1)),   # Gemma 3
    ("multi_modal_projector.mm_input_projection_weight", ("projector", -1)),
    ("model.visual.blocks.0.attn.qkv.weight", ("vision", -1)),          # Qwen-VL
    ("language_model.model.layers.0.self_attn.q_proj.weight", ("language_model", 0)),
])
def test_components(name, component):
    assert component_of(name, 61) == component


# ---------------------------------------------------------------- the Hub on 127.0.0.1


def serve(fake_hub, repo_id: str, folder: Path, **repo) -> None:
    """The folder's files on the FakeHub; of a large (sparse) .safetensors file only its header is held, and the
    Hub answers for the rest as zeros."""
    files, sizes = {}, {}
    for p in (p for p in folder.iterdir() if p.is_file()):
        with open(p, "rb") as f:
            if p.suffix == ".safetensors" and p.stat().st_size > 10**7:
                prefix = f.read(8)
                files[p.name] = prefix + f.read(int.from_bytes(prefix, "little"))
            else:
                files[p.name] = f.read()
        sizes[p.name] = p.stat().st_size
    fake_hub.repos[repo_id] = FakeRepo(files={MAIN: files}, refs={"main": MAIN}, sizes=sizes, **repo)


def test_hub_headers_by_range_requests(fake_hub, tiny_checkpoint):
    serve(fake_hub, "acme/tiny", tiny_checkpoint)
    model = kvplan.load_model("acme/tiny")
    assert model.checkpoint.stored_bytes == stored_bytes(tiny_checkpoint)
    assert "on the Hub" in model.checkpoint.source
    shards = [r for r in fake_hub.requests if r.path.endswith(".safetensors") and r.method == "GET"
              and not r.path.endswith("/model.safetensors")]  # the first GET asks for the single file: 404 here
    assert len(shards) == len(list(tiny_checkpoint.glob("*.safetensors"))) > 2 and all(r.headers.get("range", "").startswith("bytes=0-") for r in shards)
    plan = kvplan.plan(model, gpu="L4", max_model_len=2048)
    assert plan.weights_source == "checkpoint" and plan.weights_checkpoint_bytes == stored_bytes(tiny_checkpoint)


def test_hub_single_file_and_quantized(fake_hub, gptq_checkpoint, tmp_path):
    serve(fake_hub, "acme/gptq", gptq_checkpoint)
    assert kvplan.load_model("acme/gptq").checkpoint.stored_bytes == stored_bytes(gptq_checkpoint)
    single = tmp_path / "single"
    single.mkdir()
    tensors = gptq_tensors(json.loads((gptq_checkpoint / "config.json").read_text()))
    save_file(tensors, str(single / "model.safetensors"))
    (single / "config.json").write_bytes((gptq_checkpoint / "config.json").read_bytes())
    serve(fake_hub, "acme/gptq-one", single)
    model = kvplan.load_model("acme/gptq-one")
    assert (model.checkpoint.files, model.checkpoint.stored_bytes) == (1, stored_bytes(single))


def test_hub_without_safetensors(fake_hub, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    serve(fake_hub, "acme/bin-only", tmp_path)
    model = kvplan.load_model("acme/bin-only")
    assert model.checkpoint is None and "has no safetensors checkpoint on the Hub" in model.checkpoint_note
    with pytest.raises(ModelNotAvailableError, match="has no safetensors checkpoint") as err:
        kvplan.load_model("acme/bin-only", weights="checkpoint")
    assert "\n" not in str(err.value)


def test_hub_offline_reads_the_cached_shards_or_says_why(fake_hub, tiny_checkpoint, monkeypatch, capsys):
    serve(fake_hub, "acme/tiny", tiny_checkpoint)
    from huggingface_hub import hf_hub_download

    kvplan.load_model("acme/tiny", weights="config")  # caches config.json only
    go_offline(monkeypatch)
    model = kvplan.load_model("acme/tiny")
    assert model.checkpoint is None and "not in the Hub cache and HF_HUB_OFFLINE is set" in model.checkpoint_note
    assert main(["plan", "acme/tiny", "--gpu", "L4", "--weights", "checkpoint"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HF_HUB_OFFLINE is set" in err
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    for path in tiny_checkpoint.iterdir():  # a user's earlier download, file by file as from_pretrained fetches
        hf_hub_download("acme/tiny", path.name)
    go_offline(monkeypatch)
    cached = kvplan.load_model("acme/tiny", weights="checkpoint")
    assert cached.checkpoint.stored_bytes == stored_bytes(tiny_checkpoint)
    assert "in the Hub cache" in cached.checkpoint.source


def fp8_block_tensors(config: dict, block: int = 32) -> dict[str, torch.Tensor]:
    """An fp8 checkpoint as DeepSeek-V3 and MiniMax-M2 store theirs: every projection an F8_E4M3 weight plus an
    F32 weight_scale_inv [ceil(out / block), ceil(in / block)]; embeddings, norms and lm_head in bf16."""
    def fp8(p, rows, cols):
        return {p + ".weight": torch.zeros(rows, cols, dtype=torch.float8_e4m3fn),
                p + ".weight_scale_inv": torch.ones(-(-rows // block), -(-cols // block), dtype=torch.float32)}

    return llama_tensors(config, torch.bfloat16, fp8)


def test_fp8_block_scales_exact_by_headers_and_by_rule(fake_hub, tmp_path):
    config = {**TINY, "intermediate_size": 100,  # 100 = 3 full blocks of 32 + a partial one: ceil, not floor
              "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                      "weight_block_size": [32, 32]}}
    tensors = fp8_block_tensors(config)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    truth = stored_bytes(tmp_path)
    local = kvplan.load_model(tmp_path)
    assert local.checkpoint.stored_bytes == truth
    assert local.checkpoint.by_dtype().keys() == {"F8_E4M3", "F32", "BF16"}
    # the scales stay float32 once loaded: only the bf16 tensors follow the model dtype
    assert local.checkpoint.resident_bytes(kvplan.resolve_dtype("bf16")) == truth
    from kvplan.weights.rule import weights_bytes

    assert weights_bytes(local.require_arch()).total_bytes == truth  # kvplan's fp8 rule: the same layout
    serve(fake_hub, "acme/tiny-fp8", tmp_path)
    hub = kvplan.load_model("acme/tiny-fp8", weights="checkpoint")
    assert hub.checkpoint.stored_bytes == truth
    assert kvplan.plan(hub, gpu="L4", max_model_len=2048).weights_checkpoint_bytes == truth


def minimax_m2_headers() -> dict[str, tuple[str, list[int]]]:
    """A replica of MiniMax-M2's checkpoint layout, tensor by tensor, from its config.json alone: fp8 projections
    with float32 128 x 128 weight_scale_inv blocks, bf16 norms (q_norm / k_norm over all heads: qk_norm_type
    per_layer), embeddings and untied head, and the float32 router and e_score_correction_bias the config's
    modules_to_not_convert leaves alone. Not the published headers (no stored copy was found): its sum is
    checked against the one hf-mem read from them, 230,121,630,720 B."""
    config = json.loads(Path(kvplan.sources.library.library_dir() / "MiniMaxAI__MiniMax-M2.json").read_text())
    h, heads, kv, hd = (config[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"))
    inter, experts, vocab = config["intermediate_size"], config["num_local_experts"], config["vocab_size"]
    out = {"model.embed_tokens.weight": ("BF16", [vocab, h]), "model.norm.weight": ("BF16", [h]),
           "lm_head.weight": ("BF16", [vocab, h])}

    def fp8(name, rows, cols):
        out[name + ".weight"] = ("F8_E4M3", [rows, cols])
        out[name + ".weight_scale_inv"] = ("F32", [-(-rows // 128), -(-cols // 128)])

    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        for proj, rows, cols in (("q_proj", heads * hd, h), ("k_proj", kv * hd, h), ("v_proj", kv * hd, h),
                                 ("o_proj", h, heads * hd)):
            fp8(f"{p}.self_attn.{proj}", rows, cols)
        out[f"{p}.self_attn.q_norm.weight"] = ("BF16", [heads * hd])
        out[f"{p}.self_attn.k_norm.weight"] = ("BF16", [kv * hd])
        out[f"{p}.input_layernorm.weight"] = ("BF16", [h])
        out[f"{p}.post_attention_layernorm.weight"] = ("BF16", [h])
        out[f"{p}.block_sparse_moe.gate.weight"] = ("F32", [experts, h])
        out[f"{p}.block_sparse_moe.e_score_correction_bias"] = ("F32", [experts])
        for j in range(experts):
            for w, rows, cols in (("w1", inter, h), ("w2", h, inter), ("w3", inter, h)):
                fp8(f"{p}.block_sparse_moe.experts.{j}.{w}", rows, cols)
    return out


def write_header_only(folder: Path, tensors: dict[str, tuple[str, list[int]]], shards: int) -> int:
    """Safetensors files whose data is a hole (sparse: kvplan never reads past a header, but checks the file is as
    long as its header says), with an index."""
    from kvplan.model.checkpoint import DTYPE_BITS

    names = list(tensors)
    weight_map, total = {}, 0
    for k in range(shards):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        header, offset = {}, 0
        for name in names[k::shards]:
            dtype, shape = tensors[name]
            size = -(-math.prod(shape) * DTYPE_BITS[dtype] // 8)
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
            offset += size
            weight_map[name] = file
        raw = json.dumps(header).encode()
        with open(folder / file, "wb") as f:
            f.write(len(raw).to_bytes(8, "little") + raw)
            f.truncate(8 + len(raw) + offset)
        total += offset
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                     "weight_map": weight_map}))
    return total


def test_minimax_m2_replica_headers_sum_to_hf_mem(fake_hub, tmp_path):
    config = kvplan.sources.library.library_dir() / "MiniMaxAI__MiniMax-M2.json"
    (tmp_path / "config.json").write_bytes(config.read_bytes())
    total = write_header_only(tmp_path, minimax_m2_headers(), shards=8)
    assert total == 230_121_630_720  # the replica stores what hf-mem read from the real headers, to the byte
    local = kvplan.load_model(tmp_path, weights="checkpoint")
    assert (local.checkpoint.stored_bytes, local.checkpoint.tensors) == (total, len(minimax_m2_headers()))
    assert local.checkpoint.keeps_f32  # the float32 router stays float32 (vLLM's minimax_m2.py), as stored
    assert local.checkpoint.resident_bytes(kvplan.resolve_dtype("bf16")) == total
    serve(fake_hub, "acme/MiniMax-M2-replica", tmp_path)  # the bundled id would win over the Hub
    hub = kvplan.load_model("acme/MiniMax-M2-replica", weights="checkpoint")
    assert hub.checkpoint.stored_bytes == total
    p = kvplan.plan(hub, gpu="H200", num_gpus=4, max_model_len=8192)
    rule = kvplan.plan("MiniMaxAI/MiniMax-M2", gpu="H200", num_gpus=4, max_model_len=8192)
    assert p.weights_source == "checkpoint" and p.weights_checkpoint_bytes == total
    # per GPU, the headers carry the float32 router the rule prices in bf16: 62 x 786,688 x 2 B more, whole on every
    # rank (vLLM's GateLinear is a ReplicatedLinear; within 0.1 %: the rule rounds each tensor's share up)
    assert p.weights_bytes - rule.weights_bytes == pytest.approx(62 * 786_688 * 2, rel=1e-3)


def test_app_hub_models_carry_their_headers(fake_hub, tiny_checkpoint, monkeypatch):
    """The web app's Hub loader reads the headers with the visitor's token and never from the shared cache."""
    from app_pages import support as sup

    serve(fake_hub, "acme/tiny", tiny_checkpoint)
    model = sup.load_hub_model("acme/tiny")
    assert model.checkpoint.stored_bytes == stored_bytes(tiny_checkpoint)
    lines = sup.weights_source_lines(kvplan.plan(model, gpu="L4", max_model_len=2048))
    assert lines[0].startswith("Weights are the checkpoint's own tensors: safetensors headers of acme/tiny")
    fake_hub.repos["acme/tiny"].status = 503  # an outage: the app serves no cached headers it cannot check
    go_offline(monkeypatch)
    with pytest.raises(ModelNotAvailableError):
        sup.load_hub_model("acme/tiny")  # the config itself is refused offline first
