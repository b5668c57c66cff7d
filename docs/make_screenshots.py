"""Screenshots of every page of the web app, for the README: `python docs/make_screenshots.py [OUT_DIR]`.

Serves `app.py` headless on a free loopback port, drives Debian's Chromium with Playwright (no browser download:
`apt-get install chromium fonts-liberation`, never `playwright install`) and writes one PNG per page to
docs/screenshots/ (or OUT_DIR). tests/test_browser.py uses the same helpers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-headless-shell", "/usr/bin/chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# (file name, URL path and query, text the page must show once rendered)
PAGES = (
    ("estimate.png", "?model=google/gemma-2-9b&ctx=32768&gpus=H100-SXM&gpus=L40S&gpus=RTX-4090",
     "Layer groups"),
    ("compare.png", "compare?model=meta-llama/Llama-3.1-8B&ctx=32768", "MHA baseline"),
    ("capacity.png", "capacity?model=meta-llama/Llama-3.1-70B&ctxmodel=false&ctx=32768&n=4", "Fewest GPUs that fit"),
    ("capacity-vision.png", "capacity?model=google/gemma-3-27b-it&ctxmodel=false&ctx=8192", "Split: language model"),
    ("capacity-sglang.png", "capacity?model=Qwen/Qwen3-32B&engine=sglang&n=2", "reserve (1 - mem_fraction_static)"),
    ("setups.png", "setups", "Requests the KV pool holds at once"),
    ("recommend.png", "recommend?model=meta-llama/Llama-3.1-8B&rc_tpot=30&rc_ttft=200", "GPUs without a price"),
    ("validation.png", "validation", "Serving engines"),
    ("learn.png", "learn?model=meta-llama/Llama-3.1-8B&ctx=8192", "LLaMA-2-70B"),
)


def find_chromium() -> str | None:
    for path in CHROMIUM_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("chromium") or shutil.which("chromium-headless-shell")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(port: int | None = None, timeout_s: float = 60.0):
    """`streamlit run app.py` on 127.0.0.1:<port>; yields the base URL once /_stcore/health answers ok."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited early: {proc.stderr.read().decode(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not answer on {base} within {timeout_s:.0f} s")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def open_page(page, url: str, text: str, timeout_ms: int = 60_000) -> str:
    """Load `url`, wait for the script run to finish and `text` to appear; returns the page's visible text."""
    page.goto(url, wait_until="networkidle", timeout=timeout_ms)
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout_ms)
    page.get_by_text(text, exact=False).first.wait_for(timeout=timeout_ms)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=timeout_ms)
    # plotly draws after the script run ends: wait until every chart has its SVG
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')]"
                           ".every(e => e.querySelector('.main-svg'))", timeout=timeout_ms)
    # the first page a fresh server sends still lazy-loads the table and chart code: its elements show grey
    # skeletons (stSkeleton) until it arrives, which an early screenshot caught as a blank page
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stSkeleton\"]')", timeout=timeout_ms)
    page.wait_for_timeout(800)
    return page.inner_text("body")


def screenshot(page, out: Path, width: int = 1400) -> None:
    # Streamlit scrolls inside stMain, so grow the viewport to the content before a full-page shot
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": width, "height": max(900, int(height))})
    page.wait_for_timeout(700)
    page.screenshot(path=str(out), full_page=True, timeout=90_000)
    page.set_viewport_size({"width": width, "height": 900})


def launch(playwright, executable: str):
    return playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0]) if argv else ROOT / "docs" / "screenshots"
    out_dir.mkdir(parents=True, exist_ok=True)
    executable = find_chromium()
    if executable is None:
        print("no chromium binary: apt-get install -y --no-install-recommends chromium fonts-liberation",
              file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    with serve() as base, sync_playwright() as p:
        browser = launch(p, executable)
        page = browser.new_page(viewport={"width": 1400, "height": 900}, device_scale_factor=1)
        for name, path, text in PAGES:
            started = time.perf_counter()
            open_page(page, f"{base}/{path}", text)
            screenshot(page, out_dir / name)
            print(f"{out_dir / name}  ({time.perf_counter() - started:.1f} s)")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
