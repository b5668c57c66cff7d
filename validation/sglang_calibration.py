"""kvplan's SGLang profile against published SGLang start-ups (validation/sglang_calibration.csv).

Each row comes from a public log (its source and the quoted lines are in the CSV). Per row, as far as the log
allows:

1. cell: "KV Cache is allocated. #tokens: N, K size: X GB, V size: Y GB" against N x kvplan's bytes per token
   (the cell of kvplan's SGLang plan for the row's release: KV heads per rank, SGLang's MLA / DSA layouts);
2. weights: "Load weight end ... mem usage=X GB" against kvplan's parameters + RoPE tables + load extras;
3. before loading: the card's memory minus the free memory SGLang starts from ("Load weight begin. avail mem",
   or avail mem after loading + mem usage), the context kvplan takes as PRELOAD_BYTES;
4. tokens: "max_total_num_tokens" against kvplan's plan, where the GPU and mem_fraction_static are known (or the
   row ran SGLang's default fraction): predicted from the card;
5. printed: the same tokens from the free memory the log printed after loading, rest = after - (after + usage) x
   (1 - fraction), divided by kvplan's cell and page: arithmetic from the printed figure, no constant involved
   (a hybrid's Mamba state pool for the printed slots taken out of the rest first);
6. state: a hybrid's "Mamba Cache is allocated. max_mamba_cache_size: K, conv_state size: X GB, ssm_state size: Y GB"
   against (K + 1) x kvplan's state bytes per request (the pool's padding slot: 0.5.10 and 0.5.23
   mem_cache/memory_pool.py MambaPool allocates size + 1);
7. split: a hybrid's state slots from the printed pools alone: kvplan's ratio split (`mamba_split`) of rest = conv +
   ssm + K + V against the printed max_mamba_cache_size (rows whose state pool SGLang sized otherwise excepted).

Each row is planned with the SGLang release it printed (0.5.19, "0.5.8.post1" as 0.5.8); a row that printed none is
planned with kvplan's default, 0.5.23 (its mem_fraction_static is given, so the release's reserve does not enter;
the B200 row runs SGLang's default fraction, 0.854 for a 178 GiB card in every release from 0.5.10 to 0.5.23, and its
2026-04 build is one of them).

The two SGLang constants (PRELOAD_BYTES, LOAD_EXTRA_BYTES in kvplan/planning/engines/sglang_pool.py) were read off these
rows, so checks 2-4 are a calibration, not a hold-out, on those rows; checks 1 and 5 involve no constant. The rows
added after the constants were set (Qwen3-32B, GLM-5, Qwen3-4B, Qwen3-Reranker-0.6B, Qwen3-8B on a B200) are the
hold-out; the report's SGLang >= 0.5 table lists the tokens predicted from the card for every such row.

    python validation/sglang_calibration.py      # writes validation/sglang_calibration.md
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kvplan.config.load import load_model  # noqa: E402
from kvplan.gpus import resolve_gpu  # noqa: E402
from kvplan.planning.engines.sglang_layers import state_bytes_per_request  # noqa: E402
from kvplan.planning.engines.sglang_pool import (LOAD_EXTRA_BYTES, PRELOAD_BYTES, V0523,  # noqa: E402
                                                 SglangSettings, mamba_split)
from kvplan.planning.engines.sglang_rules import MAMBA_POOL_ARCHS  # noqa: E402
from kvplan.planning.planner import plan  # noqa: E402
from kvplan.sources.library import library_dir  # noqa: E402
from validation.vllm_calibration import _err, _num  # noqa: E402
from validation.vllm_holdout import write_results  # noqa: E402

GiB = 2**30
DEFAULT_CSV = HERE / "sglang_calibration.csv"

# Measured model id -> (bundled config, online quantization, why)
MODELS = {
    "meta-llama/Meta-Llama-3.1-8B-Instruct": ("meta-llama/Llama-3.1-8B", None, "base config, same architecture"),
    "meta-llama/Llama-3.1-8B-Instruct": ("meta-llama/Llama-3.1-8B", None, "base config, same architecture"),
    "Qwen/Qwen2.5-7B-Instruct": ("Qwen/Qwen2.5-7B", None, "base config, same architecture"),
    "Qwen/QwQ-32B": ("Qwen/Qwen2.5-32B", None, "a Qwen2.5-32B fine-tune (Qwen2ForCausalLM; its 40,960 positions "
                                                 "make the RoPE table 22 MiB smaller)"),
    "Qwen/Qwen3-0.6B": ("Qwen/Qwen3-0.6B", None, ""),
    "Qwen/Qwen3-14B": ("Qwen/Qwen3-14B", None, ""),
    "Qwen/Qwen3-235B-A22B-FP8": ("Qwen/Qwen3-235B-A22B", "fp8", "base config with --quantization fp8"),
    "openai/gpt-oss-20b": ("openai/gpt-oss-20b", None, ""),
    "Qwen3-30B-A3B": ("Qwen/Qwen3-30B-A3B", None, "experts on the CPU (ktransformers): cell check only"),
    "Qwen/Qwen3-32B": ("Qwen/Qwen3-32B", None, ""),
    "zai-org/GLM-5-FP8": ("zai-org/GLM-5", "fp8", "base config with --quantization fp8 (the FP8 checkpoint's "
                                                  "quantization_config is not bundled)"),
    "Qwen/Qwen3-8B": ("Qwen/Qwen3-8B", None, ""),
    "Qwen/Qwen3-Reranker-0.6B": ("Qwen/Qwen3-0.6B", None, "a Qwen3-0.6B fine-tune SGLang serves as Qwen3ForCausalLM "
                                                         "(its /get_model_info in the source)"),
    "Qwen/Qwen3-4B": ("Qwen/Qwen3-8B", None, "Qwen3-8B's config with Qwen3-4B's sizes (OVERRIDES)"),
    "google/gemma-4-E4B-it": ("google/gemma-4-E4B-it", None, ""),
    "google/gemma-4-26B-A4B-it": ("google/gemma-4-26B-A4B", None, "base config, same architecture"),
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", None, ""),
    "nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-NVFP4": ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", None,
                                                            "the Omni's NemotronH language model has the Nano's "
                                                            "layers; its NVFP4 weights and towers are not bundled: "
                                                            "cell, state and split checks only"),
}
# Models kvplan does not bundle, built from a bundled config of the same architecture with the sizes changed. Qwen3-4B:
# hidden 2,560, 9,728 MLP, 36 layers, 32 heads, 8 KV heads of 128, vocabulary 151,936, tied embeddings, 40,960
# positions, theta 1e6, as four independent public copies of its config print them (find_string '"intermediate_size":
# 9728,': ids 8949466823, 70988719928, 56488023338, 58396142721); its KV cell, 36 x 2 x 8 x 128 x 2 B = 147,456 B,
# is what the log's 29.53 GB per K and V over 430,067 tokens gives.
OVERRIDES = {"Qwen/Qwen3-4B": {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
                               "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                               "max_position_embeddings": 40960, "tie_word_embeddings": True, "max_window_layers": 36}}
# GPU names as the logs wrote them -> kvplan's catalogue; rows whose GPU was not printed stay unknown, except
# SGLang's own docs run, which started from 78.81 GiB free: an 80 GB card, taken as an H100 (an A100 would
# be 0.06 GiB larger).
GPUS = {"NVIDIA L4": "L4", "NVIDIA GeForce RTX 4090": "RTX-4090", "H100": "H100",
        "NVIDIA H100 80GB (GKE a3-highgpu-1g)": "H100", "NVIDIA H100 80GB HBM3": "H100"}
# The GLM-5 run names its image (rocm/sgl-dev ...-mi35x-...), not its card: an MI35x, whose MI350X and MI355X both
# carry 288 GB; kvplan's catalogue has the MI355X (287.98 GiB).
ASSUMED_GPU = {"sgl_docs_send_request_llama31_8b_20250123": ("H100", "78.81 GiB free before loading"),
               "sgl_glm5_fp8_8xmi355x_v058post1_rocm_20260226": ("MI355X", "the image is built for MI35x cards"),
               "sgl_skill_qwen3_8b_b200_20260427": ("B200", "177.57 GiB free before loading and trtllm_mha by default, "
                                                            "an SM 10.x card of 178 GiB")}
# Rows that set no --mem-fraction-static (every setting SGLang's default): planned with the release's default fraction
DEFAULT_FRACTION = {"sgl_skill_qwen3_8b_b200_20260427"}
# Rows that printed no release but ran SGLang 0.5 or later (dated after 2026-01, when 0.5.x releases were current)
AT_LEAST_05 = {"kuiperinfer_qwen3_14b_4x4090_tp4_20260614", "lmcache_2400_qwen3_14b_20260114",
               "ktransformers_1971_qwen3_30b_a3b_rtx3090_20260502", "sgl_skill_qwen3_8b_b200_20260427"}


MISSES = {
    "vllm_21348_qwen3_235b_a22b_fp8_4xh100": "+9.5 % tokens: an FP8 checkpoint whose quantization_config kvplan "
    "does not bundle; online fp8 of every linear layer stands in, and the pool says the checkpoint keeps about "
    "1.6 GiB per GPU more (which modules it leaves in bf16 is not known here)",
    "kvcached_198_gpt_oss_20b_20251012": "-10.6 % weights: gpt-oss's MXFP4 experts on a B200 (178 GiB card) under "
    "a third-party patch; SGLang's MXFP4 layout (padding, or experts kept in 16 bits) is not modelled",
    "qwen3_0p6b_wsl_20250502": "+5.8 % weights: 0.07 GiB on a 1.2 GiB model, inside the spread of the load extras",
    "sgl_qwen3_reranker_0p6b_h100_v0518": "+7.6 % weights: 0.09 GiB on a 1.2 GiB model, the load extras (0.15 GiB, "
    "read off 7-32 B models) larger than a 0.6 B model's; the tokens stay within 0.4 % (0.72 GiB held before "
    "loading on a node with a co-tenant job, kvplan takes 0.38)",
    "sgl_glm5_fp8_8xmi355x_v058post1_rocm_20260226": "-10.2 % K + V: SGLang counts the raw fp8 latent in its cell "
    "through 0.5.16 ((512 + 64) x 1 B + 132 B of index keys = 708 B a layer, 55,224 B a token over 78 layers, which "
    "sets the 3,262,823 tokens) while the pool it allocates keeps the scaled layout (656 + 132 B a layer: 61,464 B a "
    "token, the printed 186.77 GB); +2.9 % tokens with the 4.48 GiB this ROCm run held before loading (kvplan takes "
    "0.38) and the FP8 checkpoint's layout (online fp8 stands in: -1.3 % weights)",
    "sgl_qwen3_32b_h100_v0519_gke_snapshot": "+2.1 % tokens: the run held 0.72 GiB before loading (gVisor, "
    "--enable-memory-saver; kvplan takes 0.38), 0.34 GiB x 0.9 of a 9.5 GiB pool",
}


# Rows whose build is not the release it names: the GLM-5 run's ROCm image "v0.5.8.post1" has GlmMoeDsaForCausalLM,
# which the 0.5.8 wheel lacks and 0.5.9 ships (models/glm4_moe.py), so it is planned with 0.5.9's rules (the same
# DSA cell as 0.5.8's: the raw latent counted through 0.5.16).
# Rows whose state pool SGLang sized by a branch kvplan does not plan. With --disable-radix-cache and
# --max-running-requests N, `handle_max_mamba_cache` (0.5.10 model_runner_kv_cache_mixin.py:206-213; 0.5.23
# kv_cache_configurator.py `_handle_max_mamba_cache`, "mamba_pool.from_max_running_requests") gives the pool N // attn_dp
# slots instead of the ratio split (explicit --max-mamba-cache-size is a third branch); kvplan
# takes no max_num_seqs for SGLang (it refuses it: planning/inputs.py), so it plans only the default ratio branch.
# Checks 5 and 6 take the printed slot count, which is what the log's branch gave.
STATE_BRANCH = {"sgl_nemotron3_nano_30b_xpu_tp4_radix_off": "radix cache off with --max-running-requests 8: "
                "SGLang's from_max_running_requests branch (8 state slots), not the ratio split kvplan plans"}


# The Nemotron-3-Nano XPU run printed no release; its traceback lines are 0.5.10's (mem_cache/mamba_radix_cache.py:438
# the page-size assertion, layers/attention/mamba/mamba.py:507 causal_conv1d_fn_triton, where 0.5.9 has 386 / 507 and
# 0.5.11 433 / 523) and its server_args.py:2531 XPU page line is past 0.5.10's 2443: a checkout between 0.5.10 and
# 0.5.11, planned with 0.5.10's rules (the budget takes K state slots, the pool allocates K + 1).
RELEASE_FOR = {"sgl_glm5_fp8_8xmi355x_v058post1_rocm_20260226": ("0.5.9", "a 0.5.8.post1 image with 0.5.9's GLM-5"),
               "sgl_nemotron3_nano_30b_xpu_tp4_radix_off": ("0.5.10", "a source checkout between 0.5.10 and 0.5.11")}


def _release(row: dict) -> str | None:
    """The 0.x.y release a row printed ("0.5.19 (image ...)" is 0.5.19), or None."""
    if row["run_id"] in RELEASE_FOR:
        return RELEASE_FOR[row["run_id"]][0]
    found = re.match(r"\s*v?(0\.\d+\.\d+)", row["sglang_version"] or "")
    return found.group(1) if found else None


def _model_key(model: str) -> str | None:
    for key in MODELS:
        if model == key or model.startswith(key + " ") or model.startswith(key + "("):
            return key
    return None


def _load(key: str, name: str):
    if key not in OVERRIDES:
        return load_model(name)
    data = json.loads((library_dir() / (name.replace("/", "__", 1) + ".json")).read_text())
    layers = OVERRIDES[key]["num_hidden_layers"]
    return load_model({**data, **OVERRIDES[key], "layer_types": ["full_attention"] * layers}, name=key)


def at_least_05(row: dict) -> bool:
    """Whether the row ran SGLang 0.5 or later: the release it printed, or its date (AT_LEAST_05)."""
    release = _release(row)
    return row["run_id"] in AT_LEAST_05 or (release is not None and tuple(map(int, release.split("."))) >= (0, 5))


def check_row(row: dict) -> dict:
    out = {"run_id": row["run_id"], "model": row["model"], "gpu": row["gpu"] or "", "reason": "",
           "tp": row["tp_size"]}
    key = _model_key(row["model"])
    if key is None:
        return {**out, "reason": "no bundled config"}
    name, quant, why = MODELS[key]
    out["config"] = name + (f" ({why})" if why else "")
    model = _load(key, name)
    tp = int(row["tp_size"] or 1)
    assumed = ASSUMED_GPU.get(row["run_id"])
    gpu_name = GPUS.get(row["gpu"]) or (assumed[0] if assumed else None)
    gpu = resolve_gpu(gpu_name) if gpu_name else None
    fraction = _num(row["mem_fraction_static"])
    if gpu is None:
        out["reason"] = "GPU memory not known: no pool check"
    elif not row["tp_size"]:
        out["reason"] = "TP not printed (1 taken)"
    release = _release(row)
    p = plan(model, engine="sglang", gpu=gpu or "H100", tp=tp, quantization=quant, engine_version=release,
             kv_dtype="fp8" if row["kv_cache_dtype"].startswith("fp8") else "auto",
             gpu_memory_utilization=fraction, max_model_len=int(_num(row["context_length"]) or 8192))
    tokens = _num(row["kv_tokens"]) or _num(row["max_total_num_tokens"])
    printed_kv = (_num(row["k_size_gb"]) or 0) + (_num(row["v_size_gb"]) or 0) or _num(row["kv_size_gb"])
    split = re.search(r"swa size: (\d+), full size: (\d+)", row["notes"])
    if tokens and printed_kv and split:   # SWAKVPool: the full pool's tokens x full layers + the SWA pool's x SWA
        swa, full = map(int, split.groups())
        swa_cell = sum(x.bytes_per_token for x in p.kv_layers if x.kind == "sliding")
        out["cell"] = (printed_kv, (full * (p.kv_bytes_per_token - swa_cell) + swa * swa_cell) / GiB)
    elif tokens and printed_kv:
        out["cell"] = (printed_kv, tokens * p.kv_bytes_per_token / GiB)
    mamba = re.search(r"max_mamba_cache_size: (\d+),\s*conv_state size: ([\d.]+) ?GB,\s*ssm_state size: ([\d.]+) ?GB",
                      row["notes"])
    state_bytes = 0
    if mamba:   # each slot kvplan's bytes per request; the pool holds the printed K + 1 (its padding slot: 0.5.10
        # and 0.5.23 mem_cache/memory_pool.py MambaPool, size + 1), the budget takes K + 1 only from 0.5.17
        # (0.5.23 kv_cache_configurator.py _handle_max_mamba_cache; K in 0.5.10-0.5.16 handle_max_mamba_cache)
        version = tuple(map(int, release.split("."))) if release else V0523
        per_req = state_bytes_per_request(model, range(model.num_layers), tp // int(row["dp_size"] or 1), version)
        slots = int(mamba.group(1))
        state_bytes = (slots + (version >= (0, 5, 17))) * per_req
        out["state"] = (float(mamba.group(2)) + float(mamba.group(3)), (slots + 1) * per_req / GiB)
        if printed_kv and row["run_id"] not in STATE_BRANCH:
            # the ratio split from the printed pools' sum alone: rest = conv + ssm + K + V, K slots from it
            rest_printed = int((float(mamba.group(2)) + float(mamba.group(3)) + printed_kv) * GiB)
            mixer = MAMBA_POOL_ARCHS.get(model.architecture, "mamba2")
            split = mamba_split(rest_printed, per_req, int(row["dp_size"] or 1), mixer, SglangSettings(version=version))
            out["split"] = (float(slots), float(split[0]))
    usage, after = _num(row["weights_mem_usage_gb"]), _num(row["avail_mem_after_weights_gb"])
    if usage and "ktransformers" not in row["run_id"]:
        out["weights"] = (usage, (p.weights_bytes + LOAD_EXTRA_BYTES) / GiB)
    if gpu is not None and after is not None and usage:
        out["preload"] = (gpu.memory_bytes / GiB - after - usage, PRELOAD_BYTES / GiB)
    printed_tokens = _num(row["max_total_num_tokens"]) or _num(row["kv_tokens"])
    capped = "max_total_tokens" in row["notes"] and "20480" in row["notes"]
    known_fraction = fraction or row["run_id"] in DEFAULT_FRACTION
    if gpu is not None and known_fraction and printed_tokens and not capped:
        out["tokens"] = (printed_tokens, float(p.kv_cache_tokens))
    if printed_tokens and after is not None and usage and fraction and not capped:
        # the same division from the free memory the log printed: rest = after - (after + usage) x (1 - fraction),
        # where the row printed its fraction (a default one would be kvplan's rule, not the log's figure)
        rest = (after - (after + usage) * (1 - p.gpu_memory_utilization)) * GiB - state_bytes
        page = int(row["page_size"] or p.block_size)   # the page the log ran (Intel XPU's backend forces 64)
        out["printed"] = (printed_tokens, float(int(rest // p.kv_bytes_per_token) // page * page))
    if row["run_id"] in STATE_BRANCH:
        out["reason"] = "; ".join(filter(None, [out["reason"], STATE_BRANCH[row["run_id"]]]))
    if assumed:
        out["reason"] = f"GPU not printed: {gpu_name} assumed ({assumed[1]})"
    if release is None or row["run_id"] in RELEASE_FOR:
        why = RELEASE_FOR[row["run_id"]][1] if row["run_id"] in RELEASE_FOR else "release not printed"
        out["reason"] = "; ".join(filter(None, [out["reason"], f"{why}: {release or '0.5.23'}'s rules"]))
    return out


def _holdout(table: list[dict], results: list[dict]) -> list[str]:
    """The SGLang >= 0.5 rows whose max_total_num_tokens kvplan predicts from the card, one line each."""
    lines = ["SGLang >= 0.5, max_total_num_tokens predicted from the card (release printed, or dated 2026):", "",
             "| run | release | GPU | printed | from the card | error |", "|---|---|---|---|---|---|"]
    errors = []
    for row, r in zip(table, results):
        if not (at_least_05(row) and r.get("tokens")):
            continue
        printed, predicted = r["tokens"]
        errors.append(_err(predicted, printed))
        gpu = GPUS.get(row["gpu"]) or ASSUMED_GPU[row["run_id"]][0]
        shown = re.match(r"\s*v?(0\.\d+\.\d+(?:\.post\d+)?)", row["sglang_version"] or "")
        release = shown.group(1) if shown else "not printed"
        if row["run_id"] in RELEASE_FOR:
            release += f" ({RELEASE_FOR[row['run_id']][0]}'s rules)"
        lines.append(f"| {row['run_id']} | {release} | {gpu} | {printed:,.0f} | "
                     f"{predicted:,.0f} | {errors[-1]:+.2f} % |")
    absolute = [abs(e) for e in errors]
    lines += ["", f"{len(errors)} rows: median abs error {statistics.median(absolute):.2f} %, max "
                  f"{max(absolute):.2f} %."]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    table = list(csv.DictReader(args.csv.open()))
    results = [check_row(row) for row in table]
    checks = (("cell", "K + V GiB for the printed tokens"), ("weights", "weights GiB (mem usage)"),
              ("preload", "GiB held before loading"), ("tokens", "max_total_num_tokens from the card"),
              ("printed", "max_total_num_tokens from the printed free memory"),
              ("state", "Mamba state GiB for the printed slots"),
              ("split", "Mamba slots from the printed state + KV"))
    rows = ["| run | model | GPU | TP | " + " | ".join(f"{label}: meas / pred / err" for _, label in checks)
            + " | note |", "|" + "---|" * (5 + len(checks))]
    stats: dict[str, list[float]] = {k: [] for k, _ in checks}
    for r in results:
        cells = []
        for key, _ in checks:
            pair = r.get(key)
            if pair is None:
                cells.append("-")
                continue
            if key == "preload":
                cells.append(f"{pair[0]:.2f} / {pair[1]:.2f} / {pair[1] - pair[0]:+.2f} GiB")
                stats[key].append(abs(pair[1] - pair[0]))
                continue
            err = _err(pair[1], pair[0])
            stats[key].append(abs(err))
            fmt = (lambda v: f"{v:,.0f}") if key in ("tokens", "printed", "split") else (lambda v: f"{v:.2f}")
            cells.append(f"{fmt(pair[0])} / {fmt(pair[1])} / {err:+.2f} %")
        rows.append(f"| {r['run_id']} | {r['model'][:40]} | {r['gpu'][:24]} | {r.get('tp', '')} | "
                    + " | ".join(cells) + f" | {r['reason']} |")
    summary = ["| check | rows | median abs error | max abs error |", "|---|---|---|---|"]
    for key, label in checks:
        e = stats[key]
        if e:
            unit = " GiB" if key == "preload" else " %"
            summary.append(f"| {label} | {len(e)} | {statistics.median(e):.2f}{unit} | {max(e):.2f}{unit} |")
    holdout = _holdout(table, results)
    misses = [f"- `{run_id}`: {why}" for run_id, why in MISSES.items() if run_id in {r["run_id"] for r in results}]
    configs = sorted({f"- `{r['model']}` -> `{r['config']}`" for r in results if r.get("config")})
    text = "\n".join([
        "# kvplan's SGLang profile against published SGLang start-ups", "",
        f"Source: `{args.csv.name}` ({len(results)} rows; sources and quoted log lines in the CSV). Generated by "
        "`python validation/sglang_calibration.py`. SGLang prints GiB as \"GB\", two decimals. The constants "
        f"PRELOAD_BYTES ({PRELOAD_BYTES / GiB:.2f} GiB) and LOAD_EXTRA_BYTES ({LOAD_EXTRA_BYTES / GiB:.2f} GiB) "
        "were read off the first 11 rows: only the cell check is independent of them there (the Qwen3-32B, "
        "GLM-5, Qwen3-4B, Qwen3-Reranker and Qwen3-8B-on-B200 rows came after). Each row is planned with the SGLang release it printed (0.5.23's rules where "
        "none).", "",
        "\"From the card\" plans the whole start-up from the GPU's memory, the flags and the config (the validation: "
        "every constant and rule enters); \"from the printed free memory\" starts from the free memory the log printed "
        "after loading (SGLang's own rest = after - (after + usage) x (1 - fraction)) and checks only the division "
        "by kvplan's cell and page (arithmetic).", "",
        *summary, "", *holdout, "", "Rows kvplan does not explain:", "", *misses, "", "Configs used:", "", *configs, "", *rows, ""])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sglang_calibration.md").write_text(text)
    write_results(args.out / "sglang_calibration_results.csv", results, [key for key, _ in checks])
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
