"""Compare setups: two to four models or GPU setups side by side, each planned with the same engine and context
(kvplan.planning.compare), in one table and one chart."""

import streamlit as st

from app_pages import charts, common
from app_pages import support as sup

URL = common.URL

common.header("Compare setups", "Two to four models or GPU setups, planned with the same engine and context")
ctx, _ = common.workload()
sidebar_model, _ = common.resolve_model()   # the first setup's model, unless the visitor picks another
models, gpus = [sup.SIDEBAR_MODEL, *common.model_options()], common.gpu_names()


def model_label(option: str) -> str:
    if option != sup.SIDEBAR_MODEL:
        return option
    return f"{option} ({sidebar_model.name})" if sidebar_model is not None else f"{option} (none loaded)"


e1, e2, e3, e4, e5 = st.columns([1, 0.8, 1, 1, 1.2])
engine = e1.selectbox("Engine", ("vllm", "sglang"), key="cmp_engine", bind=URL)
own_len = e5.toggle("Models' contexts", value=True, key="ctxmodel", bind=URL,
                    help="on: each model at its own context length, as `kvplan compare` plans it; off: the "
                         "sidebar's context for every setup")
count = e2.number_input("Setups", **common.bounds("cmp_n"), step=1, key="cmp_n", bind=URL)
mean_prompt = e3.number_input("Mean prompt tokens", **common.bounds("wl_prompt"), step=256, key="wl_prompt", bind=URL)
mean_output = e4.number_input("Mean output tokens", **common.bounds("wl_output"), step=64, key="wl_output", bind=URL)

setups = []
for i in range(int(count)):
    c1, c2, c3 = st.columns([2.2, 1.2, 0.6])
    default_model, default_gpu = sup.COMPARE_DEFAULTS[i]
    model = c1.selectbox(f"Model {i + 1}", models, index=models.index(default_model) if default_model in models else 0,
                         key=f"cmp_m{i}", bind=URL, format_func=model_label)
    if model == sup.SIDEBAR_MODEL:
        if sidebar_model is None:
            st.warning(f"Setup {i + 1}: pick or load a model in the sidebar, or choose one here.",
                       icon=":material/warning:")
            continue
        model = sidebar_model
    gpu = c2.selectbox(f"GPU {i + 1}", gpus, index=gpus.index(default_gpu) if default_gpu in gpus else 0,
                       key=f"cmp_g{i}", bind=URL)
    n = c3.number_input(f"GPUs {i + 1}", **common.bounds("cmp_gpus"), step=1, key=f"cmp_c{i}", bind=URL)
    setups.append(sup.SetupInput(model, gpu, int(n)))

if len(setups) < 2:
    st.info("Compare needs two setups or more.", icon=":material/info:")
    st.stop()
max_len = None if own_len else ctx
rows, problem = common.message(sup.run_compare, setups, engine, max_len, int(mean_prompt), int(mean_output))
if rows is None:
    st.error(problem, icon=":material/error:")
    st.stop()
for row in rows:
    if row.error:
        st.warning(f"{row.setup}: {sup.app_words(row.error)}", icon=":material/warning:")
st.table(sup.comparison_table(rows), hide_index=True)
common.chart(charts.comparison_figure(rows), key="setups")
where = ("each model's own context length (" + ", ".join(f"{r.model.split('/')[-1]} {r.max_model_len:,}" for r in rows
                                                         if not r.error) + ")") if own_len else \
    f"a {ctx:,}-token context (the sidebar's)"
st.caption(f"Each setup planned for {engine} at {where}, the engine's own memory defaults and the latest release "
           f"kvplan read; the workload columns are the roofline at {int(mean_prompt):,} + {int(mean_output):,} "
           "tokens per request.")
