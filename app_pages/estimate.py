"""Estimate: the KV cache of the chosen model for a workload, layer group by layer group, with its formula."""

import streamlit as st

from app_pages import common
from app_pages import support as sup
from app_pages import charts

URL = common.URL
STATIC = ("static", "offloaded_static")

model = common.require_model()
common.header("Estimate", "Exact KV-cache bytes from the config, transformers 5.24 semantics", model)
ctx, batch = common.workload()

c1, c2, c3, c4 = st.columns([1, 1.2, 1, 1])
kv_dtype = c1.selectbox("KV dtype", sup.KV_DTYPES, key="kv", bind=URL,
                        help="auto: the config's dtype. fp8 / int8 / int4 / int2 need the quantized cache")
cache = c2.selectbox("Cache strategy", sup.CACHES, key="cache", bind=URL,
                     help="transformers' cache implementations")
max_cache_len = c3.number_input("max_cache_len (0 = context)", **common.bounds("maxlen"), step=1024,
                                key="maxlen", bind=URL, disabled=cache not in STATIC,
                                help="static caches preallocate this many tokens per layer")
prompt_len = c4.number_input("Prompt tokens (0 = context)", **common.bounds("prompt"), step=256,
                             key="prompt", bind=URL, help="tokens in the prefill; the rest are generated")

work = sup.Workload(ctx, batch, kv_dtype, cache, max_cache_len if cache in STATIC else 0, prompt_len)
with common.guard("Estimate"):
    est = sup.run_estimate(model, work)

common.metrics(sup.headline(est))
for line in sup.side_numbers(est):
    st.caption(line)
for note in est.notes:
    st.caption(f":material/info: {sup.app_words(note)}")

st.markdown("#### Layer groups")
st.dataframe(sup.group_table(est, formula=False), hide_index=True, width="stretch",
             column_config={"bytes": st.column_config.NumberColumn("bytes", format="localized"),
                            "bytes per token per layer": st.column_config.NumberColumn(format="localized"),
                            "layer indices": st.column_config.TextColumn(width="medium")})

st.markdown("#### Formula, with the config's values")
st.code(est.formula, language=None, wrap_lines=True)
with st.expander("Config values used"):
    st.dataframe(sup.config_values(model), hide_index=True)

st.markdown("#### Charts")
g1, _ = st.columns([1.15, 1])
gpus = g1.multiselect("GPU capacity lines", common.gpu_names(), default=["H100-SXM", "A100-SXM-40GB", "RTX-4090"],
                      key="gpus", bind=URL, help="physical memory as the runtime reports it")
left, right = st.columns([1.15, 1])
with left, common.guard("KV against context"):
    grid = charts.context_grid(est.seq_len, model.dims.max_position_embeddings if model.dims else None)
    curve = charts.kv_vs_context_frame(model, grid, est.batch_size, **work.kwargs())
    common.chart(charts.kv_vs_context_figure(curve, charts.gpu_lines(gpus), est.seq_len), key="kv_context")
with right:
    common.chart(charts.per_layer_figure(charts.per_layer_frame(est)), key="per_layer")

common.downloads(f"kvplan-estimate-{sup.file_stem(est.model)}-{est.seq_len}", sup.estimate_json(est),
                 sup.estimate_csv(est), "Estimate")
