"""Capacity: does the chosen model fit on these GPUs with vLLM or SGLang, how many requests at once, how fast,
and the command that serves it (kvplan.planning.planner, kvplan.planning.speed)."""

import streamlit as st

from app_pages import charts, common
from app_pages import support as sup
from kvplan.planning import defaults

URL = common.URL

model = common.require_model()
common.header("Capacity planner", "Per-GPU memory, KV pool and concurrency as the serving engine computes them",
              model)
ctx, batch = common.workload()

c1, c2, c3, c4, c5, c6 = st.columns([1, 1.4, 0.8, 0.8, 0.8, 1])
engine = c1.selectbox("Engine", ("vllm", "sglang"), key="engine", bind=URL)
names = common.gpu_names()
gpu = c2.selectbox("GPU", names, index=names.index(defaults.GPU) if defaults.GPU in names else 0, key="gpu",
                   bind=URL)
num_gpus = c3.number_input("GPUs", **common.bounds("n"), step=1, key="n", bind=URL)
tp = c4.selectbox("TP", ("auto", "1", "2", "4", "8", "16"), key="tp", bind=URL, help="auto: GPUs / PP")
pp = c5.number_input("PP", **common.bounds("pp"), step=1, key="pp", bind=URL)
kv_dtype = c6.selectbox("KV dtype", sup.PLAN_KV_DTYPES, key="kvcache", bind=URL)
u0, u1, u2, u3 = st.columns([1, 2, 1.3, 0.9])
own = u0.toggle("Engine's default", value=True, key="utildefault", bind=URL,
                help=f"the fraction the engine picks itself: {defaults.DEFAULTS['gpu_memory_utilization']}")
util_slot = u1.empty()   # filled once the plan says which default it used (SGLang's depends on the card and TP)
own_len = u2.toggle("Model's context", value=True, key="ctxmodel", bind=URL,
                    help=f"on: {defaults.DEFAULTS['max_model_len']}, as `kvplan plan` and the API plan it; off: the "
                         "sidebar's context")
len_slot = u3.empty()

towers = bool(model.arch is not None and model.arch.towers)
text_only = u2.toggle("Language model only", key="textonly", bind=URL, disabled=not towers or engine != "vllm",
                      help="serve a vision model without its vision tower and image inputs (vLLM)") if towers else False
with st.expander("Engine options: version, data and expert parallelism, drafting, adapters"):
    e1, e2, e3, e4 = st.columns([1.2, 0.8, 1, 1])
    version = e1.selectbox("Engine version", sup.ENGINE_VERSIONS[engine], key=f"ver_{engine}", bind=URL,
                           help="the release whose memory accounting to follow; the first is the latest kvplan read")
    dp = e2.number_input("Data parallel", **common.bounds("dp"), step=1, key="dp", bind=URL,
                         help="vLLM: engine copies, each with its own KV pool; SGLang: attention ranks inside TP")
    ep = e3.toggle("Expert parallel", key="ep", bind=URL, help="mixture-of-experts models: whole experts per GPU")
    eager = e4.toggle("No CUDA graphs", key="eager", bind=URL, disabled=engine != "vllm",
                      help="vLLM in eager mode: no graphs, so no graph memory taken from the KV budget")
    s1, s2, s3, s4, s5 = st.columns([1.3, 1.6, 0.8, 0.8, 0.8])
    spec = s1.selectbox("Speculative decoding", tuple(sup.SPECULATIVE), key="spec", bind=URL)
    drafts = common.model_options()
    draft = s2.selectbox("Draft", drafts, index=drafts.index(sup.DEFAULT_DRAFT) if sup.DEFAULT_DRAFT in drafts else 0,
                         key="draft", bind=URL, disabled=sup.SPECULATIVE[spec] in (None, "mtp"),
                         help="the EAGLE-3 head or the small model that drafts")
    spec_k = s3.number_input("Draft tokens", **common.bounds("spect"), step=1, key="spect", bind=URL)
    loras = s4.number_input("LoRA slots", **common.bounds("loras"), step=1, key="loras", bind=URL,
                            help="adapters held at once (0: no LoRA)")
    rank = s5.number_input("LoRA rank", **common.bounds("lorarank"), step=8, key="lorarank", bind=URL)
    nvls = st.toggle("NVLink SHARP", value=True, key="nvls", bind=URL, disabled=engine != "vllm",
                     help="NCCL's NVLS buffers on NVSwitch GPUs (H100 / H200 / B200): off on other systems")
util = None if own else util_slot.slider(
    "GPU memory utilization", min_value=0.0, max_value=1.0, value=defaults.utilization(engine, version) or 0.9,
    step=0.01, key="util", bind=URL, help="the fraction of GPU memory the engine may use (SGLang: mem_fraction_static)")
inputs = sup.PlanInputs(engine, gpu, num_gpus, tp, pp, util, None if own_len else ctx, kv_dtype, bool(text_only),
                        version, int(dp), bool(ep), sup.SPECULATIVE[spec], draft, int(spec_k), int(loras),
                        int(rank), bool(eager), bool(nvls))
with common.guard("Capacity"):
    plan = sup.run_plan(model, inputs)
if own:  # what the plan used, greyed: the engine's default for this version, card and TP
    util_slot.slider("GPU memory utilization", min_value=0.0, max_value=1.0, value=plan.gpu_memory_utilization,
                     step=0.01, disabled=True, help="the engine's default, which this plan uses: switch off "
                                                    "\"Engine's default\" to set your own")
len_slot.metric("Max model length", f"{plan.max_model_len:,}",
                help="the model's context length" if own_len else "the sidebar's context")

fits, sentence = sup.verdict(plan)
(st.success if fits else st.error)(sentence, icon=":material/check_circle:" if fits else ":material/cancel:")
for warning in (w for w in plan.warnings if w not in model.warnings):  # this plan's own: context, towers
    st.warning(warning, icon=":material/warning:")
layout, fewest_problem = common.message(sup.run_fewest, model, inputs)  # one search serves both sections
fewest = None if layout is None else layout.plan
if not fits:
    nearest, _ = common.message(sup.run_fixes, model, inputs, plan, fewest if fewest is not None else False)
    for fix in nearest or ():
        st.info(f"To fit: {fix}", icon=":material/lightbulb:")
common.metrics(sup.plan_metrics(plan))
st.caption(f":material/tune: {sup.defaults_line(plan)}")

left, right = st.columns(2)
with left:
    common.chart(charts.memory_stack_figure(charts.memory_stack_frame(plan), plan), key="memory")
    st.dataframe(sup.plan_table(plan), hide_index=True, width="stretch",
                 column_config={"bytes": st.column_config.NumberColumn(format="localized")})
    for line in sup.weights_source_lines(plan, model):
        st.caption(f":material/scale: {line}")
with right:
    with common.guard("Concurrency"):
        frame = charts.concurrency_frame(plan, model, charts.concurrency_contexts(plan.max_model_len))
    common.chart(charts.concurrency_figure(frame, plan.max_model_len), key="concurrency")

st.markdown("#### Fewest GPUs that fit")
if fewest is not None:
    summary = layout.summary()
    st.info(f"{fewest.num_gpus} x {fewest.gpu}: {summary['layout']} ({summary['nodes']} x "
            f"{summary['gpus_per_node']}-GPU node{'s' if summary['nodes'] > 1 else ''}), {fewest.kv_cache_tokens:,} "
            f"KV tokens, {fewest.max_concurrency:,.2f} concurrent {fewest.max_model_len:,}-token requests",
            icon=":material/dns:")
    st.caption(f":material/hub: Deployable layout: {layout.why}.")
    if (any_layout := summary["fewest_any_layout"]) is not None and any_layout["num_gpus"] != fewest.num_gpus:
        st.caption(f":material/hub: Fewest GPUs in any layout: {any_layout['num_gpus']} ({any_layout['layout']}, "
                   f"{any_layout['max_concurrency']:,.2f}x), not a layout people deploy "
                   "(`kvplan plan --fewest-gpus --any-layout`).")
    if (ep := summary["expert_parallel_alternative"]) is not None:
        st.caption(f":material/hub: Expert parallel on the same {ep['num_gpus']} GPUs: {ep['layout']} holds "
                   f"{ep['total_concurrency']:,.2f}x requests over its {ep['data_parallel_size']} engines "
                   "(the DP and EP settings above).")
else:
    st.warning(fewest_problem, icon=":material/warning:")

st.markdown("#### Speed (roofline)")
s1, _ = st.columns([1, 3])
prompt = s1.number_input("Prompt tokens for TTFT", **common.bounds("ttft_prompt"), step=256,
                         key="ttft_prompt", bind=URL)
result, problem = common.message(sup.plan_speed, model, plan, prompt, batch) if plan.fits else (
    None, "the speed estimate is for plans that fit: change the settings above until this one does")
if result is not None:
    common.metrics(sup.speed_metrics(result))
    st.caption(" · ".join(map(sup.app_words, result.notes)) + f" · decode at {plan.max_model_len:,} tokens of context, batch {batch:,}")
else:
    st.warning(f"Speed: {problem}", icon=":material/warning:")

st.markdown("#### At your workload")
w1, w2, w3, _ = st.columns([1, 1, 1, 1])
mean_prompt = w1.number_input("Mean prompt tokens", **common.bounds("wl_prompt"), step=256, key="wl_prompt", bind=URL)
mean_output = w2.number_input("Mean output tokens", **common.bounds("wl_output"), step=64, key="wl_output", bind=URL)
price = w3.number_input("Price per GPU-hour ($, 0: the catalog's)", min_value=0.0, max_value=9999.0, value=0.0,
                        step=0.1, key="wl_price", bind=URL)
if plan.fits:
    load, problem = common.message(sup.workload, model, plan, int(mean_prompt), int(mean_output), float(price))
else:
    load, problem = None, "the workload figures are for plans that fit: change the settings above until this one does"
if load is not None:
    common.metrics(sup.workload_metrics(load))
    st.caption(" · ".join(map(sup.app_words, [load.price_source] + load.notes[-2:])))
    with st.expander("How the workload figures were computed"):
        st.code("\n".join(load.formula), language=None, wrap_lines=True)
else:
    st.warning(f"Workload: {problem}", icon=":material/warning:")

st.markdown("#### Serve it")
st.code(sup.serve_command(plan), language="bash", wrap_lines=True)
st.caption("The same plan from kvplan's command line (what it prints is this page's plan):")
st.code(sup.cli_command(model, inputs), language="bash", wrap_lines=True)
with st.expander("How the pool was computed"):
    st.code("\n".join(plan.formula), language=None, wrap_lines=True)
    for note in plan.notes:
        st.caption(f":material/info: {sup.app_words(note)}")
common.downloads(f"kvplan-plan-{sup.file_stem(model.name)}-{plan.gpu}-{plan.num_gpus}", sup.plan_json(plan),
                 sup.plan_csv(plan), "Plan")
