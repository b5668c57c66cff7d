"""What every page shares: the sidebar (model and workload), cached loaders, and error handling.

Layout only: numbers come from kvplan. Every widget that describes a plan has a key bound to the URL
(`bind="query-params"`), so a page's URL reproduces what it shows. The Hub token is never bound, cached
or logged.
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
from contextlib import contextmanager

import streamlit as st

import kvplan
from app_pages import support as sup
from kvplan.errors import KVPlanError
from kvplan.gpus import list_gpus

SOURCES = ("Bundled", "Hub", "Upload")  # the labels are the URL values: ?src=Hub
URL = "query-params"
log = logging.getLogger("kvplan.app")


# ---------------------------------------------------------------------------------------------- loaders


@st.cache_data(show_spinner=False, max_entries=256)
def load_bundled(model_id: str):
    return kvplan.load_model(model_id)


@st.cache_data(show_spinner="Fetching config.json from the Hugging Face Hub...", max_entries=64, ttl=3600)
def load_hub(repo_id: str, token_key: str, _token: str | None = None):
    # `_token` stays out of the cache key (and so is never stored); `token_key` (token_identity) keeps every token's
    # results apart, so a gated config one visitor's token fetched is never served to another token or to none
    return sup.load_hub_model(repo_id, _token)


_TOKEN_SALT = secrets.token_bytes(16)  # per server process: the key cannot be matched to a token elsewhere


def token_identity(token: str | None) -> str:
    """A cache key for a token that is not the token: a salted SHA-256, '' for no token."""
    return hashlib.sha256(_TOKEN_SALT + token.encode("utf-8", "surrogatepass")).hexdigest() if token else ""


@st.cache_data(show_spinner=False, max_entries=32)
def load_upload(raw: bytes, filename: str):
    return sup.load_uploaded_config(raw, filename)


@st.cache_data(show_spinner=False)
def model_options() -> list[str]:
    return sup.model_options()


@st.cache_data(show_spinner=False)
def gpu_names() -> list[str]:
    return [g.name for g in list_gpus()]


# ---------------------------------------------------------------------------------------------- errors


@contextmanager
def guard(what: str = "kvplan"):
    """Turn kvplan's errors into a red message and stop the page: a visitor never sees a traceback."""
    try:
        yield
    except KVPlanError as exc:
        st.error(f"{what}: {sup.app_words(str(exc))}", icon=":material/error:")
        st.stop()
    except (ValueError, TypeError, KeyError, OverflowError, ArithmeticError, RecursionError) as exc:
        log.exception("unexpected error in %s", what)
        st.error(f"{what}: kvplan could not handle this input ({exc.__class__.__name__}: {exc}). "
                 "Try other settings, and please report it.", icon=":material/bug_report:")
        st.stop()


def message(fn, *args, **kwargs):
    """(result, None) or (None, message) for a call whose failure should not stop the page."""
    try:
        return fn(*args, **kwargs), None
    except KVPlanError as exc:
        return None, sup.app_words(str(exc))
    except (ValueError, TypeError, KeyError, OverflowError, ArithmeticError, RecursionError) as exc:
        log.exception("unexpected error")
        return None, f"kvplan could not handle this input ({exc.__class__.__name__}: {exc})"


# ---------------------------------------------------------------------------------------------- the URL

# Every integer widget bound to the URL: key -> (what the page calls it, min, max, default). The pages take their
# limits from here (`bounds`), so what the URL is checked against is what the widget accepts.
INT_PARAMS = {
    "ctx": ("context", 0, 10**15, 8192), "batch": ("batch", 0, 2**30, 1),
    "maxlen": ("static cache length", 0, 10**15, 0), "prompt": ("prompt length", 0, 10**15, 0),
    "window": ("sliding window", 0, 10**12, 4096), "sinks": ("attention sinks", 0, 1 << 20, 4),
    "n": ("GPU count", 0, 1024, 1), "pp": ("pipeline stages", 0, 256, 1),
    "ttft_prompt": ("prompt length for the speed estimate", 0, 10**12, 2048),
    "dp": ("data-parallel size", 1, 64, 1), "spect": ("draft tokens", 1, 64, 1),
    "loras": ("LoRA slots", 0, 1024, 0), "lorarank": ("LoRA rank", 1, 4096, 16),
    "wl_prompt": ("mean prompt", 1, 10**9, 2000), "wl_output": ("mean output", 1, 10**9, 500),
    "cmp_n": ("number of setups", 2, 4, 3), "cmp_gpus": ("GPU count", 1, 1024, 4),
    **{f"cmp_c{i}": ("GPU count", 1, 1024, 4) for i in range(4)},
    # the Recommend page: 0 is "no target" / "no p95"
    "rc_pp95": ("p95 prompt", 0, 10**9, 0), "rc_op95": ("p95 output", 0, 10**9, 0),
    "rc_ttft": ("TTFT target", 0, 10**7, 0), "rc_tpot": ("TPOT target", 0, 10**7, 0),
    "rc_budget": ("budget", 0, 10**7, 0),
}


def bounds(key: str) -> dict:
    _, low, high, default = INT_PARAMS[key]
    return {"min_value": low, "max_value": high, "value": default}


def clean_url() -> list[str]:
    """Check the URL's integer values before any widget reads them (Streamlit's number_input raises on `inf`):
    a finite whole number within the widget's limits stays, in canonical form; anything else is dropped, so the
    widget shows its default, and gets one sentence for the visitor."""
    notes = []
    for key, (what, low, high, default) in INT_PARAMS.items():
        raw = st.query_params.get(key)
        if raw is None:
            continue
        value = whole_number(raw, low, high)
        if value is None:
            del st.query_params[key]
            _forget_initial(key)
            notes.append(f"The link's {what} ({raw[:24]!r}) is not a whole number from {low:,} to {high:,}, so "
                         f"the default {default:,} is used.")
        elif str(value) != raw:
            st.query_params[key] = str(value)
    return notes


def _forget_initial(key: str) -> None:
    """Drop `key` from the query string Streamlit seeds bound widgets with on a page's first run as well
    (streamlit 1.5x runtime/state/query_params.py `_initial_query_params`, read by session_state.py
    `_handle_query_param_binding`): deleting it from st.query_params alone leaves 'inf' there, and number_input's
    deserializer raises OverflowError on it. A private structure: if Streamlit changes it, the page's last
    guard (run_page) still turns the failure into one sentence."""
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    ctx = get_script_run_ctx()
    try:
        ctx.session_state._state.query_params._initial_query_params.pop(key, None)
    except AttributeError:
        pass


def whole_number(raw: str, low: int, high: int) -> int | None:
    """`raw` as an int in [low, high], or None: '4096' and '4.096e3' pass; 'inf', 'nan', '1e400', '2.5' do not."""
    text = raw.strip()
    try:
        value = int(text) if text.lstrip("+-").isdigit() and len(text) < 40 else float(text)
    except ValueError:
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if low <= value <= high else None


def run_page(page) -> None:
    """The last guard: an exception no page foresaw is logged with its traceback on the server, and the visitor
    gets one sentence (no traceback, no server path). st.stop / st.rerun are BaseExceptions and pass through."""
    try:
        for note in clean_url():
            st.warning(note, icon=":material/link_off:")
        sidebar()
        page.run()
    except Exception:
        log.exception("unexpected error while rendering a page")
        st.error("This page could not be shown for these settings (the error is in the server's log): try other "
                 "settings, and please report it.", icon=":material/bug_report:")


# ---------------------------------------------------------------------------------------------- sidebar


def sidebar() -> None:
    with st.sidebar:
        st.markdown("#### Model")
        source = st.radio("Config source", SOURCES, horizontal=True, key="src",
                          bind=URL, help="a bundled config (offline, gated models included), a Hub id, or your own "
                                         "config.json")
        if source == "Hub":
            st.text_input("Hub id", key="hub", bind=URL, placeholder="org/name, e.g. Qwen/Qwen3-8B",
                          help="config.json is fetched with huggingface_hub; no code is ever downloaded")
            st.text_input("Hugging Face token (optional)", key="hf_token", type="password",
                          help="for gated repositories; used for this fetch only: never stored, cached or put in the URL")
        elif source == "Upload":
            st.file_uploader("config.json", type=["json"], key="upload", max_upload_size=8,
                             help=f"parsed as JSON data only, at most {sup.MAX_UPLOAD_BYTES:,} bytes")
        else:
            options = model_options()
            st.selectbox("Bundled model", options, index=sup.default_model_index(options), key="model", bind=URL,
                         help="type to search the bundled configs")
        st.markdown("#### Workload")
        st.number_input("Context: tokens per sequence", **bounds("ctx"), step=1024, key="ctx", bind=URL,
                        help="prompt + generated tokens cached per sequence; on the Capacity page, the max model "
                             "length when \"Model's context\" is off")
        st.number_input("Batch: sequences", **bounds("batch"), step=1, key="batch", bind=URL)
        st.caption(f"kvplan {kvplan.__version__} · GiB = 2³⁰ B, GB = 10⁹ B")


def workload() -> tuple[int, int]:
    """(context, batch) from the sidebar."""
    return int(st.session_state.get("ctx", 8192)), int(st.session_state.get("batch", 1))


def resolve_model():
    """(ModelSpec, None), (None, error message) or (None, '') when there is nothing to load yet."""
    source = st.session_state.get("src", "Bundled")
    if source == "Hub":
        repo = (st.session_state.get("hub") or "").strip()
        if not repo:
            return None, ""
        token = st.session_state.get("hf_token") or None
        return message(load_hub, repo, token_identity(token), token)
    if source == "Upload":
        upload = st.session_state.get("upload")
        if upload is None:
            return None, ""
        return message(load_upload, upload.getvalue(), upload.name)
    return message(load_bundled, st.session_state.get("model") or sup.DEFAULT_MODEL)


def require_model():
    """The chosen model, or a message and a stopped page."""
    model, error = resolve_model()
    if model is not None:
        return model
    if error:
        st.error(f"Could not load the model: {error}", icon=":material/error:")
    elif st.session_state.get("src") == "Hub":
        st.info("Enter a Hub id in the sidebar (org/name), or pick a bundled model.", icon=":material/info:")
    else:
        st.info("Upload a config.json in the sidebar, or pick a bundled model.", icon=":material/info:")
    st.stop()


# ---------------------------------------------------------------------------------------------- layout


def header(title: str, subtitle: str, model=None) -> None:
    st.markdown(f"## {title}")
    line = subtitle if model is None else f"{subtitle} · **{model.name}** · {model.summary().split(': ', 1)[-1]}"
    st.caption(line)
    if model is not None and model.warnings:  # every page that shows a number shows what is not verified
        st.warning("**Not verified.** " + " ".join(model.warnings), icon=":material/warning:")
    if model is not None and model.library_note and model.library_note not in model.warnings:
        # a bundled copy that is not the Hub file verbatim, whose gap moves no figure: said, not warned
        st.caption(model.library_note[:1].upper() + model.library_note[1:] + ".")


def metrics(items, columns=None) -> None:
    cols = st.columns(columns or len(items))
    for col, m in zip(cols, items):
        col.metric(m.label, m.value, help=m.help or None, border=True)


# Plotly's mode bar drew over every chart's title on hover (issue #24: "chart toolbars cover titles"); drag to zoom
# and double-click to reset still work, and Streamlit's own toolbar (full screen) sits above the chart.
PLOTLY_CONFIG = {"displayModeBar": False}


def chart(figure, key: str) -> None:
    st.plotly_chart(figure, key=key, config=PLOTLY_CONFIG)


def downloads(stem: str, json_text: str, csv_text: str, what: str) -> None:
    row = st.container(horizontal=True)
    row.download_button(f"{what} as JSON", json_text, file_name=f"{stem}.json", mime="application/json",
                      icon=":material/download:", key=f"dl_json_{what}")
    row.download_button(f"{what} as CSV", csv_text, file_name=f"{stem}.csv", mime="text/csv",
                      icon=":material/download:", key=f"dl_csv_{what}")


def style() -> None:
    st.html("""<style>
    [data-testid="stMetricValue"] { font-size: 1.6rem; }
    [data-testid="stMainBlockContainer"] { padding-top: 2.2rem; max-width: 1400px; }
    </style>""")
