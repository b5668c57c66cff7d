"""The validation harness on tiny CPU models: measurement, OOM handling (a simulated memory limit), resume, the
time budget, the report files, the `kvplan validate` entry point, the space-for-time benchmark; and the smoke
suite itself (every case must match kvplan to the byte)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]

import kvplan  # noqa: E402
from kvplan.planning.engines.hf_peak import hf_peak_for  # noqa: E402
from validation import report as vreport  # noqa: E402
from validation.harness import main as harness_main  # noqa: E402
from validation.harness import run_suite  # noqa: E402
from validation.measure import walk_cache  # noqa: E402
from validation.models import Recipe  # noqa: E402
from validation.suites import CPU_RECIPES, SMOKE_RECIPES, Case, smoke_cases  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The whole smoke suite, once: (folder, report)."""
    out = tmp_path_factory.mktemp("smoke")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)            # tiny ops: OpenMP fan-out costs more than it gains, badly on a busy box
    try:
        report = run_suite("smoke", smoke_cases(), out, device=CPU, progress=False)
    finally:
        torch.set_num_threads(threads)
    return out, report


def test_smoke_suite_matches_to_the_byte(smoke):
    _, report = smoke
    cases = report["cases"]
    assert len(cases) >= 15
    bad = [f"{c['id']}: {c['status']} {c.get('reason')}" for c in cases if c["status"] != "ok"]
    assert not bad, "\n".join(bad)
    for c in cases:
        assert c["measured_kv_bytes"] == c["predicted_kv_bytes"]
        assert c["measured_prefill_kv_bytes"] == c["predicted_prefill_kv_bytes"]
        # a peak holds at least the weights and the final cache, both measured by walking the real objects
        # (module_bytes of the built model, walk_cache of generate's cache): a bound independent of kvplan
        assert c["measured_peak_bytes"] >= c["weights_bytes_measured"] + c["measured_kv_bytes"]
        assert c["predicted_peak_bytes"] >= c["predicted_weights_bytes"] + c["predicted_kv_bytes"]
        assert c["generated_tokens"] == c["new_tokens"]          # min_new_tokens kept random weights going
    families = {c["model_type"] for c in cases}
    assert {"llama", "gemma2", "qwen2", "deepseek_v3", "qwen3_next", "mamba", "falcon"} <= families
    assert report["summary"]["kv_error_bytes"]["max"] == 0


def test_report_files(smoke):
    out, report = smoke
    names = {p.name for p in out.iterdir()}
    assert {"report.json", "report.csv", "summary.md", "predicted_vs_measured.png"} <= names
    assert not [n for n in names if n.endswith(".tmp")]             # atomic writes leave nothing behind
    data = json.loads((out / "report.json").read_text())
    env = data["environment"]
    assert env["device"] == "cpu" and env["torch"] and env["transformers"]
    required = {"model", "cache", "batch_size", "prompt_len", "new_tokens", "dtype", "predicted_kv_bytes",
                "measured_kv_bytes", "predicted_peak_bytes", "measured_peak_bytes", "status"}
    assert all(required <= set(c) for c in data["cases"])
    csv_lines = (out / "report.csv").read_text().splitlines()
    assert csv_lines[0].startswith("id,suite,model") and len(csv_lines) == len(data["cases"]) + 1
    summary = (out / "summary.md").read_text()
    assert "| KV after decode, abs bytes |" in summary and "median" in summary
    peaks = [abs(c["peak_error_pct"]) for c in data["cases"] if c.get("peak_error_pct") is not None]
    within = sum(p <= 5 for p in peaks)
    assert data["summary"]["peak_within_5pct"] == within
    assert f"(the target on CUDA): {within} of {len(peaks)} measured cases." in summary
    assert (out / "predicted_vs_measured.png").read_bytes()[:4] == b"\x89PNG"


def test_resume_skips_finished_cases(smoke, monkeypatch):
    out, report = smoke
    import validation.runner

    def refuse(*_a, **_k):
        raise AssertionError("a finished case ran again")

    monkeypatch.setattr(validation.runner, "run_case", refuse)
    again = run_suite("smoke", smoke_cases(), out, device=CPU, progress=False)
    assert [c["id"] for c in again["cases"]] == [c["id"] for c in report["cases"]]
    assert all(c["status"] == "ok" for c in again["cases"])


def test_resume_reruns_what_is_missing(tmp_path, monkeypatch):
    cases = smoke_cases()[:2]
    run_suite("smoke", cases[:1], tmp_path, device=CPU, progress=False, plot=False)
    import validation.runner

    ran = []
    real = validation.runner.run_case

    def counting(case, ctx):
        ran.append(case.id)
        return real(case, ctx)

    monkeypatch.setattr(validation.runner, "run_case", counting)
    report = run_suite("smoke", cases, tmp_path, device=CPU, progress=False, plot=False)
    assert ran == [cases[1].id]
    assert [c["status"] for c in report["cases"]] == ["ok", "ok"]
    run_suite("smoke", cases[:1], tmp_path, device=CPU, progress=False, plot=False, resume=False)
    assert ran == [cases[1].id, cases[0].id]


def test_simulated_memory_limit_is_an_oom_result(tmp_path):
    case = Case(SMOKE_RECIPES["llama"], "dynamic", 2, 40, 6, "fp32")
    from validation.measure import module_bytes
    from validation.models import build_model

    weights = module_bytes(build_model(case.recipe.text_dict(), torch.float32, CPU))
    limit = weights + 10_000                     # the weights fit; the 40-token prefill cache (40,960 B) does not
    report = run_suite("smoke", [case], tmp_path, device=CPU, progress=False, plot=False, memory_limit=limit)
    rec = report["cases"][0]
    assert rec["status"] == "oom", rec
    assert rec["planner_fits"] is False and rec["fit_agrees"] is True
    assert "simulated" in rec["reason"]
    roomy = run_suite("smoke", [case], tmp_path / "roomy", device=CPU, progress=False, plot=False,
                      memory_limit=2**30)["cases"][0]
    assert roomy["status"] == "ok" and roomy["planner_fits"] is True


def test_time_budget_skips_instead_of_running(tmp_path):
    report = run_suite("smoke", smoke_cases()[:3], tmp_path, device=CPU, progress=False, plot=False, time_budget=0)
    assert [c["status"] for c in report["cases"]] == ["skipped"] * 3
    assert all("time budget" in c["reason"] for c in report["cases"])


def test_walk_counts_the_storage_a_sliding_view_pins():
    from transformers import DynamicCache

    from validation.models import hf_config

    text = SMOKE_RECIPES["gemma2"].text_dict()              # 4 layers, window 8, sliding first
    cache = DynamicCache(config=hf_config(text))
    k = torch.zeros(1, 2, 20, 16)
    for layer in range(4):
        cache.update(k, k.clone(), layer)
    m = walk_cache(cache)
    per_token = 2 * 2 * 16 * 4
    assert m.logical == 2 * 7 * per_token + 2 * 20 * per_token + 2 * 8          # W-1 kept by sliding layers
    assert m.storage == 4 * 20 * per_token + 2 * 8                              # the whole prefill stays pinned
    assert m.scalars == 2 * 8 and m.layer_classes == {"DynamicSlidingWindowLayer": 2, "DynamicLayer": 2}


def _per_layer(spec):
    return [tuple((type(s).__name__, getattr(s, "elems_per_token", None), getattr(s, "window", None),
                   getattr(s, "k_head_dim", None)) for s in layer) for layer in spec.layers]


GEOMETRY_CHANGES = ("heads", "SSM", "window", "chunk", "sliding enabled")


@pytest.mark.parametrize("recipe", [r for r in CPU_RECIPES if not any(w in r.variant for w in GEOMETRY_CHANGES)],
                         ids=lambda r: r.key)
def test_shrinking_keeps_the_cache_geometry(recipe):
    """The cpu suite's shrunk models cache exactly what the real configs do (same per-layer specs)."""
    real = kvplan.parse_config(replace(recipe, shrink=False).text_dict())
    shrunk = kvplan.parse_config(recipe.text_dict())
    assert _per_layer(shrunk) == _per_layer(real)
    assert shrunk.dims.vocab_size == 256
    if recipe.variant == "shrunk":
        assert shrunk.dims.hidden_size <= 128 < real.dims.hidden_size


@pytest.mark.parametrize("recipe", [r for r in CPU_RECIPES if "heads" in r.variant and "MLA" not in r.variant
                                    and "as deepseek" not in r.variant], ids=lambda r: r.key)
def test_shrinking_heads_keeps_head_dim(recipe):
    real = kvplan.parse_config(replace(recipe, shrink=False).text_dict())
    shrunk = kvplan.parse_config(recipe.text_dict())
    assert shrunk.num_layers == real.num_layers
    dims = {s.k_head_dim for _, s in shrunk.specs() if hasattr(s, "k_head_dim")}
    assert dims == {s.k_head_dim for _, s in real.specs() if hasattr(s, "k_head_dim")}


def test_one_dict_for_kvplan_and_transformers():
    recipe = next(r for r in CPU_RECIPES if r.key == "gemma-2-9b-w32")
    text = recipe.text_dict()
    assert text["sliding_window"] == 32 and text["head_dim"] == 256 and text["vocab_size"] == 256
    from validation.models import hf_config

    cfg = hf_config(text)
    assert (cfg.sliding_window, cfg.head_dim, cfg.num_hidden_layers) == (32, 256, 42)
    assert kvplan.parse_config(text).attention_kinds == {"sliding": 21, "full": 21}


def test_hf_peak_terms():
    llama = kvplan.load_model("meta-llama/Llama-3.1-8B")
    short = kvplan.estimate(llama, 1039, 1, prompt_len=1024, dtype="bf16")
    long = kvplan.estimate(llama, 32783, 8, prompt_len=32768, dtype="bf16")
    p_short, p_long = hf_peak_for(llama, short), hf_peak_for(llama, long)
    weights = 16_060_522_496
    assert p_short.weights_bytes == weights
    assert weights < p_short.peak_allocated_bytes < weights + 2**30
    assert p_long.peak_allocated_bytes > weights + long.prefill_peak_bytes
    gemma = kvplan.load_model("google/gemma-2-9b")
    est = kvplan.estimate(gemma, 8207, 1, prompt_len=8192, dtype="bf16")
    eager, sdpa = hf_peak_for(gemma, est), hf_peak_for(gemma, est, attn_implementation="sdpa")   # gemma2: eager
    assert eager.peak_allocated_bytes > sdpa.peak_allocated_bytes + 16 * 8192 * 8192 * 4   # fp32 softmax scores
    quant = kvplan.estimate(llama, 4111, 1, prompt_len=16, dtype="bf16", cache="quantized", kv_dtype="int4")
    assert hf_peak_for(llama, quant).decode_transient_bytes >= 2 * 4111 * 2048 * 2  # a dequantized layer, twice


def test_kvplan_validate_subcommand(capsys, tmp_path, monkeypatch):
    from kvplan.cli import main

    monkeypatch.chdir(tmp_path)     # the default results folder is ./kvplan-validation-results

    assert main(["validate", "--suite", "smoke", "--list"]) == 0
    ids = capsys.readouterr().out.split()
    assert ids == [c.id for c in smoke_cases()]
    assert harness_main(["--suite", "gpu", "--device", "cpu"]) == 2            # the gpu suite refuses a CPU
    assert not Path("kvplan-validation-results").exists()                    # ... before it makes a folder


def test_kvplan_cli_stays_import_light():
    code = "import sys, kvplan.cli; print(any(m in sys.modules for m in ('torch', 'transformers', 'validation')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_space_for_time_benchmark(tmp_path):
    from validation.space_for_time import cumulative, fit_exponent, run_benchmark

    xs = [8, 16, 32, 64]
    assert fit_exponent(xs, [x * 3.0 for x in xs]) == pytest.approx(1.0)
    assert fit_exponent(xs, [x * x * 0.5 for x in xs]) == pytest.approx(2.0)
    assert cumulative([1, 2, 4], [1.0, 1.0, 1.0]) == [1.0, 2.0, 4.0]
    shape = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64}
    result = run_benchmark(tmp_path, device=CPU, progress=False, contexts=[8, 16, 32, 64], repeats=1, shape=shape)
    assert [p["context"] for p in result["points"]] == [8, 16, 32, 64]
    assert all(p["cached_s"] > 0 and p["recompute_s"] > 0 for p in result["points"])
    assert result["points"][-1]["kv_bytes"] == 2 * 2 * 32 * 64 * 4
    assert set(result["fits"]) == {"cached_per_token_exponent", "recompute_per_token_exponent",
                                   "cached_total_exponent", "recompute_total_exponent"}
    saved = json.loads((tmp_path / "space_for_time.json").read_text())
    assert saved["points"] == result["points"]
    assert (tmp_path / "space_for_time.png").is_file()


def test_csv_and_summary_of_synthetic_cases(tmp_path):
    cases = [{"id": "a", "status": "ok", "predicted_kv_bytes": 100, "measured_kv_bytes": 100, "kv_error_bytes": 0,
              "prefill_kv_error_bytes": 0, "predicted_peak_bytes": 110, "measured_peak_bytes": 100,
              "peak_error_pct": 10.0},
             {"id": "b", "status": "mismatch", "predicted_kv_bytes": 100, "measured_kv_bytes": 104,
              "kv_error_bytes": 4, "prefill_kv_error_bytes": 0, "predicted_peak_bytes": 95,
              "measured_peak_bytes": 100, "peak_error_pct": -5.0, "reason": "after decode: +4 B"},
             {"id": "c", "status": "oom", "planner_fits": False}]
    report = {"environment": {"device": "cpu"}, "suites": ["smoke"], "cases": cases}
    vreport.write_all(tmp_path, report)
    s = report["summary"]
    assert s["mismatches"] == 1 and s["oom"] == 1 and s["oom_predicted"] == 1
    assert s["kv_error_bytes"] == {"count": 2, "max": 4, "median": 2.0}
    assert s["peak_error_pct"]["max"] == 10.0
    assert "`b`: **mismatch** after decode: +4 B" in (tmp_path / "summary.md").read_text()


def test_unknown_family_is_an_error_result_not_a_crash(tmp_path):
    recipe = Recipe("not-native", "inline", "tiny", inline={"model_type": "chatglm", "hidden_size": 64,
                                                              "num_layers": 2, "num_attention_heads": 4,
                                                              "kv_channels": 16, "multi_query_attention": False,
                                                              "padded_vocab_size": 64, "ffn_hidden_size": 64})
    rec = run_suite("smoke", [Case(recipe)], tmp_path, device=CPU, progress=False, plot=False)["cases"][0]
    assert rec["status"] == "error" and "native" in rec["reason"]


def test_cuda_measurement_path_with_a_fake_allocator(monkeypatch):
    """The CUDA branch (no GPU here): run it on a CPU model with the allocator's figures faked, so every line
    of it executes and the walked bytes still equal kvplan's."""
    import validation.runner as vr

    class FakeMemory:
        def __init__(self, device):
            self.level = 10_000

        def allocated(self):
            self.level += 512
            return self.level

        def peak(self):
            return self.level + 4096

        def reset_peak(self):
            pass

        def reserved_peak(self):
            return self.level + 8192

        def process_bytes(self):
            return None

        def device_used(self):
            return self.level

        def total(self):
            return 80 * 2**30

    monkeypatch.setattr(vr, "CudaMemory", FakeMemory)
    monkeypatch.setattr(vr, "free_memory", lambda device=None: None)
    case = Case(SMOKE_RECIPES["gemma2"], "dynamic", 2, 10, 4, "fp32")
    text = case.recipe.text_dict()
    _, est, _ = vr.predict(case, text, device_type="cuda")
    ctx = vr.RunContext(device=CPU, suite="smoke")
    model, _ = ctx.model_for(case, text)
    vr._warm_up(model, CPU)
    rec = vr.base_record(case, "smoke", CPU)
    vr._measure_cuda(case, ctx, rec, model, vr._prompt(case, 128, CPU), est)
    assert rec["measured_kv_bytes"] == est.kv_cache_bytes
    assert rec["measured_prefill_kv_bytes"] == est.prefill_peak_bytes
    assert rec["measured_kv_alloc_bytes"] is not None and rec["kv_alloc_error_pct"] is not None
    assert rec["measured_peak_bytes"] == max(rec["measured_prefill_peak_bytes"], rec["measured_decode_peak_bytes"])
    assert rec["generated_tokens"] == 4 and "max_memory_allocated" in rec["peak_method"]


# ---------------------------------------------------------------- running the gpu suite on a lent GPU


@pytest.mark.parametrize("bits", [2, 4])
def test_torch_unpack_reads_quantos_packing(bits):
    """validation.quanto_cuda.unpack (what the gpu suite runs instead of compiling quanto's CUDA extension) undoes
    quanto's own PackedTensor.pack and agrees with quanto's compiled kernel, odd row counts included."""
    pytest.importorskip("optimum.quanto")
    from optimum.quanto.tensor.packed import PackedTensor

    from validation.quanto_cuda import unpack

    values = torch.randint(0, 2**bits, (13, 6), dtype=torch.uint8, generator=torch.Generator().manual_seed(bits))
    packed = PackedTensor.pack(values, bits)
    assert torch.equal(unpack(packed._data, bits)[: values.shape[0]], values)
    assert torch.equal(unpack(packed._data, bits), torch.ops.quanto.unpack(packed._data, bits))
    with pytest.raises(ValueError, match="2 or 4"):
        unpack(packed._data, 3)


def test_quanto_cuda_extension_is_never_built(monkeypatch):
    """With quanto's CUDA extension registered (as on a GPU machine), use_torch_unpack gives it the torch unpack
    so its lazy `lib` never starts nvcc; an extension already built is left alone; no CUDA extension: False."""
    pytest.importorskip("optimum.quanto")
    from optimum.quanto.library.extensions import extension as qext

    from validation import quanto_cuda

    monkeypatch.setattr(qext, "_extensions", dict(qext._extensions))
    qext._extensions.pop("quanto_cuda", None)
    assert quanto_cuda.use_torch_unpack() is False

    def build(*args, **kwargs):
        raise AssertionError("the CUDA extension was compiled")

    monkeypatch.setattr(qext, "load", build)
    ext = qext.Extension("quanto_cuda", root_dir="/nonexistent", sources=["unpack.cu"])
    qext._extensions["quanto_cuda"] = ext
    assert quanto_cuda.use_torch_unpack() is True
    assert ext.lib.unpack is quanto_cuda.unpack
    built = object()
    ext._lib = built
    assert quanto_cuda.use_torch_unpack() is True and ext._lib is built


def test_gpu_suite_plan_fits_the_default_budget_on_an_h200(capsys):
    """`--plan` decides every gpu case as a run would, without CUDA: the cases predicted not to fit an H200
    are the eager-attention ones at long prompts (gemma-2, gpt-oss: B x heads x P^2 scores), and what runs is
    estimated inside the default 480 s budget."""
    from kvplan.gpus import resolve_gpu
    from validation.runner import plan_cases
    from validation.suites import gpu_cases

    h200 = resolve_gpu("H200").memory_bytes
    rows = plan_cases(gpu_cases(), "cuda", h200)
    skipped = {r["id"] for r in rows if r["fits"] is False}
    assert "gemma-2-9b/real/dynamic/B1/P32768/N16/bf16" in skipped
    assert "gpt-oss-20b/real/dynamic/B8/P8192/N16/bf16" in skipped
    assert "llama-3.1-8b/real/dynamic/B8/P32768/N16/bf16" not in skipped
    assert all(r["fits"] is not None for r in rows)
    assert rows[-1]["cumulative_s"] <= 480
    assert all(b["cumulative_s"] >= a["cumulative_s"] for a, b in zip(rows, rows[1:]))
    assert harness_main(["--suite", "gpu", "--plan", "--time-budget", "480"]) == 0
    out = capsys.readouterr().out
    assert f"H200 (kvplan's catalogue; no CUDA device here): {h200:,} B" in out
    assert f"{len(rows) - len(skipped)} of {len(rows)} cases would run" in out and "fits" in out


def test_case_lines_when_there_is_no_progress_bar(tmp_path, capsys):
    run_suite("smoke", smoke_cases()[:2], tmp_path, device=CPU, progress=False, plot=False)
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("[")]
    assert len(lines) == 2 and lines[0].startswith("[1/2] tiny-llama-gqa/tiny/dynamic/B1/P12/N4/fp32: ok, kv +0 B")
    assert lines[1].startswith("[2/2] ") and lines[1].endswith(" s")


def test_gpu_run_script_rehearsed_on_cpu(tmp_path):
    """validation/gpu_run.sh, the one command for a lent GPU, run here on two smoke cases: it records the
    machine, leaves the results folder and the log under OUT, and carries on from RESUME's report."""
    first = tmp_path / "first"
    env = {**os.environ, "OUT": str(first), "DEVICE": "cpu", "SUITE": "smoke", "BUDGET": "120",
           "PYTHON": sys.executable, "ARGS": "--cases tiny-llama-gqa/tiny/dynamic"}
    args = ["bash", str(ROOT / "validation" / "gpu_run.sh")]
    subprocess.run(args, env=env, check=True, capture_output=True, text=True, timeout=300)
    assert sorted(p.name for p in (first / "cpu").iterdir()) == ["predicted_vs_measured.png", "report.csv",
                                                                 "report.json", "summary.md"]
    assert "transformers 5.24" in (first / "environment.txt").read_text()
    log = (first / "log.txt").read_text()
    assert "2 cases: 2 ok" in log and "gpu_run: validation exited 0" in log
    again = subprocess.run(args, env={**env, "OUT": str(tmp_path / "again"), "RESUME": str(first / "cpu")},
                           check=True, capture_output=True, text=True, timeout=300)
    rerun = [l for l in (tmp_path / "again" / "log.txt").read_text().splitlines() if l.startswith("[")]
    assert rerun == []                                                        # both cases came from RESUME
    assert "2 cases: 2 ok" in again.stdout


def test_time_budget_stops_a_running_case_at_its_next_forward(tmp_path, monkeypatch):
    """A case that started in time but is still running when the budget ends stops at its next forward pass and
    is recorded as skipped (then run again by the next, resumed, call): the first `remaining()` is the pre-start
    check, every later one a per-step deadline check."""
    import validation.runner as vr

    calls = []

    def remaining(self):
        calls.append(1)
        return 1000.0 if len(calls) == 1 else -1.0

    monkeypatch.setattr(vr.RunContext, "remaining", remaining)
    case = smoke_cases()[0]
    rec = run_suite("smoke", [case], tmp_path, device=CPU, progress=False, plot=False, time_budget=60)["cases"][0]
    assert rec["status"] == "skipped" and rec["reason"] == "time budget: stopped after 1 forward passes"
    assert rec["measured_kv_bytes"] is None and rec["predicted_kv_bytes"] is not None
    monkeypatch.undo()
    again = run_suite("smoke", [case], tmp_path, device=CPU, progress=False, plot=False)["cases"][0]
    assert again["status"] == "ok" and again["kv_error_bytes"] == 0


def test_gpu_suite_models_build_and_weigh_as_predicted_on_meta():
    """Every gpu-suite model builds from its config with the harness's own path (on the meta device: shapes
    only, no memory), picks the attention kernel kvplan's peak assumes, and weighs what the peak prediction
    counts to within the RoPE inv_freq buffers (2 x head_dim / 2 float32 per rotary module, <= 1 KiB)."""
    from kvplan.planning.engines.hf_peak import EAGER_ONLY
    from validation.measure import module_bytes
    from validation.models import build_model
    from validation.runner import predict
    from validation.suites import gpu_cases

    seen = set()
    for case in gpu_cases():
        if case.recipe.key in seen:
            continue
        seen.add(case.recipe.key)
        text = case.recipe.text_dict()
        model = build_model(text, torch.bfloat16, torch.device("meta"))
        _, _, peak = predict(case, text, device_type="cuda")
        assert 0 <= module_bytes(model) - peak.weights_bytes <= 1024 + 2, case.recipe.key
        expected = "eager" if text["model_type"] in EAGER_ONLY else "sdpa"
        assert model.config._attn_implementation == expected, case.recipe.key
    assert len(seen) == 8
