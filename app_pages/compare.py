"""Compare strategies: the chosen model's cache under MHA, its own attention, windows, sinks, quantization,
offloading and eviction, each row saying how it was computed (kvplan.cache.strategies)."""

import streamlit as st

from app_pages import charts, common
from app_pages import support as sup
from kvplan.cache import strategies

URL = common.URL

model = common.require_model()
common.header("Compare strategies", "What each way of shrinking the cache would weigh, same model, same workload",
              model)
ctx, batch = common.workload()

c1, c2, c3 = st.columns(3)
window = c1.number_input("Sliding window W (tokens)", **common.bounds("window"), step=512,
                         key="window", bind=URL, help="applied to every attention layer")
sinks = c2.number_input("Attention sinks (tokens)", **common.bounds("sinks"), step=1, key="sinks",
                        bind=URL, help="StreamingLLM keeps the first tokens plus the last W")
keep = c3.slider("Eviction: fraction of tokens kept", min_value=0.0, max_value=1.0, value=0.5, step=0.05,
                 key="keep", bind=URL, help="FastGen / DMS-style compression, as a uniform keep ratio")

with common.guard("Compare strategies"):
    rows = strategies.compare(model, ctx, batch, window=window, sinks=sinks, fraction=keep)

st.caption(f"{ctx:,} tokens per sequence x {batch:,} sequences. Savings are against the model's own cache; "
           "light bars are per-element estimates (no quantization scales counted).")
common.chart(charts.strategies_figure(rows), key="strategies")
st.table(sup.strategy_table(rows, raw_bytes=False), hide_index=True)
with st.expander("What each strategy means"):
    st.markdown(
        "- **MHA baseline**: every attention head caches its own K and V, as in the original Transformer.\n"
        "- **GQA / MQA**: groups of query heads share one KV head; **MLA** caches one compressed latent per token.\n"
        "- **Sliding window**: each layer keeps only the last W tokens (Mistral, Gemma local layers).\n"
        "- **Sinks + window** (StreamingLLM): the first few tokens stay as attention sinks next to the window.\n"
        "- **fp8 / int8 / int4 KV**: fewer bits per element; transformers' quantized cache adds group scales "
        "and keeps a short full-precision residual.\n"
        "- **Offloading**: layers wait in host memory and are prefetched one at a time.\n"
        "- **Eviction / compression** (FastGen, DMS, H2O): drop the tokens that matter least.")
common.downloads(f"kvplan-strategies-{sup.file_stem(model.name)}-{ctx}", sup.strategies_json(rows),
                 sup.strategies_csv(rows), "Strategies")
