"""Layouts: the fewest GPUs a model fits on in any TP x PP (`fewest_gpus`), and in a layout people run
(`deployable`), the first with the second beside it.

The layouts tried, in order of GPUs:

    one node       TP 1, 2, 4, ... up to the node, PP 1                       (Llama-3.1-70B on H100s: TP 4)
    whole nodes    TP = the largest such TP that divides the node, PP = GPUs / TP   (DeepSeek-V3: TP 8 x PP 2)
    a MoE on vLLM  at each count also TP x DP engines with --enable-expert-parallel (the experts over every rank,
                   each engine its own KV pool), shown beside the TP x PP layout where it holds more requests,
                   chosen only where no TP x PP fits

TP is a power of two that vLLM accepts for the model: it must divide the attention heads (config/model.py
`verify_with_parallel_config`, 0.33: 'Total number of attention heads ... must be divisible by tensor parallel
size'), and the KV heads must divide TP or TP them (model_executor/layers/linear.py `QKVParallelLinear`, 0.33:
`num_kv_head_replicas = divide(tp_size, total_num_kv_heads)` when TP >= KV heads, else `divide(kv_heads, tp)`);
`inputs.resolve_parallel` holds both rules, and a TP it refuses is not tried. TP stays inside a node (its
all-reduces run every layer); PP stages pass one activation per step, so they are what crosses nodes, and only
over whole nodes: DeepSeek-V3 on 11 H100s as TP 1 x PP 11 puts three stages on a second, mostly idle node.
At one count the layout holding the most requests wins (vLLM's max concurrency x DP engines).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..config.load import as_model
from ..errors import WorkloadError
from ..gpus import GPU, resolve_gpu
from ..model.spec import ModelSpec
from . import defaults
from .inputs import positive, resolve_parallel
from .planner import plan
from .result import Plan

GPUS_PER_NODE = 8  # an HGX / DGX node: tensor parallelism stays inside one, pipeline stages may cross nodes


TP_SIZES = (1, 2, 4, 8)


def fewest_gpus(model: ModelSpec | str, *, max_gpus: int = 64, gpus_per_node: int = GPUS_PER_NODE,
                memo: dict | None = None, **kwargs) -> Plan:
    """The fewest GPUs that fit, over every TP x PP with TP inside one node (TP 1, 2, 4, 8: TP across nodes
    would run its all-reduces over the network); at that count, the layout with the most KV capacity (vLLM's
    max concurrency, then KV tokens, then fewer stages). Qwen2.5-72B on L4s: 10 (TP 2 x PP 5), not TP 16;
    DeepSeek-V3 on H100s: 11 (TP 1 x PP 11), where at 16 TP 8 x PP 2 holds twice TP 16's requests (the MLA latent is
    replicated on every TP rank). A layout over one node says so in its notes.

    Bounded work: a layout whose stages cannot hold the weights is never planned (`_too_few_stages`), so a model
    that fits nowhere costs a plan per TP and the layouts near the weights' bound, not all 120 layouts up to 64 GPUs
    (a 10,000-layer config took 27 s)."""
    model = as_model(model)
    per_node = positive("gpus_per_node", gpus_per_node)
    last_error, planned_any = None, False
    # vLLM's DP engines multiply the GPUs: search TP x PP per engine, count in all
    dp = (positive("data parallel size", kwargs.get("dp")) or 1) if kwargs.get("engine", "vllm") == "vllm" else 1
    card = _card_bytes(kwargs)
    one_stage: dict[int, int] = {}   # TP -> one GPU's weights with every layer on it (PP 1)
    for count in range(dp, positive("max_gpus", max_gpus) + 1, dp):
        fitting = []
        per_engine = count // dp
        for tp in (t for t in TP_SIZES if t <= per_node and per_engine % t == 0):
            if _too_few_stages(one_stage.get(tp), per_engine // tp, card):
                continue
            try:
                candidate = _planned(memo, model, {**kwargs, "tp": tp, "pp": per_engine // tp})
            except WorkloadError as exc:
                last_error = exc
                continue
            planned_any = True
            if candidate.pipeline_parallel_size == 1:
                one_stage[tp] = candidate.weights_bytes
            if candidate.fits:
                fitting.append(candidate)
        if fitting:
            best = max(fitting, key=lambda p: (p.max_concurrency, p.kv_cache_tokens, -p.pipeline_parallel_size))
            return best.model_copy(update={"notes": best.notes + _node_notes(best, per_node, fitting)})
    if not planned_any and last_error is not None:
        raise last_error    # no layout plans at all (an engine that refuses the model): its reason, not "does not fit"
    raise WorkloadError(f"{model.name} does not fit on {max_gpus} GPUs with these settings"
                        + (f" ({last_error})" if last_error else "") + ": use a larger GPU or a smaller max_model_len")


def _planned(memo: dict | None, model: ModelSpec, settings: dict) -> Plan:
    """plan(model, **settings), once per layout when a memo is shared: `deployable` runs `fewest_gpus` first and
    then plans the single-node TPs and the whole-node layouts it planned already (a 10,000-layer config: 6 of 36)."""
    if memo is None:
        return plan(model, **settings)
    key = tuple(sorted((k, repr(v)) for k, v in settings.items()))
    if key not in memo:
        try:
            memo[key] = plan(model, **settings)
        except WorkloadError as exc:
            memo[key] = exc
    if isinstance(memo[key], WorkloadError):
        raise memo[key]
    return memo[key]


def _card_bytes(settings) -> int | None:
    """The card's memory, which no GPU's weights can reach in a plan that fits (vLLM, SGLang); None for
    transformers, whose layout kvplan does not split by stage."""
    if settings.get("engine", "vllm") not in ("vllm", "sglang"):
        return None
    gpu = settings.get("gpu", defaults.GPU)
    return (gpu if isinstance(gpu, GPU) else resolve_gpu(gpu)).memory_bytes


def _too_few_stages(weights_one_stage: int | None, pp: int, card: int | None) -> bool:
    """True when PP stages cannot hold the weights one stage holds at this TP: each layer's tensors sit on one
    stage (the embeddings on the first, the head on the last, a tied head on both), so the fullest stage holds at
    least weights / PP, and a plan fits only when every stage's weights stay under the card (its pool is
    positive)."""
    return weights_one_stage is not None and card is not None and pp > 1 and weights_one_stage >= pp * card


def _node_notes(best: Plan, per_node: int, fitting: list[Plan]) -> list[str]:
    """Why this layout among those of its size, and whether it spans nodes."""
    notes = []
    if len(fitting) > 1:
        others = ", ".join(f"TP {p.tensor_parallel_size} x PP {p.pipeline_parallel_size}: "
                           f"{p.max_concurrency:,.2f}x" for p in fitting if p is not best)
        notes.append(f"fewest GPUs: {best.num_gpus}; of the layouts that fit there, TP {best.tensor_parallel_size} x "
                     f"PP {best.pipeline_parallel_size} holds the most requests ({best.max_concurrency:,.2f}x; {others})")
    if best.num_gpus > per_node:
        nodes = -(-best.num_gpus // per_node)
        notes.append(f"{best.num_gpus} GPUs span {nodes} nodes of {per_node}: the {best.pipeline_parallel_size} "
                     "pipeline stages pass activations between nodes (TP stays inside each node)")
    return notes




class LayoutChoice(BaseModel):
    """The deployable plan, the fewest-GPU plan in any layout beside it (None when that search found none), and
    the node size both were searched with."""

    model_config = ConfigDict(frozen=True)

    plan: Plan
    fewest: Plan | None
    gpus_per_node: int
    nodes: int
    why: str
    expert_parallel: Plan | None = None   # a MoE's TP x DP with EP on the same GPUs, where it holds more requests

    def summary(self) -> dict:
        """The fields a face shows: the layout, its nodes, and the fewest count beside it."""
        p, f = self.plan, self.fewest
        return {"gpus_per_node": self.gpus_per_node, "nodes": self.nodes, "why": self.why,
                "num_gpus": p.num_gpus, "layout": layout_name(p), "total_concurrency": total_concurrency(p),
                "fewest_any_layout": None if f is None else {
                    "num_gpus": f.num_gpus, "layout": layout_name(f), "tensor_parallel_size": f.tensor_parallel_size,
                    "pipeline_parallel_size": f.pipeline_parallel_size, "data_parallel_size": f.data_parallel_size,
                    "max_concurrency": f.max_concurrency, "kv_cache_tokens": f.kv_cache_tokens,
                    "nodes": -(-f.num_gpus // self.gpus_per_node)},
                "expert_parallel_alternative": None if self.expert_parallel is None else {
                    "layout": layout_name(self.expert_parallel), "num_gpus": self.expert_parallel.num_gpus,
                    "tensor_parallel_size": self.expert_parallel.tensor_parallel_size,
                    "data_parallel_size": self.expert_parallel.data_parallel_size,
                    "total_concurrency": total_concurrency(self.expert_parallel),
                    "flags": f"--tp {self.expert_parallel.tensor_parallel_size} --dp "
                             f"{self.expert_parallel.data_parallel_size} --enable-expert-parallel"}}


def layout_name(p: Plan) -> str:
    """'TP 8 x PP 2', 'TP 8 x DP 2 (EP 16)'."""
    dp = f" x DP {p.data_parallel_size}" if p.data_parallel_size > 1 else ""
    ep = f" (EP {p.expert_parallel_size})" if p.expert_parallel_size > 1 else ""
    return f"TP {p.tensor_parallel_size} x PP {p.pipeline_parallel_size}{dp}{ep}"


def total_concurrency(p: Plan) -> float:
    """Requests of max_model_len held at once over every engine (vLLM prints it per engine)."""
    return round(p.max_concurrency * (p.data_parallel_size if p.engine == "vllm" else 1), 4)


def node_size(gpu: str | GPU, gpus_per_node: int | None) -> int:
    """The node size given, else the catalog's for this GPU (kvplan/data/gpu_nodes.json: 8, GH200 1)."""
    if gpus_per_node is not None:
        return positive("gpus_per_node", gpus_per_node)
    return (gpu if isinstance(gpu, GPU) else resolve_gpu(gpu)).gpus_per_node


def tp_sizes(model: ModelSpec, per_node: int) -> list[int]:
    """Powers of two up to the node that vLLM accepts for this model's heads (Llama-3.1-70B, 64 heads and 8 KV
    heads, in a node of 8: 1, 2, 4, 8; Qwen2.5-7B, 28 heads: 1, 2, 4)."""
    out, tp = [], 1
    while tp <= per_node:
        try:
            resolve_parallel(model, None, tp, 1)
            out.append(tp)
        except WorkloadError:
            pass
        tp *= 2
    return out


def candidate_layouts(model: ModelSpec, per_node: int, max_gpus: int, *, ep_variants: bool):
    """(GPUs, layouts, EP layouts) in order of GPUs: one node's TPs, then whole nodes (TP x PP). `ep_variants`
    (a MoE on vLLM): at each count also every valid TP x DP engines with --enable-expert-parallel, the experts over
    all ranks and each engine its own KV pool (DeepSeek-V3 on 16 H100s: TP 2 x DP 8 holds 12.89x where TP 8 x
    PP 2 holds 5.02x: the MLA latent is replicated over 2 ranks, not 8)."""
    tps = tp_sizes(model, per_node)
    counts = {tp: [{"tp": tp, "pp": 1}] for tp in tps if tp <= max_gpus}
    node_tp = max((t for t in tps if per_node % t == 0), default=None)
    if node_tp is not None:
        for nodes in range(1, max_gpus // per_node + 1):
            counts.setdefault(nodes * per_node, [{"tp": node_tp, "pp": nodes * per_node // node_tp}])
    for count in sorted(counts):
        ep = [{"tp": t, "pp": 1, "dp": count // t, "expert_parallel": True} for t in tps
              if ep_variants and t < count and count % t == 0]
        yield count, counts[count], ep


def deployable(model: ModelSpec | str, *, max_gpus: int = 64, gpus_per_node: int | None = None,
               **settings) -> LayoutChoice:
    """The fewest GPUs in a deployable layout (the module's docstring), with `fewest_gpus`'s answer beside it.
    DeepSeek-V3 on H100s at 163,840 tokens: TP 8 x PP 2 on 16 GPUs (two whole nodes), where the fewest in any
    layout is 11 (TP 1 x PP 11). transformers is planned as fewest_gpus plans it (kvplan does not split its
    layers by stage)."""
    model = as_model(model)
    per_node = node_size(settings.get("gpu", defaults.GPU), gpus_per_node)
    max_gpus = positive("max_gpus", max_gpus)
    memo: dict = {}
    try:
        fewest = fewest_gpus(model, max_gpus=max_gpus, gpus_per_node=per_node, memo=memo, **settings)
    except WorkloadError:
        fewest = None
    engine = settings.get("engine", "vllm")
    if engine == "hf":
        if fewest is None:
            raise WorkloadError(f"{model.name} does not fit on {max_gpus} GPUs with these settings: use a larger GPU "
                                "or a smaller max_model_len")
        return LayoutChoice(plan=fewest, fewest=fewest, gpus_per_node=per_node, nodes=1,
                            why="transformers: one process over the GPUs, the layout fewest_gpus picks")
    dp = (positive("data parallel size", settings.get("dp")) or 1) if engine == "vllm" else 1
    moe = model.arch is not None and model.require_arch().has_experts
    free = {k: v for k, v in settings.items() if k not in ("tp", "pp", "num_gpus")}
    ep_variants = engine == "vllm" and moe and dp == 1 and settings.get("expert_parallel") is None
    last_error, card, planned_any = None, _card_bytes(settings), False
    one_stage: dict[int, int] = {}   # TP -> one GPU's weights at PP 1, which bounds the stages (_too_few_stages)
    for count, options, ep_options in candidate_layouts(model, per_node, max_gpus // dp, ep_variants=ep_variants):
        fitting, ep_fitting = [], []
        for option in options + ep_options:
            if _too_few_stages(one_stage.get(option["tp"]), option["pp"], card):
                continue
            try:
                candidate = _planned(memo, model, {**free, **option})
            except WorkloadError as exc:
                last_error = exc
                continue
            planned_any = True
            if candidate.pipeline_parallel_size == 1 and candidate.data_parallel_size == 1:
                one_stage[option["tp"]] = candidate.weights_bytes
            if candidate.fits:
                (ep_fitting if "dp" in option else fitting).append(candidate)
        if fitting or ep_fitting:
            return _choice(fitting or ep_fitting, ep_fitting if fitting else [], fewest, per_node, count * dp)
    if not planned_any and last_error is not None:
        raise last_error
    raise WorkloadError(f"{model.name} does not fit on {max_gpus} GPUs in a deployable layout (TP a power of two "
                        f"inside a node of {per_node}, PP over whole nodes)"
                        + (f" ({last_error})" if last_error else "")
                        + (f"; in any layout it fits on {fewest.num_gpus}" if fewest else "")
                        + ": use a larger GPU or a smaller max_model_len")


def _most(plans: list[Plan]) -> Plan:
    return max(plans, key=lambda p: (total_concurrency(p), p.kv_cache_tokens))


def _choice(fitting: list[Plan], ep_fitting: list[Plan], fewest: Plan | None, per_node: int,
            count: int) -> LayoutChoice:
    """The layout that holds the most requests at this count, and the best EP layout beside it when that holds
    more (shown, not chosen: TP x PP is the layout the issue and most recipes start from)."""
    best = _most(fitting)
    others = [p for p in fitting if p is not best]
    nodes = -(-count // per_node)
    place = (f"in one node of {per_node}" if count <= per_node else f"over {nodes} whole nodes of {per_node}")
    why = (f"{layout_name(best)} on {count} GPUs {place}: TP {best.tensor_parallel_size} is a power of two that "
           f"divides the heads and stays inside a node" + ("" if best.pipeline_parallel_size == 1 and
                                                            best.data_parallel_size == 1 else
                                                            "; only whole nodes are added past one"))
    if others:
        why += f"; it holds {total_concurrency(best):,.2f}x requests where " + ", ".join(
            f"{layout_name(p)} holds {total_concurrency(p):,.2f}x" for p in others)
    ep = _most(ep_fitting) if ep_fitting else None
    if ep is not None and total_concurrency(ep) <= total_concurrency(best):
        ep = None
    beside = ""   # in the note only: `summary()` carries it as a field, the faces print it on its own line
    if fewest is not None and fewest.num_gpus != count:
        beside = (f"; the fewest GPUs in any layout: {fewest.num_gpus} ({layout_name(fewest)}, "
                  f"{total_concurrency(fewest):,.2f}x)")
    notes = [f"deployable layout: {why}{beside}"] + ([
        f"expert parallelism holds more on the same {count} GPUs: {layout_name(ep)} with --enable-expert-parallel, "
        f"{total_concurrency(ep):,.2f}x requests over its {ep.data_parallel_size} engines"] if ep else [])
    return LayoutChoice(plan=best.model_copy(update={"notes": best.notes + notes}), fewest=fewest,
                        gpus_per_node=per_node, nodes=nodes, why=why, expert_parallel=ep)
