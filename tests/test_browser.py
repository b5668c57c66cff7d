"""The web app in a real browser: `streamlit run app.py` headless on loopback, Debian's Chromium driven by
Playwright. Each page must render its key text without an exception box; screenshots go to a temp folder.

Skipped, with the reason, where there is no Chromium binary (`apt-get install chromium fonts-liberation`;
never `playwright install`) or no playwright package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("make_screenshots", ROOT / "docs" / "make_screenshots.py")
shots = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shots)

CHROMIUM = shots.find_chromium()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install -y --no-install-recommends "
                                                "chromium fonts-liberation)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="playwright is not installed"),
]

# (URL path and query, texts that must all be visible)
CHECKS = (
    ("", ("Charts", "Estimate", "KV cache (GiB", "1.00 GiB", "1,073,741,824", "Layer groups", "Formula, with the config")),
    ("?model=google/gemma-2-9b&ctx=32768", ("6,341,787,816", "sliding")),
    ("?ctx=0", ("seq_len must be between 1",)),
    ("?ctx=inf&kv=x", ("is not a whole number", "Layer groups")),
    ("?src=Hub&hub=not%20an%20id", ("is not a Hub id",)),
    ("compare?ctx=8192", ("What each strategy means", "Compare strategies", "MHA baseline", "4.00 GiB", "offload to host memory")),
    ("capacity?model=meta-llama/Llama-3.1-70B&ctxmodel=false&ctx=32768&n=4",
     ("Fits on 4 x H100-SXM", "Fewest GPUs that fit", "vllm serve meta-llama/Llama-3.1-70B")),
    ("capacity?model=google/gemma-3-27b-it&ctxmodel=false&ctx=8192",
     ("Split: language model", "vision tower", "Weights follow kvplan's rule for the config", "Language model only",
      "include the engine's RoPE cos/sin tables")),
    ("capacity?model=deepseek-ai/DeepSeek-V3&gpu=H200&ctxmodel=false&ctx=32768&n=8"
     "&spec=MTP%20layers%20of%20the%20checkpoint",
     ("Fits on 8 x H200", "draft model weights", "CUDA graphs (estimate)", "At your workload",
      "Cost per 1M output tokens")),
    ("capacity?model=Qwen/Qwen3-32B&engine=sglang&n=2", ("reserve (1 - mem_fraction_static)", "Model's context",
                                                         "kvplan plan Qwen/Qwen3-32B --engine sglang --num-gpus 2")),
    ("setups?ctx=32768", ("Compare setups", "Model 2", "GPU 3", "requests at the mix", "$ / 1M output",
                          "Models' contexts", "Requests the KV pool holds at once")),
    ("recommend?model=meta-llama/Llama-3.1-8B", ("Recommend", "Cheapest: 2 replicas of 1 x GH200", "Pareto front",
                                                 "GPUs without a price", "vllm serve meta-llama/Llama-3.1-8B")),
    ("validation", ("Every start-up", "Serving engines", "Start-ups", "kv_pool: predicted vs measured")),
    ("learn", ("Space for time, measured", "Prefill, then decode", "LLaMA-2-70B", "1,342,177,280 B")),
)


@pytest.fixture(scope="module")
def browser_page():
    from playwright.sync_api import sync_playwright

    with shots.serve() as base, sync_playwright() as p:
        browser = shots.launch(p, CHROMIUM)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        yield base, page
        browser.close()


@pytest.mark.parametrize("path, texts", CHECKS, ids=[c[0] or "estimate" for c in CHECKS])
def test_page_in_chromium(browser_page, tmp_path, path, texts):
    base, page = browser_page
    body = shots.open_page(page, f"{base}/{path}", texts[0])
    for text in texts:
        if text not in body:  # Streamlit renders progressively: give late elements (metrics) time to land
            try:
                page.get_by_text(text, exact=False).first.wait_for(timeout=20_000)
            except Exception:
                pass
            body = page.inner_text("body")
        assert text in body, f"{text!r} missing from /{path}"
    assert page.locator('[data-testid="stException"]').count() == 0, "a traceback reached the page"
    assert "Page not found" not in body
    out = tmp_path / "page.png"
    shots.screenshot(page, out)
    # a floor that says a page was drawn (not a kvplan figure)
    # 20 KB: a floor for a drawn page's PNG, not a kvplan figure
    assert out.stat().st_size > 20_000
