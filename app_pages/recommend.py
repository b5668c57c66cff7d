"""Recommend: the cheapest GPU, layout and replicas over the whole catalog that serve the sidebar's model at a
request rate within latency targets (kvplan.planning.recommend, as `kvplan recommend` prints it)."""

import pandas as pd
import streamlit as st

from app_pages import charts, common
from kvplan.planning.recommend import parse_prices, recommend
from kvplan.planning.workload import RequestMix

URL = common.URL

model = common.require_model()
common.header("Recommend", "The cheapest setups over the GPU catalog for a workload and its latency targets", model)

w1, w2, w3, w4, w5 = st.columns(5)
prompt = w1.number_input("Mean prompt tokens", **common.bounds("wl_prompt"), step=256, key="wl_prompt", bind=URL)
output = w2.number_input("Mean output tokens", **common.bounds("wl_output"), step=64, key="wl_output", bind=URL)
prompt95 = w3.number_input("p95 prompt (0: none)", **common.bounds("rc_pp95"), step=256, key="rc_pp95", bind=URL)
output95 = w4.number_input("p95 output (0: none)", **common.bounds("rc_op95"), step=64, key="rc_op95", bind=URL)
rate = w5.number_input("Requests per second", min_value=0.001, max_value=1e6, value=10.0, step=1.0, key="rc_rate")
t1, t2, t3, t4 = st.columns(4)
ttft = t1.number_input("TTFT target, ms (0: none)", **common.bounds("rc_ttft"), step=50, key="rc_ttft", bind=URL)
tpot = t2.number_input("TPOT target, ms (0: none)", **common.bounds("rc_tpot"), step=5, key="rc_tpot", bind=URL)
budget = t3.number_input("Budget, USD per hour (0: none)", **common.bounds("rc_budget"), step=10, key="rc_budget",
                         bind=URL)
engine = t4.selectbox("Engine", ("vllm", "sglang"), key="rc_engine", bind=URL)
given = st.text_input("Prices for GPUs the catalog has none for, USD per GPU-hour", key="rc_prices", bind=URL,
                      placeholder="L40S=0.86, A10G=1.01", help="GPU=USD, comma-separated; they override the catalog's")

with common.guard("Recommend"):
    mix = RequestMix(int(prompt), int(output), int(prompt95) or None, int(output95) or None)
    result = recommend(model, mix, float(rate), ttft_s=int(ttft) / 1e3 or None, tpot_s=int(tpot) / 1e3 or None,
                       budget_per_hour=int(budget) or None, engine=engine,
                       prices=parse_prices((given or "").split(",")))


def table(setups) -> pd.DataFrame:
    """One row per setup, in the CLI's words."""
    return pd.DataFrame([{
        "GPU": s.gpu, "layout": s.layout, "replicas": s.replicas, "GPUs": s.total_gpus,
        "max seqs": s.max_num_seqs, "limited by": s.limited_by,
        "USD/h": "-" if s.cost_per_hour is None else f"{s.cost_per_hour:,.2f}",
        "USD/1M out": "-" if s.cost_per_million_output_tokens is None else f"{s.cost_per_million_output_tokens:,.3f}",
        "req/s": f"{s.requests_per_s:,.2f}", "TTFT ms": f"{s.ttft_s * 1e3:,.0f}",
        "TPOT ms": f"{s.tpot_s * 1e3:,.1f}", "e2e s": f"{s.e2e_latency_s:,.2f}"} for s in setups])


if result.cheapest:
    best = result.cheapest[0]
    replicas = f"{best.replicas} replicas of " if best.replicas > 1 else ""
    st.success(f"Cheapest: {replicas}{best.gpus_per_replica} x {best.gpu} ({best.layout}), "
               f"${best.cost_per_hour:,.2f} per hour, ${best.cost_per_million_output_tokens:,.3f} per million output "
               f"tokens; TTFT {best.ttft_s * 1e3:,.0f} ms, TPOT {best.tpot_s * 1e3:,.1f} ms.",
               icon=":material/savings:")
    st.code(best.command, language="bash", wrap_lines=True)
    for line in best.formula:
        st.caption(f":material/function: {line}")
    st.markdown("#### Cheapest setups (one per GPU)")
    st.dataframe(table(result.cheapest), hide_index=True, width="stretch")
    st.markdown("#### Cost against latency (Pareto front)")
    st.caption("Each setup is faster end to end than every cheaper one.")
    st.plotly_chart(charts.recommend_figure(result), key="recommend")
    st.dataframe(table(result.pareto), hide_index=True, width="stretch")
else:
    st.error("No priced catalog GPU serves this rate within these targets.", icon=":material/cancel:")
if result.unpriced:
    st.markdown("#### GPUs without a price")
    st.caption("The catalog has no price for these: type one in the prices field above to rank them.")
    st.dataframe(table(result.unpriced), hide_index=True, width="stretch")
with st.expander("Assumptions and skipped GPUs"):
    for line in result.assumptions:
        st.caption(f":material/info: {line[0].upper()}{line[1:]}.")
    for line in result.skipped:
        st.caption(f":material/block: {line}")
