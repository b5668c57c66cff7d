"""kvplan's layout is its architecture (issue #21): folders by stage, a ladder of imports, a model read completely
before planning starts.

Each test here can fail for the reason it names: a module dropped at the top level beside the others, a third
module sharing a name prefix there, an import that climbs back to an earlier stage's caller (a lazy one inside a
function counts too: it is the same dependency, paid later), a circle of imports, a new module no rung claims, or
an engine that reads a source or a config itself.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

import pytest

import kvplan

PACKAGE = Path(kvplan.__file__).resolve().parent

# The ladder, lowest rung first: a module may import its own rung and the rungs below, never one above. Why this
# order: the description types (`model`) are what every stage passes on, so they sit beneath all of them; a source
# hands over data (a config dict, a header summary), which `config` reads into a ModelSpec; weights and the cache
# are arithmetic over that ModelSpec; the GPU catalog is data the planner prices against; the faces call them all.
RUNGS = (
    ("base", ("kvplan.errors", "kvplan.units", "kvplan.dtypes", "kvplan.data")),
    ("model", ("kvplan.model",)),
    ("sources", ("kvplan.sources",)),
    ("config", ("kvplan.config",)),
    ("weights", ("kvplan.weights",)),
    ("cache", ("kvplan.cache",)),
    ("gpus", ("kvplan.gpus",)),
    ("planning", ("kvplan.planning",)),
    ("faces", ("kvplan.cli", "kvplan.__main__", "kvplan")),  # `kvplan` itself: __init__.py, the Python API
)


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("kvplan",) + path.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = modules()


def rung(module: str) -> int:
    """The rung of the longest prefix that claims `module` (kvplan.planning.engines.vllm -> planning)."""
    best = None
    for index, (_, prefixes) in enumerate(RUNGS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    if best is None:
        raise AssertionError(f"{module} is on no rung of tests/test_layout.py's RUNGS: place it in a stage")
    return best[0]


def imports(module: str) -> set[str]:
    """Every kvplan module `module` imports, at its top or inside a function."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from . import verified` imports a module, `from .x import f` module x
                name = f"{target}.{alias.name}"
                found.add(name if name in MODULES else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in MODULES and m != module}


def test_the_top_level_holds_at_most_15_modules_and_no_shared_prefix():
    top = sorted(p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
                 if (p.suffix == ".py") or (p.is_dir() and (p / "__init__.py").is_file()))
    assert len(top) <= 15, top
    prefixes = Counter(name.split("_")[0] for name in top if not name.startswith("__"))
    assert [p for p, n in prefixes.items() if n >= 3] == [], top


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_later_stage(module):
    later = sorted(m for m in imports(module) if rung(m) > rung(module))
    assert later == [], (f"{module} (rung {RUNGS[rung(module)][0]}) imports "
                         + ", ".join(f"{m} (rung {RUNGS[rung(m)][0]})" for m in later))


def test_no_import_circle():
    graph = {m: imports(m) for m in MODULES if m != "kvplan"}  # the package's __init__ is the API face
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_the_ladder_test_sees_lazy_imports():
    """The walk finds imports inside functions: cache.estimate's `estimate("name")` loads the model there."""
    assert "kvplan.config.load" in imports("kvplan.cache.estimate")
    assert rung("kvplan.planning.engines.vllm") == rung("kvplan.planning") > rung("kvplan.gpus")


class _Trace:
    """The kvplan modules whose functions run, in call order, with the engine's call marked off."""

    ENTER, LEAVE = "<engine>", "</engine>"

    def __init__(self):
        self.seen: list[str] = []

    def __call__(self, frame, event, arg):
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if name.startswith("kvplan") and (not self.seen or self.seen[-1] != name):
                self.seen.append(name)

    def engine(self) -> list[str]:
        return self.seen[self.seen.index(self.ENTER) + 1:self.seen.index(self.LEAVE)]

    def before_engine(self) -> list[str]:
        return self.seen[:self.seen.index(self.ENTER)]


@pytest.mark.parametrize("engine, model", [
    ("vllm", "meta-llama/Llama-3.1-8B"),
    ("vllm", "Qwen/Qwen3.5-27B"),            # a hybrid: gated-DeltaNet state pages beside attention
    ("vllm", "openai/gpt-oss-20b"),          # a bundled checkpoint record (its total bytes)
    ("sglang", "deepseek-ai/DeepSeek-R1"),   # MLA, with a bundled per-tensor checkpoint record
    ("hf", "google/gemma-2-9b"),
])
def test_plan_reads_the_model_completely_before_any_engine_code_runs(monkeypatch, engine, model):
    """`kvplan.plan("name")` goes down the stages: the model is found, read and given its checkpoint
    (`kvplan.config.load`) and only then planned; the engine receives a finished ModelSpec and never calls back into
    `kvplan.sources` or `kvplan.config`."""
    from kvplan.config import load
    from kvplan.planning import planner

    load._load_bundled.cache_clear()  # a cached ModelSpec would hide the read from the trace
    real = getattr(planner, f"plan_{engine}")
    trace = _Trace()
    received = []

    def engine_call(m, *args, **kwargs):
        received.append(m)
        trace.seen.append(trace.ENTER)
        try:
            return real(m, *args, **kwargs)
        finally:
            trace.seen.append(trace.LEAVE)

    monkeypatch.setattr(planner, f"plan_{engine}", engine_call)
    sys.setprofile(trace)
    try:
        kvplan.plan(model, engine=engine, gpu="H100-80GB", max_model_len=4096)
    finally:
        sys.setprofile(None)
    (m,) = received
    assert m.checkpoint is not None or m.checkpoint_total is not None or m.checkpoint_note, (
        "the engine got a ModelSpec whose checkpoint was never sought")
    before = trace.before_engine()
    assert {"kvplan.config.load", "kvplan.config.parse", "kvplan.sources.library"} <= set(before), before
    assert any(name.startswith("kvplan.planning.engines.") for name in trace.engine()), trace.engine()
    climbed = sorted({name for name in trace.engine() if name.startswith(("kvplan.sources", "kvplan.config"))})
    assert climbed == [], f"the {engine} engine read a source or a config itself: {climbed}"
