"""Write model_configs/checkpoints/: what kvplan knows of each bundled model's checkpoint, from stored data only.

kvplan had no Hugging Face access when these were made. `tools/checkpoint_sources/<org>__<name>/` holds what
public repositories kept of a checkpoint (its `model.safetensors.index.json`, Git LFS pointer sizes, a quoted
hf-mem total), each with a SOURCE.txt; no full safetensors header of a bundled model was found. So a record
holds the checkpoint's total bytes and tensor count, not a per-tensor table: the planner keeps the config rule for
per-GPU shares and every face shows the checkpoint's total beside it. README.md lists every bundled model and what
was (not) found for it.

    python tools/gen_checkpoint_records.py
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvplan.config.load import load_model
from kvplan.sources.library import bundled_ids  # noqa: E402
from kvplan.sources.safetensors import component_of  # noqa: E402
from kvplan.weights.rule import stored_bytes_by_rule  # noqa: E402

SOURCES = ROOT / "tools" / "checkpoint_sources"
OUT = ROOT / "model_configs" / "checkpoints"

# bundled id -> (source folder, kind, what the number is, why it may differ from the config rule)
RECORDS = {
    "openai/gpt-oss-20b": ("openai__gpt-oss-20b", "index", "the index's metadata.total_size",
                           "the checkpoint stores the experts' biases in bf16 (24 layers x 32 experts x 8,640 = "
                           "6,635,520 values); transformers' Mxfp4GptOssExperts and kvplan's rule keep them in "
                           "float32: +13,271,040 B resident"),
    "mistralai/Mistral-7B-Instruct-v0.3": ("mistralai__Mistral-7B-Instruct-v0.3", "index",
                                           "the index's metadata.total_size", ""),
    "google/gemma-2b": ("google__gemma-2b-it", "index", "the index's metadata.total_size of google/gemma-2b-it, "
                        "whose config.json is identical to this one (same tensors)", ""),
    "meta-llama/Llama-3.2-3B": ("meta-llama__Llama-3.2-3B-Instruct", "index", "the index's metadata.total_size of "
                                "meta-llama/Llama-3.2-3B-Instruct, the same architecture", ""),
    "deepseek-ai/DeepSeek-R1": ("deepseek-ai__DeepSeek-R1", "file_sizes", "the sum of the 163 shards' Git LFS "
                                "sizes: tensor bytes plus each file's header (a few hundred KB)",
                                "the checkpoint also holds the MTP layer (model.layers.61: its block, eh_proj and "
                                "repeated embeddings and head), which vLLM and transformers do not load without "
                                "speculative decoding"),
    "moonshotai/Kimi-K2-Instruct": ("moonshotai__Kimi-K2-Instruct", "tensor_table", "the sum of a published "
                                    "per-tensor table of the checkpoint (139,644 tensors in 61 files; its "
                                    "parameter count 1,026,470,731,056 and 958.49 GiB reproduced exactly)",
                                    "the checkpoint stores each MoE layer's router weight [384, 7,168] in bf16, "
                                    "where transformers keeps it in float32 (_keep_in_fp32_modules_strict) and "
                                    "kvplan's rule with it: 60 x 384 x 7,168 x 2 B = +330,301,440 B; the "
                                    "checkpoint also stores 61 bf16 rotary_emb.inv_freq tensors [56] (6,832 B) that "
                                    "transformers and vLLM recompute, not load"),
    "moonshotai/Kimi-K2.5": ("moonshotai__Kimi-K2.5", "tensor_table", "the sum of a published per-tensor table of "
                             "the checkpoint (208,550 tensors in 64 files; its parameter count 170,738,182,128 and "
                             "554.27 GiB reproduced exactly)",
                             "the rule leaves out the MoonViT tower and projector (942,287,840 B in the table), which "
                             "only remote code builds; it keeps each MoE layer's router weight in float32 as "
                             "transformers does (+330,301,440 B over the checkpoint's bf16) and prices each "
                             "weight_shape as int64 [2], as vLLM 0.27 registers it for a packed Linear "
                             "(compressed_tensors_wNa16.py), where the checkpoint stores int32 [2]: +8 B x 69,120 "
                             "= +552,960 B"),
    "Qwen/Qwen3-14B": ("Qwen__Qwen3-14B", "tensor_table", "the sum of a published per-tensor table of the checkpoint "
                       "(443 bf16 tensors in 8 files; its parameter count 14,768,307,200 reproduced exactly)", ""),
    "Qwen/Qwen3-32B": ("Qwen__Qwen3-32B", "tensor_table", "the sum of a published per-tensor table of the checkpoint "
                       "(707 bf16 tensors in 17 files; its parameter count 32,762,123,264 reproduced exactly)", ""),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": ("Qwen__Qwen3-Next-80B-A3B-Instruct", "tensor_table", "the sum of a "
                                         "published per-tensor table of the checkpoint (75,944 bf16 tensors in 41 "
                                         "files; its parameter count 81,324,862,720 reproduced exactly)",
                                         "the checkpoint also holds the MTP layer (mtp.*: 3,300,942,848 B), which "
                                         "vLLM loads only with speculative decoding (qwen3_next_mtp)"),
    "MiniMaxAI/MiniMax-M2": ("MiniMaxAI__MiniMax-M2", "quoted", "hf-mem's sum of the safetensors headers, as its "
                             "README quotes it (230,121,630,720 B)",
                             "exactly what the checkpoint storing each layer's router weight [256, 3,072] and its "
                             "256 e_score_correction_bias values in float32 gives: 2 B more for each of those 786,688 "
                             "values x 62 layers = 97,549,312 B; kvplan's rule prices them in the model dtype, as "
                             "transformers 5.24's MiniMaxM2 builds them (nn.Linear, nn.Buffer), where vLLM 0.19 keeps "
                             "them in float32 (minimax_m2.py: params_dtype=torch.float32), so a vLLM plan by rule is "
                             "93 MiB low; from the headers it is exact"),
}
QUOTED_TOTALS = {"MiniMaxAI/MiniMax-M2": 230_121_630_720}
# a published per-tensor table (name, tensor count, shape, safetensors dtype): bytes per element of each dtype
TABLE_DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "I64": 8, "F8_E4M3": 1, "U8": 1}


def _first_line(folder: Path) -> str:
    return (folder / "SOURCE.txt").read_text().strip().splitlines()[0][:300]


def record(model_id: str) -> dict:
    folder_name, kind, what, why = RECORDS[model_id]
    folder = SOURCES / folder_name
    out = {"kind": kind, "what": what, "source": _first_line(folder), "explained": why}
    if kind == "index":
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        names = index["weight_map"]
        counts: dict[str, int] = {}
        for name in names:
            component = component_of(name, 0)[0]
            counts[component] = counts.get(component, 0) + 1
        out.update(total_bytes=int(index["metadata"]["total_size"]), tensors=len(names),
                   files=len(set(names.values())), tensors_by_component=counts)
    elif kind == "file_sizes":
        sizes = [int(line.split()[1]) for line in (folder / "lfs_pointer_sizes.txt").read_text().splitlines()
                 if line.strip() and line.split()[0].endswith(".safetensors")]
        out.update(total_bytes=sum(sizes), files=len(sizes))
    elif kind == "tensor_table":
        table = json.loads((folder / "tensor_table.json").read_text())
        rows = table["rows"]
        total = sum(count * math.prod(shape) * TABLE_DTYPE_BYTES[dtype] for _, count, shape, dtype in rows)
        out.update(total_bytes=total, tensors=sum(count for _, count, _, _ in rows),
                   files=table["report_totals"]["files"])
    else:
        out.update(total_bytes=QUOTED_TOTALS[model_id])
    return out


def main() -> int:
    OUT.mkdir(exist_ok=True)
    rows = ["| model | checkpoint data | checkpoint bytes | config rule (stored) | difference |", "|---|---|---|---|---|"]
    for model_id in bundled_ids():
        path = OUT / (model_id.replace("/", "__", 1) + ".json")
        if model_id not in RECORDS:
            rows.append(f"| {model_id} | none found in stored public material | - | - | - |")
            continue
        data = record(model_id)
        path.write_text(json.dumps(data, indent=1) + "\n")
        model = load_model(model_id)
        rule = stored_bytes_by_rule(model.require_arch())
        diff = rule - data["total_bytes"]
        rows.append(f"| {model_id} | {data['what']} | {data['total_bytes']:,} | {rule:,} | {diff:+,} "
                    f"({100 * diff / data['total_bytes']:+.3f} %){'; ' + data['explained'] if data['explained'] else ''} |")
    text = "\n".join([
        "# Checkpoint records of the bundled models", "",
        "Generated by `python tools/gen_checkpoint_records.py` from `tools/checkpoint_sources/` (each folder's "
        "SOURCE.txt names the public repository and commit). No Hugging Face access was available, and no full "
        "safetensors header of a bundled model was found, so a record holds the checkpoint's total bytes, not "
        "its tensors: plans of bundled models keep the config rule for each GPU's share and show this total "
        "beside it. Pass a downloaded checkpoint folder, or a Hub id online, for the per-tensor headers.", "",
        "`config rule (stored)` is what kvplan's rule says the checkpoint stores: the resident weights plus "
        "the MTP layers the engines skip.", "", *rows, ""])
    (OUT / "README.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
