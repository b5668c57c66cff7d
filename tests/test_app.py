"""The web app under Streamlit's AppTest: every page renders, bad input gives a message (never a traceback), and
the numbers shown are the API's for the same inputs. Charts are opaque to AppTest: their data is tested in
tests/test_charts.py, here only their presence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import kvplan
from app_pages import support as sup
from app_pages import validation_data as val
from kvplan.cache import strategies
from kvplan.planning.planner import plan
from kvplan.planning.layouts import deployable
from kvplan.units import fmt_bytes, fmt_gb, fmt_int

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGES = ("app_pages/estimate.py", "app_pages/compare.py", "app_pages/capacity.py", "app_pages/setups.py",
         "app_pages/validation.py",
         "app_pages/learn.py")
LLAMA = "meta-llama/Llama-3.1-8B"


pytestmark = pytest.mark.usefixtures("offline_app")  # tests/conftest.py: fresh Streamlit cache, Hub offline


def app(page: str | None = None, **params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    for key, value in params.items():
        at.query_params[key] = str(value)
    at.run()
    if page:
        at.switch_page(page).run()
    return at


def clean(at: AppTest) -> None:
    assert not at.exception, [e.message for e in at.exception]


def errors(at: AppTest) -> str:
    return " | ".join(e.value for e in at.error)


def metric(at: AppTest, label_start: str) -> str:
    return next(m.value for m in at.metric if m.label.startswith(label_start))


# ---------------------------------------------------------------------------------------------- every page


@pytest.mark.parametrize("page", PAGES)
def test_default_page_renders(page):
    at = app(page)
    clean(at)
    assert not at.error
    assert at.get("plotly_chart"), "every page draws at least one chart"


def test_estimate_numbers_equal_the_api():
    at = app()
    clean(at)
    est = kvplan.estimate(LLAMA, 8192, 1)
    assert metric(at, "KV cache (GiB") == fmt_bytes(est.kv_cache_bytes) == "1.00 GiB"
    assert metric(at, "KV cache (GB") == fmt_gb(est.kv_cache_bytes)
    assert metric(at, "Exact bytes") == fmt_int(est.kv_cache_bytes)
    table = at.dataframe[0].value
    assert list(table["bytes"]) == [g.bytes for g in est.groups]
    assert est.formula in [c.value for c in at.code]
    assert len(at.get("download_button")) == 2


def test_query_params_seed_the_state():
    at = app(model="google/gemma-2-9b", ctx=32768, batch=2, cache="static", maxlen=65536)
    clean(at)
    assert at.selectbox(key="model").value == "google/gemma-2-9b"
    est = kvplan.estimate("google/gemma-2-9b", 32768, 2, cache="static", max_cache_len=65536)
    assert metric(at, "Exact bytes") == fmt_int(est.kv_cache_bytes)


@pytest.mark.parametrize("kv, cache", [("int4", "quantized"), ("fp8", "quantized"), ("bf16", "offloaded"),
                                       ("auto", "offloaded_static")])
def test_estimate_cache_strategies(kv, cache):
    at = app()
    at.selectbox(key="kv").set_value(kv)
    at.selectbox(key="cache").set_value(cache).run()
    clean(at)
    est = kvplan.estimate(LLAMA, 8192, 1, None if kv == "auto" else kv, cache)
    assert metric(at, "Exact bytes") == fmt_int(est.kv_cache_bytes)


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("page", PAGES[:3])
@pytest.mark.parametrize("key, value, expected", [
    ("ctx", 0, "seq_len must be between 1"),
    ("ctx", 10**15, "seq_len must be between 1"),
    ("batch", 0, "batch_size must be between 1"),
])
def test_edge_workloads_give_a_message(page, key, value, expected):
    at = app(page, **({"ctxmodel": "false"} if page.endswith("capacity.py") else {}))  # the sidebar's context
    at.number_input(key=key).set_value(value).run()
    clean(at)
    text = errors(at)
    if page.endswith("capacity.py") and key == "batch":  # batch only feeds the speed estimate there
        assert "batch" in " ".join(w.value for w in at.warning)
    elif page.endswith("capacity.py"):  # the context is the max model length there
        # 10**15 tokens is past kvplan's 2**40 ceiling for any length (kvplan.planning.inputs.positive): refused, not "Does not fit"
        assert ("max_model_len must be a positive" if value == 0 else "max_model_len must be between 1 and") in text
    else:
        assert expected in text


@pytest.mark.parametrize("page", PAGES[3:])
def test_validation_and_learn_survive_a_zero_context(page):
    at = app(page, ctx=0, **({"ctxmodel": "false"} if page.endswith("setups.py") else {}))  # the sidebar's context
    clean(at)
    if page.endswith("setups.py"):  # a context every setup shares is checked once (issue #25), not a row per setup
        assert "max_model_len must be a positive whole number, got 0" in errors(at) and not at.get("plotly_chart")
    else:
        assert at.get("plotly_chart")


@pytest.mark.parametrize("kv, cache, expected", [
    ("fp8", "static", "only in a quantized cache"),   # fp8 with the dynamic cache: the engine-neutral bytes
    ("int8", "dynamic", "only in a quantized cache"),
    ("fp32", "quantized", "quantized cache stores"),
])
def test_estimate_bad_dtype_combination(kv, cache, expected):
    at = app()
    at.selectbox(key="kv").set_value(kv)
    at.selectbox(key="cache").set_value(cache).run()
    clean(at)
    assert expected in errors(at)


def test_estimate_fp8_is_the_engine_neutral_figure():
    """Issue #24: fp8 with the default cache is the engine-neutral figure, in the app's words: Llama-3.1-8B at the
    sidebar's 8,192 tokens is 32 layers x 2 x 8 heads x 128 x 1 B = 65,536 B a token, 536,870,912 B in all."""
    at = app()
    at.selectbox(key="kv").set_value("fp8").run()
    clean(at)
    assert metric(at, "Exact bytes") == fmt_int(65_536 * 8192) == "536,870,912"
    notes = " ".join(c.value for c in at.caption)
    assert "engine-neutral float8_e4m3 KV" in notes and "--" not in notes


def test_static_cache_shorter_than_context():
    at = app(cache="static", maxlen=1024)
    clean(at)
    assert "exceeds max_cache_len" in errors(at)


def test_quantized_cache_refused_for_sliding_models():
    at = app(model="google/gemma-2-9b", kv="int4", cache="quantized")
    clean(at)
    assert "accepts only full-attention models" in errors(at)


@pytest.mark.parametrize("hub_id, expected", [
    ("not a hub id!!", "is not a Hub id"),
    ("../../etc/passwd", "is not a Hub id"),
    ("nobody-here/no-such-model-xyz", "Could not load the model"),
])
def test_bad_hub_id(hub_id, expected):
    at = app()
    at.radio(key="src").set_value("Hub").run()
    clean(at)
    assert at.info, "an empty Hub id asks for one"
    at.text_input(key="hub").input(hub_id).run()
    clean(at)
    assert expected in errors(at)


def test_hub_token_stays_out_of_the_url():
    at = app(src="Hub", hub="nobody-here/no-such-model-xyz")
    at.text_input(key="hf_token").input("hf_secret_value").run()
    clean(at)
    assert "hf_token" not in at.query_params and "hf_secret_value" not in json.dumps(dict(at.query_params))


def upload(at: AppTest, name: str, content: bytes) -> AppTest:
    at.radio(key="src").set_value("Upload").run()
    at.file_uploader(key="upload").upload(name, content, "application/json").run()
    return at


def test_upload_a_config():
    raw = (ROOT / "model_configs" / "Qwen__Qwen3-8B.json").read_bytes()
    at = upload(app(), "config.json", raw)
    clean(at)
    est = kvplan.estimate(kvplan.load_model(json.loads(raw)), 8192, 1)
    assert metric(at, "Exact bytes") == fmt_int(est.kv_cache_bytes)


def test_capacity_upload_without_a_context_says_what_to_do_in_the_apps_words():
    """An upload whose max_position_embeddings is no length has no context of its own to plan: the page says to
    switch to the sidebar's, and then plans it (Qwen3-8B's config with the field 0, at 8,192 tokens)."""
    data = json.loads((ROOT / "model_configs" / "Qwen__Qwen3-8B.json").read_bytes())
    data["max_position_embeddings"] = 0
    at = upload(app("app_pages/capacity.py"), "config.json", json.dumps(data).encode())
    clean(at)
    assert "switch off \"Model's context\" and set the context in the sidebar" in errors(at)
    assert "--" not in errors(at)
    at.toggle(key="ctxmodel").set_value(False).run()
    clean(at)
    p = plan(kvplan.load_model(data), gpu="H100-SXM", max_model_len=8192)
    assert metric(at, "KV cache tokens") == fmt_int(p.kv_cache_tokens)


@pytest.mark.parametrize("content, expected", [
    (b"{not json", "is not valid JSON"),
    (b"[1, 2, 3]", "not an object"),
    (b'{"model_type": "bert", "num_hidden_layers": 2}', "is an encoder"),
    (b'{"model_type": "llama", "num_hidden_layers": "x"}', "must be an integer"),
    (b'{"num_hidden_layers": 2}', "config has no num_heads"),
    (b"{" + b" " * (5 * 2**20) + b"}", "too large for a config.json"),
])
def test_bad_upload_gives_a_message(content, expected):
    at = upload(app(), "config.json", content)
    clean(at)
    assert expected in errors(at)


# ---------------------------------------------------------------------------------------------- compare


def test_compare_numbers_equal_strategies():
    at = app("app_pages/compare.py", ctx=16384, batch=2)
    clean(at)
    rows = strategies.compare(kvplan.load_model(LLAMA), 16384, 2, window=4096, sinks=4, fraction=0.5)
    table = at.table[0].value
    assert list(table["strategy"]) == [r.strategy for r in rows]
    assert list(table["on GPU"]) == [fmt_bytes(r.device_bytes) for r in rows]
    assert len(at.get("download_button")) == 2


@pytest.mark.parametrize("key, value, expected", [
    ("window", 0, "at least 2 tokens"),
    ("window", 1, "at least 2 tokens"),
    ("keep", 0.0, "keep fraction"),
])
def test_compare_bad_knobs(key, value, expected):
    at = app("app_pages/compare.py")
    widget = at.slider(key=key) if key == "keep" else at.number_input(key=key)
    widget.set_value(value).run()
    clean(at)
    assert expected in errors(at)


def test_compare_on_an_attention_free_model():
    at = app("app_pages/compare.py", model="state-spaces/mamba-2.8b-hf")
    clean(at)
    assert "n/a" in list(at.table[0].value["on GPU"])


# ---------------------------------------------------------------------------------------------- capacity


def test_capacity_numbers_equal_the_planner():
    at = app("app_pages/capacity.py", model="meta-llama/Llama-3.1-70B", ctxmodel="false", ctx=32768, n=4)
    clean(at)
    p = plan("meta-llama/Llama-3.1-70B", gpu="H100-SXM", num_gpus=4, max_model_len=32768)
    assert metric(at, "KV pool per GPU") == fmt_bytes(p.kv_pool_bytes)
    assert metric(at, "KV cache tokens") == fmt_int(p.kv_cache_tokens)
    assert f"Fits on 4 x H100-SXM" in at.success[0].value
    assert p.vllm_command in [c.value for c in at.code]
    fewest = deployable("meta-llama/Llama-3.1-70B", gpu="H100-SXM", max_model_len=32768).plan
    assert at.info[0].value.startswith(f"{fewest.num_gpus} x H100-SXM: TP {fewest.tensor_parallel_size} x PP 1")
    speed = sup.plan_speed(kvplan.load_model("meta-llama/Llama-3.1-70B"), p, 2048, 1)
    assert metric(at, "TTFT") == sup.fmt_seconds(speed.ttft_s)
    assert len(at.get("plotly_chart")) == 2 and len(at.get("download_button")) == 2


def test_capacity_engine_options_equal_the_planner():
    """Issue #11 in the app: the version, DP / EP, drafting and LoRA reach the plan, and the budget table shows
    each extra line (the CUDA-graph estimate, the draft's weights, the adapter slots)."""
    at = app("app_pages/capacity.py", model="deepseek-ai/DeepSeek-V3", gpu="H200", n=8, ctxmodel="false", ctx=32768,
             spec="MTP layers of the checkpoint", loras=0)
    clean(at)
    p = plan("deepseek-ai/DeepSeek-V3", gpu="H200", num_gpus=8, max_model_len=32768,
             speculative={"method": "mtp", "num_speculative_tokens": 1})
    assert metric(at, "KV cache tokens") == fmt_int(p.kv_cache_tokens)
    table = at.dataframe[0].value
    assert list(table["per GPU"]) == [k for k, _ in p.budget_lines()]
    assert "draft model weights" in set(table["per GPU"]) and "CUDA graphs (estimate)" in set(table["per GPU"])
    assert p.vllm_command in [c.value for c in at.code]
    lora = app("app_pages/capacity.py", model=LLAMA, ctxmodel="false", ctx=8192, loras=4, lorarank=16,
               ver_vllm="0.19.0")
    clean(lora)
    q = plan(LLAMA, gpu="H100-SXM", max_model_len=8192, engine_version="0.19.0",
             lora={"max_loras": 4, "max_lora_rank": 16})
    assert metric(lora, "KV pool per GPU") == fmt_bytes(q.kv_pool_bytes)
    assert "LoRA adapter slots" in set(lora.dataframe[0].value["per GPU"])
    dep = app("app_pages/capacity.py", model="Qwen/Qwen3-30B-A3B", n=2, dp=2, ep="true", ctxmodel="false", ctx=32768)
    clean(dep)
    r = plan("Qwen/Qwen3-30B-A3B", gpu="H100-SXM", num_gpus=2, dp=2, expert_parallel=True, max_model_len=32768)
    assert metric(dep, "KV pool per GPU") == fmt_bytes(r.kv_pool_bytes)
    wrong = app("app_pages/capacity.py", model=LLAMA, ctxmodel="false", ctx=8192, spec="MTP layers of the checkpoint")
    assert "declares no MTP layers" in errors(wrong) and "--" not in errors(wrong)


def test_capacity_workload_numbers_equal_workload_plan_and_the_hand_arithmetic():
    """Issue #26 (item 4): the "At your workload" metrics are kvplan.planning.workload's workload_plan for the page's
    plan and mix, and that figure is the hand arithmetic below (Llama-3.1-8B on one H100-SXM, vLLM 0.33, 8,192
    tokens, 2,000-token prompts and 500-token outputs at $2.50 per GPU-hour)."""
    from kvplan.planning.workload import RequestMix, workload_plan

    at = app("app_pages/capacity.py", model=LLAMA, ctxmodel="false", ctx=8192, wl_prompt=2000, wl_output=500,
             wl_price=2.5)
    clean(at)
    model = kvplan.load_model(LLAMA)
    p = plan(model, gpu="H100-SXM", num_gpus=1, max_model_len=8192)
    w = workload_plan(model, p, RequestMix(2000, 500), 2.5)
    shown = {m.label: m.value for m in at.metric}
    assert [shown[m.label] for m in sup.workload_metrics(w)] == [m.value for m in sup.workload_metrics(w)]
    # By hand. Concurrency: vLLM holds a 2,500-token request in cdiv(2,500, 16) = 157 blocks of the plan's pool
    # (its num_blocks, checked against vLLM logs in tests/test_vllm_*.py), below max_num_seqs 1,024.
    assert w.concurrent_requests == round(p.num_blocks / 157, 4) and p.num_blocks / 157 < 1024
    batch = int(p.num_blocks / 157)
    # One decode step reads the weights, 8,030,261,248 params x 2 B (transformers' count, tests/test_weights.py),
    # and the batch's KV, 32 layers x 2 x 8 heads x 128 x 2 B = 131,072 B a token x 2,500 tokens, at H100 SXM's
    # 3.35 TB/s (NVIDIA datasheet, data/gpus.json) x MBU 0.7.
    step_s = (8_030_261_248 * 2 + 131_072 * 2500 * batch) / (3.35e12 * 0.7)
    assert w.output_tokens_per_s == pytest.approx(batch / step_s, rel=1e-12)
    assert w.requests_per_s == pytest.approx(batch / step_s / 500, rel=1e-12)
    assert w.cost_per_million_output_tokens == pytest.approx(2.5 / (batch / step_s * 3600) * 1e6, rel=1e-12)
    # TTFT of one 2,000-token prompt: 2 x params x 2,000 + attention 32 layers x 2 x 32 heads x (128 + 128) x
    # 2,000^2 / 2 FLOPs at 989.5 dense bf16 TFLOP/s (datasheet, halved from sparsity) x MFU 0.5
    assert w.ttft_s == pytest.approx((2 * 8_030_261_248 * 2000 + 32 * 2 * 32 * 256 * 2000 ** 2 // 2)
                                     / (989.5e12 * 0.5), rel=1e-12)
    # the page shows the same figures, formatted
    assert shown["Requests at once"] == f"{p.num_blocks / 157:,.1f}"
    assert shown["Output tokens/s"] == f"{batch / step_s:,.0f}"
    assert shown["Requests/s"] == f"{batch / step_s / 500:,.2f}"
    assert shown["Cost per 1M output tokens"] == f"${2.5 / (batch / step_s * 3600) * 1e6:,.3f}"


def test_compare_setups_equal_kvplan_compare():
    """Issue #12 (item 7): two to four setups side by side; the table is kvplan.planning.compare's rows."""
    from kvplan.planning.compare import Setup, compare
    from kvplan.planning.workload import RequestMix

    at = app("app_pages/setups.py", ctxmodel="false", ctx=32768, cmp_n=2, cmp_m0="meta-llama/Llama-3.1-70B",
             cmp_g0="H100-SXM", cmp_c0=4, cmp_m1="Qwen/Qwen2.5-72B", cmp_g1="H200", cmp_c1=2)
    clean(at)
    rows = compare([Setup("meta-llama/Llama-3.1-70B", "H100-SXM", 4), Setup("Qwen/Qwen2.5-72B", "H200", 2)],
                   max_model_len=32768, mix=RequestMix(2000, 500))
    table = at.table[0].value
    assert list(table["model"]) == ["Llama-3.1-70B", "Qwen2.5-72B"]
    assert list(table["KV tokens"]) == [fmt_int(r.kv_cache_tokens) for r in rows]
    assert list(table["requests at the mix"]) == [f"{r.concurrent_requests:,.1f}" for r in rows]
    assert len(at.get("plotly_chart")) == 1
    bad = app("app_pages/setups.py", ctx=32768, cmp_n=2, cmp_m0="meta-llama/Llama-3.1-405B", cmp_g0="L4", cmp_c0=1)
    clean(bad)


def test_compare_setups_start_from_the_sidebar_and_the_cli_defaults():
    """Issue #24: the first setup is the sidebar's model (it ignored it), and every setup is planned at its
    model's own context length unless asked otherwise, as `kvplan compare` plans it."""
    from kvplan.planning.compare import compare

    at = app("app_pages/setups.py", model="Qwen/Qwen3-8B", cmp_n=2, cmp_m1=LLAMA, cmp_c0=1, cmp_c1=1)
    clean(at)
    assert at.selectbox(key="cmp_m0").value == sup.SIDEBAR_MODEL
    rows = compare(["Qwen/Qwen3-8B@H100-SXMx1", f"{LLAMA}@H100-SXMx1"])
    table = at.table[0].value
    assert list(table["model"]) == ["Qwen3-8B", "Llama-3.1-8B"]
    assert list(table["KV tokens"]) == [fmt_int(r.kv_cache_tokens) for r in rows]
    assert [r.max_model_len for r in rows] == [40_960, 131_072]   # Qwen3-8B's and Llama-3.1-8B's configs


def _cli_plan(argv: list[str]) -> dict:
    """`kvplan plan ... --json` run in-process, its JSON (exit 0 or 3)."""
    import contextlib
    import io

    from kvplan.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) in (0, 3)
    return json.loads(out.getvalue())


def test_capacity_defaults_equal_kvplan_plan():
    """Issue #24: the CLI planned Llama-3.1-8B at its 131,072-token context and the Capacity page at 8,192 (3.43x
    vs 54.88x), and the page's greyed slider said 0.90 while the plan used 0.92. Both now read
    kvplan.planning.defaults: the page with nothing chosen is `kvplan plan meta-llama/Llama-3.1-8B`, and says so."""
    at = app("app_pages/capacity.py")
    clean(at)
    cli = _cli_plan(["plan", LLAMA])
    assert cli["max_model_len"] == 131_072                      # Llama-3.1-8B's max_position_embeddings
    assert metric(at, "Max model length") == "131,072"
    assert metric(at, "KV cache tokens") == fmt_int(cli["kv_cache_tokens"])
    assert metric(at, "Max concurrency") == f"{cli['max_concurrency']:,.2f}x"
    # vLLM 0.33's default (vllm/config/cache.py gpu_memory_utilization: 0.92 since 0.20), greyed, as planned
    shown = at.slider[0]
    assert shown.disabled and shown.value == cli["gpu_memory_utilization"] == 0.92
    assert "kvplan plan meta-llama/Llama-3.1-8B" in [c.value for c in at.code]
    assert any(f"max_num_seqs {cli['max_num_seqs']:,}" in c.value for c in at.caption)


@pytest.mark.parametrize("params", [
    dict(engine="sglang", n=2, kvcache="fp8"),
    dict(ctxmodel="false", ctx=32768, gpu="H200", n=4, pp=2, ver_vllm="0.19.0", utildefault="false", util=0.85),
    dict(model="Qwen/Qwen3-30B-A3B", n=2, dp=2, ep="true", eager="true", nvls="false"),
    dict(spec="EAGLE-3 head", spect=3, loras=4, lorarank=32, kvcache="fp8_e5m2"),
])
def test_capacity_shows_the_cli_line_that_prints_its_plan(params):
    """The page's `kvplan plan` line, run, gives the page's tokens and concurrency."""
    import shlex

    at = app("app_pages/capacity.py", **params)
    clean(at)
    line = next(c.value for c in at.code if c.value.startswith("kvplan plan "))
    cli = _cli_plan(shlex.split(line)[1:])
    assert metric(at, "KV cache tokens") == fmt_int(cli["kv_cache_tokens"])
    assert metric(at, "Max concurrency") == f"{cli['max_concurrency']:,.2f}x"
    assert metric(at, "Max model length") == fmt_int(cli["max_model_len"])


def test_capacity_does_not_fit():
    at = app("app_pages/capacity.py", model="meta-llama/Llama-3.1-405B")
    clean(at)
    assert "Does not fit on 1 x H100-SXM" in errors(at)
    fixes = [i.value for i in at.info if i.value.startswith("To fit: ")]
    assert fixes and fixes[0].startswith("To fit: ") and not any("--" in f for f in fixes)  # the app's words


def test_capacity_sglang_equals_the_cli():
    """Issue #12: the app always sent 0.9 to SGLang where the CLI lets SGLang pick mem_fraction_static
    (gemma-3-27b on 8 x H100: 1,176,277 vs 1,309,202 tokens). Both now take the engine's own default."""
    at = app("app_pages/capacity.py", model="google/gemma-3-27b-it", engine="sglang", n=8, ctxmodel="false", ctx=8192)
    clean(at)
    p = plan("google/gemma-3-27b-it", engine="sglang", gpu="H100-SXM", num_gpus=8, max_model_len=8192)
    assert metric(at, "KV cache tokens") == fmt_int(p.kv_cache_tokens)
    assert p.vllm_command in [c.value for c in at.code]


def test_capacity_sglang():
    at = app("app_pages/capacity.py", engine="sglang")
    clean(at)
    assert any(c.value.startswith("python -m sglang.launch_server") for c in at.code)


@pytest.mark.parametrize("params, expected", [
    (dict(n=0), "num_gpus must be a positive"),
    (dict(n=3), "which TP 3 does not divide"),
    (dict(n=2, tp="4"), "not the 2 asked for"),
    (dict(pp=0), "pipeline parallel size must be"),
    (dict(utildefault="false", util=0.0), "gpu_memory_utilization must be in (0, 1]"),
])
def test_capacity_bad_settings(params, expected):
    at = app("app_pages/capacity.py", **params)
    clean(at)
    assert expected in errors(at)


def test_capacity_speed_zero_prompt_is_a_warning():
    at = app("app_pages/capacity.py", ttft_prompt=0)
    clean(at)
    assert "at least 1 token" in " ".join(w.value for w in at.warning)


def test_capacity_says_where_the_weights_come_from():
    """A vision model: the tower's split and the rule named; 'Language model only' drops the tower and the
    command gains vLLM's flag; a model with a bundled checkpoint total shows it beside the rule."""
    model = "google/gemma-3-27b-it"
    at = app("app_pages/capacity.py", model=model, ctxmodel="false", ctx=8192)
    clean(at)
    captions = " | ".join(c.value for c in at.caption)
    assert "Weights follow kvplan's rule for the config" in captions
    assert f"vision tower {fmt_bytes(416_866_032 * 2)}" in captions  # SigLIP's 416,866,032 parameters, bf16
    whole = plan(model, gpu="H100-SXM", max_model_len=8192)
    at.toggle(key="textonly").set_value(True).run()
    clean(at)
    text = plan(model, gpu="H100-SXM", max_model_len=8192, language_model_only=True)
    assert metric(at, "KV pool per GPU") == fmt_bytes(text.kv_pool_bytes) != fmt_bytes(whole.kv_pool_bytes)
    assert text.vllm_command in [c.value for c in at.code] and "--language-model-only" in text.vllm_command
    gpt = app("app_pages/capacity.py", model="openai/gpt-oss-20b", ctxmodel="false", ctx=8192)
    clean(gpt)
    assert f"The published checkpoint holds {fmt_bytes(13_761_264_768)}" in " | ".join(c.value for c in gpt.caption)
    assert "--" not in " ".join(c.value for c in gpt.caption)  # the app's words, not CLI flags


def test_capacity_shows_the_plans_own_warnings():
    """A context past the model's limit (Llama-2-7b at 32,768: 4,096) is a warning on the page, and the command
    carries the variable vLLM needs; the fewest-GPU box says when its layout spans nodes."""
    at = app("app_pages/capacity.py", model="meta-llama/Llama-2-7b-hf", ctxmodel="false", ctx=32768)
    clean(at)
    assert any("past meta-llama/Llama-2-7b-hf's context limit of 4,096" in w.value for w in at.warning)
    assert any(c.value.startswith("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve") for c in at.code)
    big = app("app_pages/capacity.py", model="Qwen/Qwen2.5-72B", gpu="L4", ctxmodel="false", ctx=131072)
    clean(big)
    # issue #24: the deployable layout (TP 8 x PP 2 over two whole nodes), the fewest in any layout beside it
    assert any(i.value.startswith("16 x L4: TP 8 x PP 2 (2 x 8-GPU nodes)") for i in big.info)
    assert any(c.value.startswith(":material/hub: Fewest GPUs in any layout: 10 (TP 2 x PP 5") for c in big.caption)


def test_capacity_unknown_gpu_in_url_is_ignored():
    at = app("app_pages/capacity.py", gpu="no-such-gpu")
    clean(at)
    assert at.selectbox(key="gpu").value == "H100-SXM"


# ---------------------------------------------------------------------------------------------- validation, learn


def test_validation_without_results(monkeypatch, tmp_path):
    monkeypatch.setattr(sup, "ROOT", tmp_path)
    at = app("app_pages/validation.py")
    clean(at)
    assert [i.value for i in at.info if "No harness results yet" in i.value]
    assert [i.value for i in at.info if "No results yet" in i.value]


HARNESS_REPORT = {  # the shape validation/report.py writes
    "environment": {"device": "cuda", "gpu": "NVIDIA H200", "torch": "2.13.0", "transformers": "5.24.0",
                    "kvplan": "0.1.0", "cuda": "12.8"},
    "suites": ["gpu"],
    "cases": [
        {"id": "a", "model": "llama-3.1-8b", "source": LLAMA, "cache": "dynamic", "kv_dtype": None, "dtype": "bfloat16",
         # inputs, a fake harness record: 4,095 tokens x 131,072 B (Llama-3.1-8B, bf16) = 536,739,840
         "seq_len": 4095, "batch_size": 1, "predicted_kv_bytes": 536739840, "measured_kv_bytes": 536739840,
         "status": "ok"},
        {"id": "b", "model": "llama-3.1-8b", "source": LLAMA, "cache": "static", "kv_dtype": None, "dtype": "bfloat16",
         # inputs: a static cache of 4,096 tokens x 131,072 B + 32 int64 counters = 536,871,168
         "seq_len": 4095, "batch_size": 1, "predicted_kv_bytes": 536871168, "measured_kv_bytes": 536871168,
         "status": "ok"},
        {"id": "c", "model": "llama-3.1-8b", "source": LLAMA, "cache": "quantized", "status": "skipped",
         "predicted_kv_bytes": 1, "measured_kv_bytes": None},
    ],
}


def test_validation_with_results(monkeypatch, tmp_path):
    results = tmp_path / "validation" / "results" / "h200-run"
    results.mkdir(parents=True)
    (results / "report.json").write_text(json.dumps(HARNESS_REPORT))
    (tmp_path / "validation" / "vllm_calibration.csv").write_bytes(
        (ROOT / "validation" / "vllm_calibration.csv").read_bytes())
    monkeypatch.setattr(sup, "ROOT", tmp_path)
    at = app("app_pages/validation.py")
    clean(at)
    runs, frames = at.table[0].value, [d.value for d in at.dataframe]   # the runs table is static: it wraps
    assert list(runs["device"]) == ["NVIDIA H200"] and "torch 2.13.0" in runs["versions"].iloc[0]
    assert list(frames[0]["cache"]) == ["dynamic", "static"] and list(frames[0]["exact"]) == [1, 1]
    assert len(at.get("plotly_chart")) == 2


def test_validation_calibration_summary():
    at = app("app_pages/validation.py")
    clean(at)
    frame = val.read_calibration(ROOT / "validation" / "vllm_calibration.csv")
    shown = next(d.value for d in at.dataframe if "metric" in d.value.columns and "rows" in d.value.columns)
    assert shown.equals(val.calibration_summary(frame))
    at.selectbox(key="vmetric").set_value("tokens").run()
    clean(at)


@pytest.mark.parametrize("index, name, metric", [(1, "vllm_holdout_results.csv", "pool"),
                                                  (2, "sglang_calibration_results.csv", "tokens")])
def test_validation_other_start_up_sets(index, name, metric):
    """The published start-ups kvplan was not fitted on (vLLM) and SGLang's: the same summary and chart."""
    at = app("app_pages/validation.py")
    clean(at)
    label = list(at.selectbox(key="vset").options)[index]
    at.selectbox(key="vset").set_value(label).run()
    clean(at)
    frame = val.read_calibration(ROOT / "validation" / name)
    shown = next(d.value for d in at.dataframe if "metric" in d.value.columns and "rows" in d.value.columns)
    assert shown.equals(val.calibration_summary(frame)) and len(frame) > 10
    assert at.selectbox(key=f"vmetric{index}").value == metric
    assert any(f"({len(frame[frame['metric'] == metric])} start-ups)" in str(c.proto.spec)
               for c in at.get("plotly_chart"))


def test_learn_llama2_70b_table(monkeypatch, tmp_path):
    monkeypatch.setattr(sup, "ROOT", tmp_path)  # no harness results there
    at = app("app_pages/learn.py")
    clean(at)
    table = at.dataframe[0].value
    # the Learn page's contexts (app_pages/support.py LEARN_CONTEXTS): inputs
    assert list(table["tokens"]) == [100, 1_000, 4_000, 8_192]
    model = kvplan.load_model("meta-llama/Llama-2-70b-hf")
    for n, real, naive in zip(table["tokens"], table["real bytes"], table["naive MHA bytes"]):
        assert real == kvplan.estimate(model, int(n), 1, "fp16").kv_cache_bytes
        assert naive == 8 * real
    text = " ".join(m.value for m in at.markdown)
    assert "1,342,177,280 B" in text and "8x" in text
    assert "has not run yet" in " ".join(i.value for i in at.info)


def test_learn_space_for_time_results(monkeypatch, tmp_path):
    run = tmp_path / "validation" / "results" / "cpu-run"
    run.mkdir(parents=True)
    (run / "space_for_time.json").write_text(json.dumps({
        "benchmark": "space-for-time", "environment": {"device": "cpu", "torch": "2.13.0", "transformers": "5.24.0"},
        "model": {"model_type": "gpt2", "n_layer": 6, "n_embd": 256, "n_head": 4, "params": 2_000_000},
        "points": [{"context": 32, "cached_s": 0.001, "recompute_s": 0.002, "kv_bytes": 196608, "speedup": 2.0},
                   {"context": 64, "cached_s": 0.001, "recompute_s": 0.004, "kv_bytes": 393216, "speedup": 4.0}],
        "fits": {"cached_per_token_exponent": 0.1, "recompute_per_token_exponent": 1.02}}))
    monkeypatch.setattr(sup, "ROOT", tmp_path)
    at = app("app_pages/learn.py")
    clean(at)
    assert "grows as L^1.02" in " ".join(c.value for c in at.caption)
    assert list(at.dataframe[-1].value["context"]) == [32, 64]
    assert len(at.get("plotly_chart")) == 3


# ---------------------------------------------------------------------------------------------- recommend


def test_recommend_page_equals_the_api():
    """Issue #24: the Recommend page shows what `kvplan recommend` finds for the sidebar's model and workload."""
    from kvplan.planning.recommend import recommend
    from kvplan.planning.workload import RequestMix

    at = app("app_pages/recommend.py", model="meta-llama/Llama-3.1-8B", rc_tpot=30, rc_ttft=200)
    clean(at)
    found = recommend("meta-llama/Llama-3.1-8B", RequestMix(2000, 500), 10.0, tpot_s=0.030, ttft_s=0.200)
    best = found.cheapest[0]
    assert at.success[0].value.startswith("Cheapest: ") and f"${best.cost_per_hour:,.2f} per hour" in at.success[0].value
    assert best.command in [c.value for c in at.code]
    assert list(at.dataframe[0].value["GPU"]) == [s.gpu for s in found.cheapest]
    assert list(at.dataframe[1].value["GPU"]) == [s.gpu for s in found.pareto]
    assert len(at.get("plotly_chart")) == 1


def test_recommend_page_says_when_nothing_meets_the_targets():
    at = app("app_pages/recommend.py", rc_tpot=1, rc_budget=1)
    clean(at)
    assert at.error and at.error[0].value.startswith("No priced catalog GPU")


def test_recommend_page_takes_prices():
    """A price typed on the page ranks a GPU the catalog has none for (L40S), as --gpu-price does."""
    at = app("app_pages/recommend.py", rc_prices="L40S=0.05")
    clean(at)
    assert at.success[0].value.startswith("Cheapest: ") and "L40S" in at.success[0].value


def test_capacity_shows_the_expert_parallel_alternative():
    """Issue #24: DeepSeek-V3 on H100s: TP 8 x PP 2, and beside it the TP x DP layout with EP that holds more."""
    at = app("app_pages/capacity.py", model="deepseek-ai/DeepSeek-V3", ctx=163840)
    clean(at)
    ep = deployable("deepseek-ai/DeepSeek-V3", gpu="H100-SXM", max_model_len=163840).summary()[
        "expert_parallel_alternative"]
    assert any(i.value.startswith("16 x H100-SXM: TP 8 x PP 2 (2 x 8-GPU nodes)") for i in at.info)
    assert any(f"Expert parallel on the same 16 GPUs: {ep['layout']} holds {ep['total_concurrency']:,.2f}x" in c.value
               for c in at.caption)
@pytest.mark.parametrize("page", ["app_pages/estimate.py", "app_pages/capacity.py"])
def test_a_partial_bundled_copy_says_what_it_lacks(page):
    """A bundled config that is not the Hub file verbatim: a note where no figure moves (falcon-7b-instruct's older
    revision), a warning where one does, on every page."""
    from kvplan.sources.library import partial_copies

    # Maverick's trimmed copy was the one that warned; its assembled copy counts the tower, so no bundled partial
    # copy moves a figure today and only a warned one (if any is added) is checked as a warning
    warned = [(m, "warning") for m, gap in sorted(partial_copies().items()) if gap.warn][:1]
    for model_id, shown in (("tiiuae/falcon-7b-instruct", "caption"), *warned):
        at = app(page, model=model_id, ctx=2048)
        clean(at)
        said = partial_copies()[model_id].sentence(model_id)
        assert any(said[1:] in e.value for e in getattr(at, shown)), (model_id, shown)
