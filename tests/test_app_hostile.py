"""Issue #14 in the web app: a hostile URL, huge numbers or an absurd upload give a message in the app's words,
never a traceback or a server path (Streamlit's AppTest, the real pages)."""

from __future__ import annotations

import json
import logging

import pytest
from streamlit.testing.v1 import AppTest
from test_app import APP, LLAMA, PAGES, ROOT, app, clean, errors, metric, upload  # noqa: F401

pytestmark = pytest.mark.usefixtures("offline_app")  # tests/conftest.py: fresh Streamlit cache, Hub offline

import kvplan
from app_pages import common
from app_pages import support as sup
from kvplan.units import fmt_int

PAGE_KEYS = {  # the integer widgets each page reads from the URL, the sidebar's on every page
    "app_pages/estimate.py": ("ctx", "batch", "maxlen", "prompt"),
    "app_pages/compare.py": ("ctx", "batch", "window", "sinks"),
    "app_pages/capacity.py": ("ctx", "batch", "n", "pp", "ttft_prompt", "dp", "spect", "loras", "lorarank",
                              "wl_prompt", "wl_output"),
    "app_pages/setups.py": ("ctx", "batch", "cmp_n", "cmp_c0", "cmp_c1", "wl_prompt", "wl_output"),
    "app_pages/validation.py": ("ctx", "batch"),
    "app_pages/learn.py": ("ctx", "batch"),
}
HOSTILE = ("inf", "-inf", "1e400", "nan", "1e20", "abc")


def open_page(page: str, **params) -> AppTest:
    """A visitor opening `page` with these URL parameters (a first load, as a shared link is)."""
    at = AppTest.from_file(APP, default_timeout=30)
    for key, value in params.items():
        at.query_params[key] = str(value)
    if page != PAGES[0]:
        at.switch_page(page)
    return at.run()


def warnings(at) -> str:
    return " | ".join(w.value for w in at.warning)


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("page", PAGES)
def test_hostile_url_numbers_fall_back_to_defaults(page, value):
    """Streamlit's number_input raised 'cannot convert float infinity to integer' from inside its URL binding."""
    keys = PAGE_KEYS[page]
    at = open_page(page, **{key: value for key in keys})
    clean(at)
    shown = warnings(at)
    for key in keys:
        what, low, high, default = common.INT_PARAMS[key]
        assert f"The link's {what} ({value!r}) is not a whole number from {low:,} to {high:,}, so the default " \
               f"{default:,} is used." in shown
        assert key not in at.query_params
    assert "--" not in shown and "Traceback" not in shown  # the app's words, never a flag name


# raw URL text and the integer it must read as (or None: refused): inputs and their parse, by hand
@pytest.mark.parametrize("raw, expected", [("4096", 4096), ("4.096e3", 4096), (" 7 ", 7), ("+5", 5),
                                           ("2.5", None), ("-1", None), ("1e400", None), ("nan", None),
                                           ("9" * 5000, None), ("0x10", None), ("", None)])
def test_whole_number(raw, expected):
    assert common.whole_number(raw, 0, 10**15) == expected


def test_url_value_in_canonical_form_is_used():
    at = app(ctx="1.6384e4")
    clean(at)
    assert not at.warning and at.query_params["ctx"] == "16384"
    assert metric(at, "Exact bytes") == fmt_int(kvplan.estimate(LLAMA, 16384, 1).kv_cache_bytes)


@pytest.mark.parametrize("page", PAGES)
def test_huge_workload_never_overflows_a_table(page):
    """10^12 tokens x 10^5 sequences of Llama-3.1-8B is 1.3e22 bytes: past int64, which Arrow cannot hold."""
    at = open_page(page, ctx=10**12, batch=100_000)
    clean(at)
    assert "could not be shown" not in errors(at)
    if page == PAGES[0]:
        est = kvplan.estimate(LLAMA, 10**12, 100_000)
        assert list(at.dataframe[0].value["bytes"]) == [fmt_int(g.bytes) for g in est.groups]


@pytest.mark.parametrize("page, field, value", [
    ("app_pages/estimate.py", "head_dim", 10**18),
    ("app_pages/capacity.py", "head_dim", 10**18),
    ("app_pages/compare.py", "head_dim", 10**18),
    # hostile config values (inputs), not expected figures
    ("app_pages/learn.py", "hidden_size", 1e300),
    ("app_pages/estimate.py", "hidden_size", 1e300),
])
def test_absurd_upload_is_a_message(page, field, value):
    raw = json.loads((ROOT / "model_configs" / "meta-llama__Llama-3.1-8B.json").read_text())
    at = upload(app(), "config.json", json.dumps({**raw, field: value}).encode())
    if page != PAGES[0]:
        at.switch_page(page).run()
    clean(at)
    assert "could not be shown" not in errors(at)


def test_arrow_safe_formats_only_columns_past_int64():
    frame = sup.arrow_safe(sup.pd.DataFrame({"big": [1, 2**70], "small": [1, 2], "text": ["a", "b"]}))
    assert list(frame["big"]) == ["1", fmt_int(2**70)] and list(frame["small"]) == [1, 2]


@pytest.mark.parametrize("page", PAGES)
def test_unforeseen_error_is_one_sentence_and_logged(page, monkeypatch, caplog):
    """The last guard (common.run_page): whatever a page raises, the visitor sees no traceback, no server path."""
    def broken(*args, **kwargs):
        raise RuntimeError(f"boom in {ROOT}/kvplan/secret.py")

    monkeypatch.setattr(common, "header", broken)
    with caplog.at_level(logging.ERROR, logger="kvplan.app"):
        at = open_page(page)
    clean(at)
    assert errors(at) == ("This page could not be shown for these settings (the error is in the server's log): "
                          "try other settings, and please report it.")
    assert str(ROOT) not in json.dumps([e.value for e in at.error])
    assert "boom in" in caplog.text


MALFORMED_QUANT = [  # issue #14 item 3: each reached the Capacity and Learn pages as a traceback once
    {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": "int4", "targets": ["Linear"]}}},
    {"quant_method": "gptq", "bits": 4, "group_size": 128, "modules_to_not_convert": 5},
    {"quant_method": "fp8", "weight_block_size": 5},
    {"quant_method": "awq", "bits": 4, "modules_to_not_convert": ["model.layers." + "9" * 5000 + ".mlp"]},
]


@pytest.mark.parametrize("quant", MALFORMED_QUANT, ids=["scheme-string", "skip-5", "block-5", "huge-index"])
@pytest.mark.parametrize("page", ["app_pages/capacity.py", "app_pages/learn.py"])
def test_malformed_quantization_config_on_capacity_and_learn(page, quant):
    """A malformed quantization_config uploaded: the page says what it cannot read, in a sentence, or plans
    without it; never the last guard's 'could not be shown' and never a traceback."""
    raw = json.loads((ROOT / "model_configs" / "meta-llama__Llama-3.1-8B.json").read_text())
    at = upload(app(), "config.json", json.dumps({**raw, "quantization_config": quant}).encode())
    at.switch_page(page).run()
    clean(at)
    shown = errors(at)
    assert "could not be shown" not in shown and "Traceback" not in shown and str(ROOT) not in shown
    if page.endswith("capacity.py"):  # the plan prices the quantized weights: it says what it cannot read
        assert "quantization" in shown and shown.count(". ") <= 1, shown
    else:  # Learn explains the cache with the model's KV figures, which no quantization_config changes
        assert len(at.markdown) > 3 and not at.error


def test_pages_speak_in_their_own_words():
    """Issue #12: "add --cache quantized" on the Estimate page and "use --cache dynamic or static" in Compare's
    table. kvplan's messages name CLI flags; the pages name their own settings."""
    at = open_page(PAGES[0], kv="int4", cache="dynamic")
    clean(at)
    assert "choose the quantized cache" in errors(at) and "--" not in errors(at)
    compare = open_page("app_pages/compare.py", model="google/gemma-2-9b", ctx=8192)
    clean(compare)
    cells = [str(v) for table in compare.table for v in table.value.to_numpy().ravel()]
    assert cells and not any("--" in c for c in cells)
    assert sup.app_words("leave out --tp and pass --head-dim N") == ('leave out the "tp" setting and pass the '
                                                                     '"head dim" setting')


def test_capacity_runs_the_fewest_gpu_search_once_per_rerun(monkeypatch):
    """Issue #25: for a plan that does not fit, the page searched twice (its fixes and its fewest-GPU section), and
    a 10,000-layer config took 57-124 s a rerun. One search now serves both, with the same answer (issue #24: the
    deployable layout, whose search runs fewest_gpus once for the count beside it)."""
    from kvplan.planning import layouts

    calls = []
    real = layouts.fewest_gpus

    def counting(*args, **kwargs):
        calls.append(kwargs.get("gpu"))
        return real(*args, **kwargs)

    monkeypatch.setattr(layouts, "fewest_gpus", counting)
    at = app("app_pages/capacity.py", model="meta-llama/Llama-3.1-70B", ctxmodel="false", ctx=32768, n=1)
    clean(at)
    assert len(calls) == 1, calls
    fix = layouts.deployable("meta-llama/Llama-3.1-70B", gpu="H100-SXM", max_model_len=32768).plan
    shown = [i.value for i in at.info]
    assert any(v.startswith(f"To fit: {fix.num_gpus} x H100-SXM (TP {fix.tensor_parallel_size}") for v in shown)
    assert any(v.startswith(f"{fix.num_gpus} x H100-SXM: TP {fix.tensor_parallel_size}") for v in shown)
