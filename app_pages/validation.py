"""Validation: kvplan's predictions against measurements: the harness's validation/results/*/report.json, the
vLLM start-up calibration (validation/vllm_calibration.csv), the published vLLM start-ups of other models
(validation/vllm_holdout_results.csv) and the SGLang ones (validation/sglang_calibration_results.csv)."""

import streamlit as st

from app_pages import common
from app_pages import support as sup
from app_pages import validation_data as val
from app_pages import charts

URL = common.URL
RESULTS = sup.ROOT / "validation" / "results"
CALIBRATION_CSV = sup.ROOT / "validation" / "vllm_calibration.csv"
CALIBRATION_MD = sup.ROOT / "validation" / "vllm_calibration.md"
# (label, results csv, report md): the start-ups the profile was fitted on, and the published ones it was not
ENGINE_SETS = {
    "vLLM: calibration set (4 dense models)": (CALIBRATION_CSV, CALIBRATION_MD),
    "vLLM: other models, published logs (hold-out)": (sup.ROOT / "validation" / "vllm_holdout_results.csv",
                                                      sup.ROOT / "validation" / "vllm_holdout.md"),
    "SGLang: published logs": (sup.ROOT / "validation" / "sglang_calibration_results.csv",
                               sup.ROOT / "validation" / "sglang_calibration.md"),
}


@st.cache_data(show_spinner=False, ttl=300)
def reports(results_dir):
    data = val.read_reports(results_dir)
    return data, val.report_summary(data.rows)


@st.cache_data(show_spinner=False, ttl=300)
def calibration(csv_path, md_path):
    frame = val.read_calibration(csv_path)
    return frame, val.calibration_intro(md_path), val.calibration_summary(frame)


common.header("Validation", "Predicted against measured: the numbers kvplan shows are checked, and here is how well")

st.markdown("#### transformers caches: kvplan against the real cache (validation harness)")
data, summary = reports(RESULTS)
for problem in data.problems:
    st.warning(problem, icon=":material/warning:")
if data.rows.empty:
    st.info("No harness results yet: `validation/results/<run>/report.json` appears here once the validation "
            "harness has run on a GPU and its report is committed.", icon=":material/hourglass_empty:")
else:
    st.table(data.runs, hide_index=True)   # static, so the long versions cell wraps instead of cutting the table
    st.dataframe(summary, hide_index=True, width="stretch")
    common.chart(charts.validation_figure(data.rows, "measured_bytes", "predicted_bytes", "cache",
                                             title="KV bytes: predicted vs measured, by cache strategy", log=True),
                    key="harness")
    with st.expander("Every measurement"):
        st.dataframe(data.rows, hide_index=True, width="stretch",
                     column_config={"predicted_bytes": st.column_config.NumberColumn(format="localized"),
                                    "measured_bytes": st.column_config.NumberColumn(format="localized")})

st.markdown("#### Serving engines: kvplan's engine profiles against the engines' own log lines")
chosen = st.selectbox("Start-ups", list(ENGINE_SETS), key="vset", bind=URL,
                      help="the vLLM calibration set is what the profile was fitted on; the hold-out rows are "
                           "published start-ups of other models it was not fitted on")
frame, intro, calibration_table = calibration(*ENGINE_SETS[chosen])
if frame.empty:
    st.info("No results yet: run `python validation/vllm_calibration.py`, `vllm_holdout.py` or "
            "`sglang_calibration.py`.", icon=":material/hourglass_empty:")
else:
    if intro:
        st.caption(intro)
    st.dataframe(calibration_table, hide_index=True, width="stretch")
    metrics = list(dict.fromkeys(frame["metric"]))
    default = next((m for m in ("kv_pool", "pool", "tokens") if m in metrics), metrics[0])
    metric = st.selectbox("Metric", metrics, index=metrics.index(default),
                          key=f"vmetric{list(ENGINE_SETS).index(chosen) or ''}", bind=URL,
                          help="GiB for memory, tokens for the KV cache size")
    part, unit = val.calibration_metric(frame, metric)
    common.chart(charts.validation_figure(part, "measured", "predicted", "metric", unit=unit,
                                             title=f"{metric}: predicted vs measured ({len(part)} start-ups)"),
                    key="calibration")
    with st.expander("Every start-up"):
        st.dataframe(part, hide_index=True, width="stretch")
