"""Compare setups: two to four models or GPU setups side by side, each planned with the same engine and context
(kvplan.planning.compare), in one table and one chart."""

import streamlit as st

from app_pages import charts, common
from app_pages import support as sup

URL = common.URL

common.header("Compare setups", "Two to four models or GPU setups, planned with the same engine and context")
ctx, _ = common.workload()
models, gpus = common.model_options(), common.gpu_names()

e1, e2, e3, e4 = st.columns([1, 1, 1, 1])
engine = e1.selectbox("Engine", ("vllm", "sglang"), key="cmp_engine", bind=URL)
count = e2.number_input("Setups", **common.bounds("cmp_n"), step=1, key="cmp_n", bind=URL)
mean_prompt = e3.number_input("Mean prompt tokens", **common.bounds("wl_prompt"), step=256, key="wl_prompt", bind=URL)
mean_output = e4.number_input("Mean output tokens", **common.bounds("wl_output"), step=64, key="wl_output", bind=URL)

setups = []
for i in range(int(count)):
    c1, c2, c3 = st.columns([2.2, 1.2, 0.6])
    default_model, default_gpu = sup.COMPARE_DEFAULTS[i]
    model = c1.selectbox(f"Model {i + 1}", models, index=models.index(default_model) if default_model in models else 0,
                         key=f"cmp_m{i}", bind=URL)
    gpu = c2.selectbox(f"GPU {i + 1}", gpus, index=gpus.index(default_gpu) if default_gpu in gpus else 0,
                       key=f"cmp_g{i}", bind=URL)
    n = c3.number_input(f"GPUs {i + 1}", **common.bounds("cmp_gpus"), step=1, key=f"cmp_c{i}", bind=URL)
    setups.append(sup.SetupInput(model, gpu, int(n)))

rows, problem = common.message(sup.run_compare, setups, engine, ctx, int(mean_prompt), int(mean_output))
if rows is None:
    st.error(problem, icon=":material/error:")
    st.stop()
for row in rows:
    if row.error:
        st.warning(f"{row.setup}: {sup.app_words(row.error)}", icon=":material/warning:")
st.dataframe(sup.comparison_table(rows), hide_index=True, width="stretch")
st.plotly_chart(charts.comparison_figure(rows), key="setups")
st.caption(f"Each setup planned for {engine} at a {ctx:,}-token context (the sidebar's), the engine's own "
           "memory defaults and the latest release kvplan read; the workload columns are the roofline at "
           f"{int(mean_prompt):,} + {int(mean_output):,} tokens per request.")
