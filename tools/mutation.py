"""Mutation testing of kvplan's engines, planner and readers with mutmut, sharded by module (issue #26 item 5).

Opt-in (never in CI): `pip install mutmut==3.8.1`, then

    python tools/mutation.py                      # every shard below, then docs/mutation.md
    python tools/mutation.py --only lora.py       # shards whose module path ends with a name
    python tools/mutation.py --report-only        # rewrite docs/mutation.md from docs/mutation.json
    python tools/mutation.py --collect /tmp/kvplan-mutation-XXXX kvplan/config/parse.py   # a shard stopped midway

Each shard mutates one module against the test files that exercise it (mutmut's own run over the whole suite
takes hours on 2 cores; a shard takes seconds to minutes). It runs in a temporary copy of the committed tree
(`git archive HEAD`), so uncommitted edits are not measured and the checkout is never touched. Results go to
docs/mutation.json; docs/mutation.md is written from it with, for every surviving mutant, its diff and the reason it
may stand (docs/mutation_reasons.json, keyed by the module and the mutated line): an equivalent mutant, or a
behaviour no test can observe. A survivor without a reason is a missing test.

The score is killed / (killed + survived + untested): a timeout counts as killed (the mutant hung the code), a
mutant mutmut could not check at all is reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "mutation.json"
REASONS = REPO / "docs" / "mutation_reasons.json"
REPORT = REPO / "docs" / "mutation.md"

# module -> the test files that exercise it (a mutant is killed when one of them fails). An entry may be a node id or
# `--deselect=NODE`: mutmut runs, per mutant, every selected test that covered the mutated function, so a 25-second
# test (a replica checkpoint written with torch) multiplies by each mutant of the functions it touches.
# The checkpoint shard leaves out the tests built on a checkpoint transformers writes (15 s of fixture per mutant run,
# the module-scoped fixture is rebuilt in each mutant's process): the header checks, the fake Hub and hand-built
# headers (tests/test_mut_readers.py) exercise the same functions in well under a second.
_FIXTURE_BUILT = ["test_checkpoint.py::test_minimax_m2_replica_headers_sum_to_hf_mem",
                  "test_checkpoint_hostile.py::test_a_deep_checkpoint_over_many_stages_is_planned_in_bounded_time",
                  "test_checkpoint.py::test_folder_headers_sum_to_the_stored_bytes",
                  "test_checkpoint.py::test_folder_split_over_tp_and_pp",
                  "test_checkpoint.py::test_quantized_layout_is_counted_as_stored",
                  "test_checkpoint.py::test_a_float32_copy_is_served_in_the_model_dtype",
                  "test_checkpoint.py::test_missing_shard_and_corrupt_header_are_one_line",
                  "test_checkpoint.py::test_hub_headers_by_range_requests",
                  "test_checkpoint.py::test_hub_single_file_and_quantized",
                  "test_checkpoint.py::test_hub_offline_reads_the_cached_shards_or_says_why",
                  "test_checkpoint.py::test_app_hub_models_carry_their_headers"]
CHECKPOINT_TESTS = ["tests/test_checkpoint.py", "tests/test_checkpoint_hostile.py", "tests/test_mut_readers.py",
                    *(f"--deselect=tests/{t}" for t in _FIXTURE_BUILT)]
CONFIG_TESTS = ["tests/test_config_hostile.py", "tests/test_config_quirks.py", "tests/test_config_families.py",
                "tests/test_mut_readers.py"]
# The reader's functions (get, first, need_int) run in every config test, so each of its mutants ran them all: the
# gpt2 case of test_config_quirks builds transformers' GPT2 config (5.4 s of the selection's 6.7 s) per mutant;
# test_mut_readers' reader tests pin the same values by hand
READER_TESTS = [*CONFIG_TESTS,
                "--deselect=tests/test_config_quirks.py::test_stray_head_dim_is_ignored_like_transformers_does[gpt2-base0]"]
SGLANG_TESTS = ["tests/test_sglang.py", "tests/test_mut_engines.py"]
VLLM_TESTS = ["tests/test_vllm_rules.py", "tests/test_vllm_today.py", "tests/test_vllm_batch.py",
              "tests/test_mut_engines.py"]
# vLLM's KV accounting is also pinned by the hybrid-group, branch and hold-out tests (Mamba pages, MLA alignment,
# the published start-up logs): without them its shard left 65 of its first 239 mutants alive
VLLM_KV_TESTS = [*VLLM_TESTS, "tests/test_mamba_groups.py", "tests/test_engine_branches.py",
                 "tests/test_vllm_holdout.py"]
SHARDS: dict[str, list[str]] = {
    "kvplan/planning/engines/lora.py": ["tests/test_engine_branches.py", "tests/test_vllm_today.py"],
    "kvplan/planning/engines/vllm_mxfp4.py": ["tests/test_engine_branches.py", "tests/test_vllm_holdout.py"],
    "kvplan/planning/engines/hf.py": ["tests/test_plan_hf.py", "tests/test_planner.py", "tests/test_mut_engines.py"],
    "kvplan/planning/engines/hf_peak.py": ["tests/test_plan_hf.py", "tests/test_mut_engines.py"],
    "kvplan/planning/engines/sglang.py": SGLANG_TESTS,
    "kvplan/planning/engines/sglang_layers.py": SGLANG_TESTS,
    "kvplan/planning/engines/sglang_notes.py": SGLANG_TESTS,
    "kvplan/planning/engines/sglang_pool.py": SGLANG_TESTS,
    "kvplan/planning/engines/sglang_rules.py": SGLANG_TESTS,
    "kvplan/planning/engines/spec_decode.py": ["tests/test_engine_branches.py", "tests/test_mut_engines.py"],
    "kvplan/planning/engines/vllm.py": VLLM_TESTS,
    "kvplan/planning/engines/vllm_cudagraph.py": VLLM_TESTS,
    "kvplan/planning/engines/vllm_extras.py": VLLM_TESTS,
    "kvplan/planning/engines/vllm_kv.py": VLLM_KV_TESTS,
    "kvplan/planning/engines/vllm_mm.py": ["tests/test_multimodal.py", "tests/test_mut_engines.py"],
    "kvplan/planning/engines/vllm_profile.py": VLLM_TESTS,
    "kvplan/planning/engines/vllm_runner.py": VLLM_TESTS,
    "kvplan/planning/planner.py": ["tests/test_planner.py", "tests/test_plan_hostile.py", "tests/test_mut_engines.py"],
    "kvplan/planning/inputs.py": ["tests/test_planner.py", "tests/test_plan_hostile.py", "tests/test_mut_engines.py"],
    "kvplan/sources/safetensors.py": CHECKPOINT_TESTS,
    "kvplan/model/checkpoint.py": CHECKPOINT_TESTS,
    "kvplan/config/parse.py": CONFIG_TESTS,
    "kvplan/config/reader.py": READER_TESTS,
}

STATUS = re.compile(r"^\s*(\S+): (\w[\w ]*)$")
KILLED = {"killed", "timeout"}
SURVIVED = {"survived", "no tests"}


def run_shard(module: str, tests: list[str], jobs: int) -> dict:
    """Mutate `module` in a fresh copy of HEAD, run `tests` against every mutant, return the statuses and diffs."""
    with tempfile.TemporaryDirectory(prefix="kvplan-mutation-") as tmp:
        work = Path(tmp)
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
        tests = [t for t in tests if t.startswith("--") or (work / t.split("::")[0]).exists()]  # files yet to come
        selection = "\n    ".join(tests)
        (work / "setup.cfg").write_text(
            f"[mutmut]\nsource_paths=kvplan\nonly_mutate={module}\n"
            f"pytest_add_cli_args_test_selection=\n    {selection}\n"
            # a mutant may use (tests' own time + 1 s) x 5 x 2 of CPU, not mutmut's x 15 x 2: a hung mutant (an
            # index that never advances) then costs ~20 s of a shared core, not a minute; still timeouts, killed
            "timeout_multiplier=5\n"
            "also_copy=\n    model_configs\n    validation\n    docs\n    tools\n    app_pages\n    app.py\n")
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        start = time.monotonic()
        subprocess.run(["mutmut", "run", "--max-children", str(jobs)], cwd=work, env=env, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)   # exits 1 when a mutant survives
        return collect(work, module, tests, round(time.monotonic() - start, 1))


def collect(work: Path, module: str, tests: list[str], seconds: float | None) -> dict:
    """The statuses mutmut recorded in `work`; a run stopped midway leaves its unrun mutants "not checked" (other)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    listing = subprocess.run(["mutmut", "results", "--all", "true"], cwd=work, env=env, capture_output=True,
                             text=True, check=True).stdout
    statuses = {m.group(1): m.group(2) for m in map(STATUS.match, listing.splitlines()) if m}
    diffs = {name: _diff(work, env, name) for name, status in statuses.items() if status in SURVIVED}
    return {"module": module, "tests": tests, "seconds": seconds, "statuses": statuses, "survivors": diffs}


def _diff(work: Path, env: dict, name: str) -> list[str]:
    shown = subprocess.run(["mutmut", "show", name], cwd=work, env=env, capture_output=True, text=True,
                           check=True).stdout
    return [line for line in shown.splitlines() if line[:2] in ("- ", "+ ")]


def counts(shard: dict) -> dict[str, int]:
    values = list(shard["statuses"].values())
    killed = sum(v in KILLED for v in values)
    survived = sum(v in SURVIVED for v in values)
    return {"mutants": len(values), "killed": killed, "survived": survived,
            "other": len(values) - killed - survived, "timeouts": sum(v == "timeout" for v in values)}


def score(c: dict[str, int]) -> float:
    return 100.0 * c["killed"] / max(1, c["killed"] + c["survived"])


def reason_key(module: str, diff: list[str]) -> str:
    """A survivor's identity that outlives mutmut's numbering: the module and its -/+ lines, spaces squeezed."""
    return module + " | " + " / ".join(" ".join(line.split()) for line in diff)


def write_report(results: dict[str, dict], reasons: dict[str, str]) -> str:
    intro = ("Written by `python tools/mutation.py` (mutmut 3.8.1, one shard per module against the tests named; "
             "see the script's docstring). Score = killed / (killed + survived), a timeout counted as killed (a "
             "mutant that used more than (its tests' time + 1 s) x 10 of CPU; their number in brackets); other = a "
             "segfault or a mutant mutmut could not check, left out of the score. Every survivor is listed with the "
             "reason it stands (docs/mutation_reasons.json), or marked **no reason: a missing test**.")
    lines = ["# Mutation testing", "", intro, "",
             "| module | mutants | killed (of them timeouts) | survived | other | score % | seconds | tests |",
             "|---|---|---|---|---|---|---|---|"]
    total = {"mutants": 0, "killed": 0, "survived": 0, "other": 0, "timeouts": 0}
    for module, shard in sorted(results.items()):
        c = counts(shard)
        total = {k: total[k] + c[k] for k in total}
        lines.append(f"| `{module}` | {c['mutants']} | {c['killed']} ({c['timeouts']}) | {c['survived']} | "
                     f"{c['other']} | {score(c):.1f} | {shard['seconds'] or 'stopped midway'} | "
                     f"{_tests(shard['tests'])} |")
    lines += [(f"| all | {total['mutants']} | {total['killed']} ({total['timeouts']}) | {total['survived']} | "
               f"{total['other']} | {score(total):.1f} | | |"), ""]
    waiting = [m for m in SHARDS if m not in results]
    if waiting:
        lines += ["Shards not measured yet (`python tools/mutation.py --only NAME`): "
                  + ", ".join(f"`{m}`" for m in waiting) + ".", ""]
    lines += ["## Survivors", ""]
    for module, shard in sorted(results.items()):
        for name, diff in sorted(shard["survivors"].items(), key=lambda kv: _number(kv[0])):
            why = reasons.get(reason_key(module, diff), "**no reason: a missing test**")
            lines.append(f"- `{name.split('.')[-1]}` ({module}): " + " ".join(f"`{d}`" for d in diff) + f" — {why}")
    return "\n".join(lines) + "\n"


def _tests(tests: list[str]) -> str:
    files = ", ".join(f"`{t}`" for t in tests if not t.startswith("--"))
    left_out = sum(t.startswith("--deselect") for t in tests)
    return files + (f" ({left_out} tests left out: tools/mutation.py `_FIXTURE_BUILT`)" if left_out else "")


def _number(name: str) -> tuple[str, int]:
    head, _, n = name.rpartition("_")
    return head, int(n) if n.isdigit() else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="shards whose module path ends with one of these")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--report-only", action="store_true", help="rewrite docs/mutation.md from docs/mutation.json")
    parser.add_argument("--collect", nargs=2, metavar=("DIR", "MODULE"),
                        help="record what an interrupted shard's copy (DIR, kept under /tmp) measured of MODULE")
    args = parser.parse_args(argv)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.collect:
        work, module = Path(args.collect[0]), args.collect[1]
        selection = (work / "setup.cfg").read_text().split("pytest_add_cli_args_test_selection=")[1]
        tests = [t.strip() for t in selection.split("timeout_multiplier")[0].split()]
        results[module] = collect(work, module, tests, None)
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    if not args.report_only and not args.collect:
        chosen = [m for m in SHARDS if args.only is None or any(m.endswith(o) for o in args.only)]
        if not chosen:
            print(f"mutation: no shard ends with {args.only}: pick from {', '.join(SHARDS)}", file=sys.stderr)
            return 2
        for module in chosen:
            shard = run_shard(module, SHARDS[module], args.jobs)
            c = counts(shard)
            print(f"{module}: {c['killed']}/{c['killed'] + c['survived']} killed ({score(c):.1f} %), "
                  f"{shard['seconds']} s", file=sys.stderr)
            results[module] = shard
            RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")   # each shard kept as it ends
    reasons = json.loads(REASONS.read_text()) if REASONS.exists() else {}
    REPORT.write_text(write_report(results, reasons))
    return 0


if __name__ == "__main__":
    sys.exit(main())
