"""The answer every engine's plan gives (`Plan`, one `StageMemory` per pipeline stage) and the invariants each must
keep (`checked`). The engines fill it in `kvplan.planning.engines.<engine>`; `kvplan.planning.planner` dispatches to them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field

from ..errors import PlanInvariantError, shown


class StageMemory(BaseModel):
    """One GPU's budget (a TP rank of one pipeline stage)."""

    model_config = ConfigDict(frozen=True)

    stage: int
    layers: str
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    kv_pool_bytes: int
    kv_bytes_per_token: int
    num_blocks: int


class Plan(BaseModel):
    """Where a model fits: per-GPU memory (binding stage), KV capacity and the serve command."""

    model_config = ConfigDict(frozen=True)

    model: str
    engine: str
    engine_version: str
    gpu: str
    gpu_memory_bytes: int
    num_gpus: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    gpu_memory_utilization: float
    dtype: str
    kv_cache_dtype: str
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    weights_bytes: int              # per GPU (binding stage)
    activation_bytes: int
    non_torch_bytes: int
    kv_pool_bytes: int              # per GPU
    kv_bytes_per_token: int         # per GPU
    kv_cache_tokens: int            # vLLM's "GPU KV cache size: N tokens"
    num_blocks: int
    max_concurrency: float          # vLLM's "Maximum concurrency for max_model_len tokens per request"
    fits: bool
    shortfall_bytes: int            # > 0: how much one max_model_len request misses by
    max_model_len_that_fits: int
    stages: list[StageMemory]
    vllm_command: str
    formula: list[str]
    notes: list[str]
    verified: bool = True           # False: kvplan has not proven its rules for this model (see `warnings`)
    warnings: list[str] = []        # also the first notes, prefixed "not verified:"
    data_parallel_size: int = 1     # engine replicas (vLLM --data-parallel-size, SGLang --dp); num_gpus counts them
    expert_parallel_size: int = 1   # ranks the routed experts are divided over (1: experts split by TP like the rest)
    # Per-GPU budget lines beyond the four above, each taken from the KV budget: "CUDA graphs (estimate)",
    # "draft model weights", "LoRA adapter slots", "all-to-all buffers". Ordered as printed.
    extra: dict[str, int] = {}
    kv_cache_memory_bytes: int | None = None   # the pool vLLM was told to take (--kv-cache-memory-bytes)
    suggested_kv_cache_memory_bytes: int | None = None  # what vLLM >= 0.21 suggests for this utilisation
    weights_source: str = "config rule"   # or "checkpoint": where weights_bytes came from
    weights_provenance: str = ""          # the headers read (or why none), in words
    weights_components: dict[str, int] = {}   # whole model, resident bytes by component (language_model, vision...)
    weights_checkpoint_bytes: int | None = None  # whole model, as loaded from the checkpoint's tensors
    weights_rule_bytes: int | None = None        # whole model, by kvplan's config rule
    checkpoint_stored_bytes: int | None = None   # what the checkpoint stores (headers or a bundled record's total)
    rule_stored_bytes: int | None = None         # what the config rule says it stores (+ MTP layers, towers)
    # The binding stage's KV layers as the engine sized them (kvplan.planning.engines.vllm_kv.VllmLayerSpec: the drafter's
    # layers, Mamba state pages and widened conv states included), so a concurrency at another length uses them;
    # not part of the JSON.
    kv_layers: tuple[Any, ...] = Field(default=(), exclude=True, repr=False)
    kv_rules: Any = Field(default=None, exclude=True, repr=False)  # vllm_kv.KVRules the blocks were counted with

    @computed_field  # type: ignore[prop-decorator]
    @property
    def command(self) -> dict[str, str]:
        """The launch command with its engine named ({"engine": "sglang", "line": "python -m sglang.launch_server
        ..."}): `vllm_command` holds SGLang's and transformers' lines too, and stays in the JSON only for the
        readers of kvplan's earlier JSON (issue #24)."""
        return {"engine": self.engine, "line": self.vllm_command}

    def budget_lines(self) -> list[tuple[str, int]]:
        """Every per-GPU line that sums to what the plan uses: the four figures and the extras, the KV pool last."""
        return ([("weights", self.weights_bytes), (self.activation_label, self.activation_bytes),
                 ("non-torch overhead", self.non_torch_bytes)] + list(self.extra.items())
                + [("KV pool", self.kv_pool_bytes)])

    @property
    def activation_label(self) -> str:
        """SGLang's figure is not an activation peak but the (1 - mem_fraction_static) share it keeps back for
        activations, CUDA graphs and the rest (kvplan.planning.engines.sglang: memory x (1 - fraction))."""
        return "reserve (1 - mem_fraction_static)" if self.engine == "sglang" else "activation peak"

    def rule_vs_checkpoint(self) -> tuple[int, float] | None:
        """(bytes, %) by which the config rule differs from the checkpoint as loaded; None without both."""
        return _diff(self.weights_rule_bytes, self.weights_checkpoint_bytes)

    def rule_vs_stored(self) -> tuple[int, float] | None:
        """(bytes, %) by which the rule's stored bytes differ from what the checkpoint stores; None without both."""
        return _diff(self.rule_stored_bytes, self.checkpoint_stored_bytes)


def _diff(rule: int | None, truth: int | None) -> tuple[int, float] | None:
    return (rule - truth, 100 * (rule - truth) / truth) if rule and truth else None


def checked(p: Plan) -> Plan:
    """The plan, if it keeps the invariants every engine's answer must keep; PlanInvariantError naming the first
    broken one otherwise (a kvplan bug: an impossible answer is never returned)."""
    figures = dict(p.budget_lines())
    used = sum(figures.values())
    counts = {**figures, "bytes per token": p.kv_bytes_per_token, "KV tokens": p.kv_cache_tokens,
              "blocks": p.num_blocks, "concurrency": p.max_concurrency, "shortfall": p.shortfall_bytes,
              **{f"stage {s.stage} {k}": v for s in p.stages for k, v in s.model_dump().items() if k.endswith("bytes")}}
    rules = [
        ("the memory fraction is in (0, 1]", 0 < p.gpu_memory_utilization <= 1, p.gpu_memory_utilization),
        ("the KV pool is no larger than the card", p.kv_pool_bytes <= p.gpu_memory_bytes, p.kv_pool_bytes),
        *((f"the per-GPU {name} is >= 0", value >= 0, value) for name, value in counts.items()),
        ("a plan that fits uses no more than the card", not p.fits or used <= p.gpu_memory_bytes, used),
        ("a plan that fits holds one max_model_len request", not p.fits or (
            p.shortfall_bytes == 0 and p.max_model_len_that_fits >= p.max_model_len), p.max_model_len_that_fits),
        ("a plan that does not fit says by how much", p.fits or p.shortfall_bytes > 0, p.shortfall_bytes),
        ("the GPUs are TP x PP x DP", p.num_gpus == p.tensor_parallel_size * p.pipeline_parallel_size
         * p.data_parallel_size, p.num_gpus),
    ]
    for name, ok, value in rules:
        if not ok:
            raise PlanInvariantError(f"kvplan's {p.engine} plan for {p.model} on {p.gpu} breaks its invariant "
                                     f"'{name}' (got {shown(value)}): please report it with the settings that gave it")
    return p


class FixPlan(BaseModel):
    """One fix of a plan that does not fit, as data beside its sentence: the change, the `kvplan plan` flags that
    make it, the plan() settings those flags set, and the figures of the plan it gives (None where it could not be
    planned again, with the reason in `error`)."""

    model_config = ConfigDict(frozen=True)

    change: str                     # the sentence the CLI prints after "to fit:"
    flags: str                      # "--tp 2 --pp 1", "--kv-dtype fp8", "--gpu-memory-utilization 0.95"
    settings: dict[str, Any]        # what the flags set, as plan() keywords: {"tp": 2, "pp": 1}
    fits: bool | None = None
    num_gpus: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    command: dict[str, str] | None = None
    error: str | None = None
