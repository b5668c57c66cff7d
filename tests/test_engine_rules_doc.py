"""docs/engine_rules.md, issue #22's closing note: every rule kvplan applies to a vLLM / SGLang start-up, with the
kvplan code, the engine source it was read from, the published figure that confirms it and the test that pins it.

The doc is checked against the repository, never against itself:
- every `module:name` it names imports without torch and has that attribute;
- every `tests/...::test_name` exists (the file, and `def test_name(` in it);
- every published row id (`holdout:ID#metric`, `calibration:`, `sglang:`, `cudagraph:`) is in its CSV, and an error
  written after it is the one the results CSV holds, to the hundredth;
- every engine file and function the source column cites in backticks appears in the named kvplan modules' source
  (the citation is the one beside the code);
- the count line equals the table, and the closing note lists the same confirmed and unconfirmed rules.
Below, the rules no other test pinned, each held to the source reading cited in its docstring."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.config.load import load_model
from kvplan.gpus import resolve_gpu
from kvplan.planning.engines.vllm_extras import mamba_states
from kvplan.planning.engines.vllm_runner import max_concurrent_batches
from kvplan.planning.planner import plan

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "engine_rules.md"
VALIDATION = ROOT / "validation"
UNCONFIRMED = "no published log confirms it"
COUNT = re.compile(r"^(\d+) rules: (\d+) cited, (\d+) confirmed by a published log, (\d+) not confirmed$", re.M)
CODE = re.compile(r"`(kvplan(?:\.\w+)*):([\w.]+)`")
TEST = re.compile(r"(tests/test_\w+\.py)::(test_\w+)")
ROW_REF = re.compile(r"`(holdout|calibration|sglang|cudagraph):([^`#]+)(?:#(\w+))?`(?: ([+-]?\d+\.\d+) %)?")
CITED_FILE = re.compile(r"[\w/]+\.py")
CITED_NAME = re.compile(r"^_?[A-Za-z]\w*(?:\.\w+)*\(?$")


def rows(text: str) -> list[dict]:
    """The table rows: number, rule, code, source, confirming figure, test."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit():
            assert len(cells) == 6, f"row {cells[0]} has {len(cells)} cells, not 6"
            out.append(dict(zip(("n", "rule", "code", "source", "confirm", "test"), cells)))
    return out


def cited(row: dict) -> bool:
    """A source citation: an engine file and a release named."""
    return bool(CITED_FILE.search(row["source"])) and bool(re.search(r"\b0\.\d+", row["source"]))


def confirmed(row: dict) -> bool:
    return UNCONFIRMED not in row["confirm"]


def _results() -> dict[str, dict[tuple[str, str], float]]:
    """Each published set's row ids and (id, metric) errors."""
    out: dict[str, dict] = {}
    for kind, ids, errors in (("holdout", "vllm_holdout.csv", "vllm_holdout_results.csv"),
                              ("calibration", "vllm_calibration.csv", "vllm_calibration.csv"),
                              ("sglang", "sglang_calibration.csv", "sglang_calibration_results.csv")):
        with (VALIDATION / errors).open() as f:
            table = {(r["run_id"], r["metric"]): float(r["error_pct"]) for r in csv.DictReader(f) if r["error_pct"]}
        with (VALIDATION / ids).open() as f:
            known = {r["run_id"] for r in csv.DictReader(f)}
        out[kind] = {"ids": known, "errors": table}
    with (VALIDATION / "measured" / "vllm_cudagraph_v0190.csv").open() as f:
        out["cudagraph"] = {"ids": {r["log"] for r in csv.DictReader(f)}, "errors": {}}
    return out


def _module_facts(modules: list[str]) -> dict:
    """{module: (names it has, its source text)} from a fresh interpreter, and whether it imported torch."""
    script = (
        "import importlib, inspect, json, sys\n"
        "out = {}\n"
        f"for name in {modules!r}:\n"
        "    m = importlib.import_module(name)\n"
        "    out[name] = [sorted(vars(m)), inspect.getsource(m)]\n"
        "print(json.dumps({'modules': out, 'torch': 'torch' in sys.modules}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(done.stdout)


def problems(text: str) -> list[str]:
    """What in the doc does not hold against the repository; [] when all does."""
    table = rows(text)
    found: list[str] = []
    if not table:
        return ["no table rows"]
    numbers = [int(r["n"]) for r in table]
    if numbers != list(range(1, len(table) + 1)):
        found.append(f"rows are not numbered 1-{len(table)} in order: {numbers}")
    refs = {r["n"]: CODE.findall(r["code"]) for r in table}
    modules = sorted({m for pairs in refs.values() for m, _ in pairs})
    facts = _module_facts(modules)
    if facts["torch"]:
        found.append("importing the named modules imports torch")
    published = _results()
    for r in table:
        n = r["n"]
        if not refs[n]:
            found.append(f"row {n}: no `module:name` in its code column")
        source = ""
        for module, name in refs[n]:
            names, text_of = facts["modules"][module]
            source += text_of
            head = name.split(".")[0]
            if head not in names:
                found.append(f"row {n}: {module} has no {head}")
            elif "." in name and f"def {name.split('.')[-1]}(" not in text_of:
                found.append(f"row {n}: {module}.{head} has no {name.split('.')[-1]}")
        for token in re.findall(r"`([^`]+)`", r["source"]):
            for path in CITED_FILE.findall(token):
                if Path(path).name not in source:
                    found.append(f"row {n}: {path} is not cited in the source of {', '.join(m for m, _ in refs[n])}")
            if CITED_NAME.match(token) and not token.endswith(".py"):
                word = token.rstrip("(").split(".")[0]
                if word not in source:
                    found.append(f"row {n}: {word} is not cited in the source of {', '.join(m for m, _ in refs[n])}")
        tests = TEST.findall(r["test"])
        if not tests:
            found.append(f"row {n}: no test pins it")
        for cell in ("confirm", "test"):
            for path, test in TEST.findall(r[cell]):
                file = ROOT / path
                if not file.is_file() or f"def {test}(" not in file.read_text():
                    found.append(f"row {n}: {path}::{test} does not exist")
        if confirmed(r):
            if not TEST.search(r["confirm"]):
                found.append(f"row {n}: confirmed, but no test named beside the figure")
        elif ROW_REF.search(r["confirm"].split(UNCONFIRMED)[0]):
            found.append(f"row {n}: a published row before '{UNCONFIRMED}'")
        for kind, run_id, metric, error in ROW_REF.findall(r["confirm"]):
            if run_id not in published[kind]["ids"]:
                found.append(f"row {n}: {kind} row {run_id} does not exist")
                continue
            if not metric:
                continue
            actual = published[kind]["errors"].get((run_id, metric))
            if actual is None:
                found.append(f"row {n}: {kind} row {run_id} has no {metric} error")
            elif error and round(actual, 2) != float(error):
                found.append(f"row {n}: {run_id} {metric} is {actual:+.2f} %, the doc says {error} %")
    count = COUNT.search(text)
    want = (len(table), sum(map(cited, table)), sum(map(confirmed, table)), sum(not confirmed(r) for r in table))
    if count is None or tuple(map(int, count.groups())) != want:
        found.append(f"the count line should read '{want[0]} rules: {want[1]} cited, {want[2]} confirmed by a "
                     f"published log, {want[3]} not confirmed'")
    for words, pick in (("These rules are confirmed by a published figure:", confirmed),
                        ("No published log confirms rules", lambda r: not confirmed(r))):
        listed = re.search(re.escape(words) + r"([\d,\sand]+)", text)
        numbers = {int(x) for x in re.findall(r"\d+", listed.group(1))} if listed else None
        if numbers != {int(r["n"]) for r in table if pick(r)}:
            found.append(f"the closing note's '{words}' list is not the table's")
    return found


def test_the_rule_list_holds_against_the_repository():
    assert problems(DOC.read_text()) == []


def test_the_rule_list_has_the_issues_items_and_counts_itself():
    text = DOC.read_text()
    table = rows(text)
    assert len(table) >= 50 and all(map(cited, table))
    count = COUNT.search(text)
    assert count is not None and int(count.group(1)) == len(table)
    for words in ("output_bin_counts", "prompt_bin_mask", "block tables", "bitmask", "cuBLAS", "0.11.0",
                  "cudagraph_utils.py", "attention_chunk_size", "pp + 1", "lcm", "align their block to at least 128",
                  "3 state page(s) per request", "16 KiB", "fused_qkv_a_proj", "W_UK_T", "speculator",
                  "get_pp_indices", "handle_max_mamba_cache", "memory.total", "ReqToTokenPool", "GLM-5",
                  "166,320", "--attn-dp-size", "receive buffers", "nn.Identity", "64 x TP", "max(1, kv / TP)",
                  "ceil(E / EP)", "warm torch.compile", "DeepSeek-V4"):
        assert words in text, words


def test_readme_quotes_the_lists_counts():
    """README.md's line on the list quotes its rule and confirmation counts: they follow the table."""
    count = COUNT.search(DOC.read_text())
    readme = (ROOT / "README.md").read_text()
    quoted = re.search(r"lists the (\d+) rules .*? \((\d+) rules\) or \"no published log confirms it\" \((\d+)\)",
                       readme)
    assert quoted is not None and "docs/engine_rules.md" in readme
    assert quoted.groups() == (count.group(1), count.group(3), count.group(4))
    assert "(../docs/engine_rules.md)" in (VALIDATION / "README.md").read_text()


def test_the_check_fails_on_a_row_that_names_what_does_not_exist():
    """Hand-made faults, each reported: a function the module lacks, a test that is not there, a row id the hold-out
    does not hold, an error the results CSV does not give, a count the table does not make."""
    text = DOC.read_text()
    bad = text.replace("`kvplan.planning.engines.vllm_runner:persistent_bytes`",
                       "`kvplan.planning.engines.vllm_runner:persistent_bytez`", 1)
    assert "row 1: kvplan.planning.engines.vllm_runner has no persistent_bytez" in problems(bad)
    bad = text.replace("::test_default_capture_sizes", "::test_default_capture_sizez", 1)
    assert any("test_default_capture_sizez does not exist" in p for p in problems(bad))
    bad = text.replace("fs69421856836/qwen2.5-0.5b-16gb", "fs69421856836/qwen2.5-0.6b-16gb", 1)
    assert any("fs69421856836/qwen2.5-0.6b-16gb" in p and "does not exist" in p for p in problems(bad))
    bad = text.replace("#card_tokens` -1.53 %", "#card_tokens` -1.35 %", 1)
    assert any("the doc says -1.35 %" in p for p in problems(bad))
    bad = COUNT.sub(lambda m: f"{int(m.group(1)) + 1}" + m.group(0)[len(m.group(1)):], text, count=1)
    assert any(p.startswith("the count line should read") for p in problems(bad))
    bad = text.replace("`v1/worker/gpu/sample/penalties.py`", "`v1/worker/gpu/sample/penaltiez.py`", 1)
    assert any("penaltiez.py is not cited" in p for p in problems(bad))


# ------------------------------------------------------------------------------------- rules no other test pinned

LLAMA = "meta-llama/Llama-3.1-8B"


def test_the_033_cublas_note_is_said_from_033_only():
    """vLLM 0.33 v1/worker/gpu_worker.py `init_device` :518-528 creates the cuBLAS handles before its memory snapshot
    (a note: kvplan's non-torch figure, measured on 0.18-0.19, still holds their workspace); 0.32 does not."""
    def said(version):
        return any("cuBLAS handles before that snapshot" in n
                   for n in plan(LLAMA, gpu="H100-80GB", max_model_len=8192, engine_version=version).notes)

    assert said("0.33.0") and not said("0.32.0")


def test_the_drafters_own_graphs_are_a_note():
    """vLLM's estimate holds the drafter's graphs (0.33 v1/worker/gpu/model_runner.py `profile_cudagraph_memory`
    :1069-1139, `self.speculator.capture()`); kvplan's does not, and the plan says so, only where it drafts."""
    head = {"method": "eagle3", "num_speculative_tokens": 3, "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}
    drafting = plan(LLAMA, gpu="H100-80GB", max_model_len=8192, speculative=head)
    alone = plan(LLAMA, gpu="H100-80GB", max_model_len=8192)
    assert any(n.startswith("the drafter's own CUDA graphs are not in kvplan's estimate") for n in drafting.notes)
    assert not any("drafter's own CUDA graphs" in n for n in alone.notes)


def test_batches_in_flight_under_pipeline_parallelism():
    """config/vllm.py `max_concurrent_batches` (0.33 :588-598): with async scheduling the V2 runner keeps pp + 1
    batches in flight; V1 under PP runs without it, pp; PP 1 on either, 2; before 0.26 a window held one batch."""
    assert [max_concurrent_batches((0, 33, 0), pp, True) for pp in (1, 2, 4)] == [2, 3, 5]
    assert [max_concurrent_batches((0, 28, 0), pp, False) for pp in (1, 2, 4)] == [2, 2, 4]
    assert max_concurrent_batches((0, 25, 0), 4, True) == 1
    # in a plan: Llama-3.1-8B runs on V2 at 0.33 (every model from 0.29), Qwen3-30B-A3B (MoE) on V1 at 0.28
    assert plan(LLAMA, gpu="H100-80GB", pp=2, max_model_len=8192).kv_rules.inflight == 3
    assert plan("Qwen/Qwen3-30B-A3B", gpu="H100-80GB", pp=4, max_model_len=8192,
                engine_version="0.28.0").kv_rules.inflight == 4


def test_mamba2_checkpoint_block_from_032():
    """mamba_mixer2.py exports a prefill checkpoint block from 0.32: a Mamba-2 hybrid in 'align' mode (vLLM's default
    for hybrids from 0.26, 'align' for every model from 0.29) holds 2 + 1 state pages a request at 0.32, 2 at 0.31."""
    nemotron, h100 = load_model("nvidia/Nemotron-H-56B-Base-8K"), resolve_gpu("H100-80GB")
    assert mamba_states(nemotron, (0, 31, 0), 0, None, h100) == ("align", 2)
    assert mamba_states(nemotron, (0, 32, 0), 0, None, h100) == ("align", 3)


def test_the_qwen35_state_note_counts_the_pages_it_plans():
    """Issue #22: a Qwen3.5 note said "one state per request" where the arithmetic used three. At 0.33 on an H100
    ('align' 2 + FlashInfer's GDN prefill checkpoint, qwen_gdn_linear_attn.py :739-750) the note says 3; at 0.32, 2."""
    def note(version):
        p = plan("Qwen/Qwen3.5-27B", gpu="H100-80GB", max_model_len=32768, engine_version=version)
        return next(n for n in p.notes if n.startswith("Mamba/linear state: "))

    assert note("0.33.0").startswith("Mamba/linear state: 3 state page(s) per request")
    assert note("0.32.0").startswith("Mamba/linear state: 2 state page(s) per request")


def test_mla_model_dtype_copies_of_a_quantized_kv_b_proj():
    """layers/attention/mla_attention.py `split_kv_b_proj` (0.33 :408): an fp8 kv_b_proj is dequantized into new
    model-dtype W_UK / W_UV tensors, kept beside the fp8 weight. DeepSeek-V3 (config: kv_lora_rank 512, 128 heads,
    qk_nope_head_dim 128, v_head_dim 128, 61 layers) at TP 8: 512 x 16 x 256 x 2 B = 4 MiB a layer; a bf16 kv_b_proj
    is used as it is, no copy."""
    p = plan("deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, max_model_len=32768)
    per_layer = 512 * (128 // 8) * (128 + 128) * 2   # kv_lora_rank x heads / TP x (qk_nope + v_head) x 2 B
    assert p.extra["MLA bf16 W_UK / W_UV"] == 61 * per_layer == 61 * 4 * 2**20
    bf16 = plan("deepseek-ai/DeepSeek-V2-Lite", gpu="H100-80GB", max_model_len=8192)
    assert "MLA bf16 W_UK / W_UV" not in bf16.extra


@pytest.mark.parametrize("kind", ["holdout", "calibration", "sglang", "cudagraph"])
def test_every_published_set_is_read(kind):
    """The row-id check reads each set (a set that reads empty would pass every reference)."""
    assert len(_results()[kind]["ids"]) >= 18
