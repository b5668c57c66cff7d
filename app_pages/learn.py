"""Learn: what the KV cache is and why it matters, every number computed by kvplan."""

import streamlit as st

from app_pages import common
from app_pages import support as sup
from app_pages import validation_data as val
from app_pages import charts
from kvplan.units import fmt_bytes, fmt_int

RESULTS = sup.ROOT / "validation" / "results"


@st.cache_data(show_spinner=False)
def learn_tables():
    llama = common.load_bundled(sup.LEARN_MODEL)
    return llama, sup.naive_vs_real(llama, sup.LEARN_CONTEXTS, "fp16"), sup.naive_vs_real_at(llama, 4096, "fp16")


common.header("Learn", "The KV cache explained with kvplan's own numbers")
ctx, batch = common.workload()
model, problem = common.resolve_model()

st.markdown("""
#### Prefill, then decode
A decoder generates one token at a time, and every new token attends to all the tokens before it. Each layer
projects every token into a **key** and a **value**. **Prefill** runs the whole prompt through the model at
once, computing the keys and values of all prompt tokens in parallel (compute-bound). **Decode** then produces
one token per step: it computes the new token's key and value, appends them to the **KV cache**, and reads
the whole cache to attend (memory-bound). Without the cache, every step would recompute the keys and values of
the entire prefix.
""")

numbers, trouble = (None, problem) if model is None else common.message(sup.learn_numbers, model, ctx, batch)
if numbers is None:
    st.info(f"Numbers for the sidebar's model are not available: {trouble}" if trouble else
            "Pick a model in the sidebar to see these numbers for it.", icon=":material/info:")
else:
    cost = numbers.cost
    st.markdown(f"""
#### From O(n²) to O(n): {model.name}
Producing token number **{fmt_int(cost.tokens)}** costs **{sup.fmt_flops(cost.flops_with_cache)}** with a KV
cache (one token through the weights, plus attention over {fmt_int(cost.tokens)} cached keys and values) and
**{sup.fmt_flops(cost.flops_without_cache)}** without one (the whole prefix again):
**{sup.ratio(cost.flops_without_cache, cost.flops_with_cache)}** more. The price is memory:
**{fmt_bytes(cost.kv_bytes)}** of cache for that one sequence. Per step, recomputing the prefix costs O(n) in the
weights and O(n²) in attention; the cache makes them O(1) and O(n). Summed over n generated tokens, the weight
FLOPs drop from O(n²) to O(n) and the attention FLOPs from O(n³) to O(n²).
""")
    common.chart(charts.step_cost_figure(numbers.curve), key="step_cost")
    st.markdown("#### The memory formula")
    st.latex(r"\text{KV bytes} = 2 \times \text{layers} \times \text{KV heads} \times \text{head\_dim} \times "
             r"\text{tokens} \times \text{batch} \times \text{bytes per element}")
    st.markdown("Sliding-window layers cap *tokens* at the window, MLA caches one latent instead of K and V, "
                "Mamba layers keep a fixed-size state. For the sidebar's model and workload, kvplan writes it out:")
    st.code(numbers.estimate.formula, language=None, wrap_lines=True)

llama, table, at_4096 = learn_tables()
st.markdown(f"""
#### Why KV heads matter: LLaMA-2-70B
LLaMA-2-70B has {llama.dims.num_heads} attention heads but only {llama.kv_heads} KV heads (grouped-query
attention). The textbook formula, with every attention head as a KV head, overestimates its cache. In fp16, one
sequence of {fmt_int(at_4096.tokens)} tokens holds **{fmt_int(at_4096.real_bytes)} B**
({fmt_bytes(at_4096.real_bytes)}); the naive formula says {fmt_int(at_4096.naive_bytes)} B
({fmt_bytes(at_4096.naive_bytes)}), **{at_4096.times}** too much.
""")
st.dataframe(table[["tokens", "naive MHA", "real", "naive / real", "naive MHA bytes", "real bytes"]],
             hide_index=True, width="stretch",
             column_config={"tokens": st.column_config.NumberColumn(format="localized"),
                            "naive MHA bytes": st.column_config.NumberColumn(format="localized"),
                            "real bytes": st.column_config.NumberColumn(format="localized")})
common.chart(charts.naive_vs_real_figure(table, f"naive MHA ({llama.dims.num_heads} KV heads)",
                                            f"real GQA ({llama.kv_heads} KV heads)",
                                            "LLaMA-2-70B, fp16, one sequence"), key="naive_real")

st.markdown("#### Space for time, measured")
runs = val.read_space_for_time(RESULTS)
if not runs:
    st.info("The space-for-time benchmark has not run yet: its results appear here once the validation "
            "harness writes `validation/results/<run>/space_for_time.json`.", icon=":material/hourglass_empty:")
for run, data in runs:
    st.caption(f"run `{run}`: " + "; ".join(val.space_for_time_facts(data)))
    frame = val.space_for_time_frame(data)
    figure = None if frame is None else charts.space_for_time_figure(frame)
    if figure is not None:
        common.chart(figure, key=f"space_for_time_{run}")
    if frame is not None:
        st.dataframe(frame, hide_index=True, width="stretch")
    else:
        st.json(data, expanded=False)
