"""Mutation testing of kvplan's engines, planner and readers with mutmut, sharded by module (issue #26 item 5).

Opt-in (never in CI): `pip install mutmut==3.8.1`, then

    python tools/mutation.py                      # every shard below, then docs/mutation.md
    python tools/mutation.py --only lora.py       # shards whose module path ends with a name
    python tools/mutation.py --report-only        # rewrite docs/mutation.md from docs/mutation.json
    python tools/mutation.py --collect /tmp/kvplan-mutation-XXXX kvplan/config/parse.py   # a shard stopped midway
    python tools/mutation.py --again vllm.py      # rerun only the mutants the recorded run did not kill

Each shard mutates one module against the test files that exercise it (mutmut's own run over the whole suite
takes hours on 2 cores; a shard takes seconds to minutes). It runs in a temporary copy of the committed tree
(`git archive HEAD`), so uncommitted edits are not measured and the checkout is never touched. Results go to
docs/mutation.json; docs/mutation.md is written from it with, for every surviving mutant, its diff and the reason it
may stand (docs/mutation_reasons.json, keyed by the module and the mutated line): an equivalent mutant, or a
behaviour no test can observe. A survivor without a reason is a missing test.

`--again` reruns, in a fresh copy, only the recorded shard's survivors and unchecked mutants, and keeps the recorded
kills: mutmut numbers a module's mutants the same way while its source is the same, so it is refused unless the
module's git blob at HEAD is the one the record was measured on (`blob`). Tests only added since cannot revive a
killed mutant; the record says which run its kills come from (`again`). A survivor costs a full run of its tests
(about 40 s of CPU on the engine selection) and a killed mutant a few seconds, so after new tests this is the cheap
way to measure them.

The score is killed / (killed + survived + untested): a timeout counts as killed (the mutant hung the code), a
mutant mutmut could not check at all is reported apart.
"""

from __future__ import annotations

import argparse
import fnmatch
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
                  "test_checkpoint_hostile.py::test_a_deep_checkpoint_over_many_stages_is_planned_in_bounded_work",
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
                    "tests/test_mut_checkpoint.py",
                    *(f"--deselect=tests/{t}" for t in _FIXTURE_BUILT)]
# The config shards leave out test_config_quirks (one test, two transformers models built: the first model build
# imports its modeling code, 5.8 s of the selection's 8 s, the second 5 s under cold caches). mutmut sets each mutant's
# timeout from its tests' time ((time + 1 s) x M): with it, each of parse.py's 69 hanging mutants held a worker about
# 135 s. parse.py and reader.py take no gpt2 branch (the stray head_dim rule is config/layout.py's
# HEAD_DIM_FROM_HIDDEN), and test_mut_readers' reader tests pin the reader's values by hand
CONFIG_TESTS = ["tests/test_config_hostile.py", "tests/test_config_families.py", "tests/test_mut_readers.py",
                # the hand-written tests for the two modules' survivors (a few seconds in all)
                "tests/test_mut_parse.py", "tests/test_mut_parse_rope.py", "tests/test_mut_reader2.py"]
READER_TESTS = CONFIG_TESTS
# The engines are reached through the planner, so the tests that pin an engine's figures are spread over many files
# (published logs, reports regenerated byte for byte, bundled plans): each engine shard runs them all, and mutmut runs
# per mutant only the tests that covered the mutated function. Left out: the CLI's fresh-process tests (a subprocess
# does not report coverage back) and the tests that build transformers models (seconds per mutant; the engines'
# arithmetic does not reach them). The first spec_decode shard, on two files only, left 183 of 275 mutants alive.
ENGINE_TESTS = ["tests/test_vllm_rules.py", "tests/test_vllm_today.py", "tests/test_vllm_batch.py",
                "tests/test_mut_engines.py", "tests/test_sglang.py", "tests/test_engine_branches.py",
                "tests/test_vllm_holdout.py", "tests/test_vllm_dsv4.py", "tests/test_mamba_groups.py",
                "tests/test_planner.py", "tests/test_plan_hf.py", "tests/test_plan_hostile.py", "tests/test_reports.py",
                "tests/test_published.py", "tests/test_bundled_clean.py", "tests/test_api.py",
                "tests/test_workload.py", "tests/test_recommend.py", "tests/test_layouts.py",
                "tests/test_strategies.py",
                # the hand-arithmetic tests written for survivors: each pins one function's figure, so a shard of any
                # engine module runs them all (a second each); files not yet written are skipped by run_shard
                "tests/test_mut_spec.py", "tests/test_mut_profile.py", "tests/test_mut_extras.py",
                "tests/test_mut_kv.py", "tests/test_mut_small.py", "tests/test_mut_peak.py", "tests/test_mut_peak2.py",
                "tests/test_mut_vllm.py",
                "tests/test_mut_vllm_plan.py", "tests/test_mut_sglang.py", "tests/test_mut_inputs.py",
                "tests/test_mut_sglang_rules.py", "tests/test_mut_dsv4.py",
                "tests/test_mut_pool.py", "tests/test_mut_dsv4_peak.py", "tests/test_mut_sglang_check.py",
                "tests/test_mut_sglang_plan.py", "tests/test_mut_sglang_lines.py", "tests/test_mut_runner.py",
                # the behaviour tests beside docs/engine_rules.md's list (the list's own checks read files, no engine)
                *(f"tests/test_engine_rules_doc.py::{t}" for t in (
                    "test_the_033_cublas_note_is_said_from_033_only", "test_the_drafters_own_graphs_are_a_note",
                    "test_batches_in_flight_under_pipeline_parallelism", "test_mamba2_checkpoint_block_from_032",
                    "test_the_qwen35_state_note_counts_the_pages_it_plans",
                    "test_mla_model_dtype_copies_of_a_quantized_kv_b_proj"))]
# the multimodal engine rules are pinned by the tower tests, which build transformers' vision configs (not models)
MM_TESTS = [*ENGINE_TESTS, "tests/test_multimodal.py"]
SHARDS: dict[str, list[str]] = {
    "kvplan/planning/engines/lora.py": ["tests/test_engine_branches.py", "tests/test_vllm_today.py"],
    "kvplan/planning/engines/vllm_mxfp4.py": ["tests/test_engine_branches.py", "tests/test_vllm_holdout.py"],
    "kvplan/planning/engines/hf.py": ["tests/test_plan_hf.py", "tests/test_planner.py", "tests/test_mut_engines.py"],
    "kvplan/planning/engines/hf_peak.py": [*ENGINE_TESTS, "tests/test_validation.py"],
    "kvplan/planning/engines/sglang.py": ENGINE_TESTS,
    "kvplan/planning/engines/sglang_layers.py": ENGINE_TESTS,
    "kvplan/planning/engines/sglang_notes.py": ENGINE_TESTS,
    "kvplan/planning/engines/sglang_pool.py": MM_TESTS,
    "kvplan/planning/engines/sglang_rules.py": ENGINE_TESTS,
    "kvplan/planning/engines/spec_decode.py": ENGINE_TESTS,
    "kvplan/planning/engines/vllm.py": ENGINE_TESTS,
    "kvplan/planning/engines/vllm_cudagraph.py": ENGINE_TESTS,
    "kvplan/planning/engines/vllm_extras.py": ENGINE_TESTS,
    "kvplan/planning/engines/vllm_kv.py": ENGINE_TESTS,
    "kvplan/planning/engines/vllm_mm.py": MM_TESTS,
    "kvplan/planning/engines/vllm_dsv4.py": ENGINE_TESTS,
    "kvplan/planning/engines/vllm_dsv4_peak.py": ENGINE_TESTS,
    "kvplan/planning/engines/unread.py": ENGINE_TESTS,
    "kvplan/planning/engines/vllm_profile.py": ENGINE_TESTS,
    "kvplan/planning/engines/vllm_runner.py": ENGINE_TESTS,
    "kvplan/planning/planner.py": ["tests/test_planner.py", "tests/test_plan_hostile.py", "tests/test_mut_engines.py"],
    "kvplan/planning/inputs.py": ENGINE_TESTS,
    "kvplan/sources/safetensors.py": [*CHECKPOINT_TESTS, "tests/test_mut_safetensors.py"],
    "kvplan/model/checkpoint.py": CHECKPOINT_TESTS,
    "kvplan/config/parse.py": CONFIG_TESTS,
    "kvplan/config/reader.py": READER_TESTS,
}

TIMEOUT_MULTIPLIER = 15
STATUS = re.compile(r"^\s*(\S+): (\w[\w ]*)$")
KILLED = {"killed", "timeout"}
SURVIVED = {"survived", "no tests"}


def blob(module: str, tree: Path = REPO) -> str:
    """The git blob of `module` as it is in `tree`: what a record's mutant names are numbered against."""
    return subprocess.run(["git", "hash-object", str(tree / module)], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()


def run_shard(module: str, tests: list[str], jobs: int, names: list[str] | None = None) -> dict:
    """Mutate `module` in a fresh copy of HEAD, run `tests` against every mutant (or only the mutants `names`
    matches, fnmatch patterns), return the statuses and diffs."""
    with tempfile.TemporaryDirectory(prefix="kvplan-mutation-") as tmp:
        work = Path(tmp)
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
        tests = [t for t in tests if t.startswith("--") or (work / t.split("::")[0]).exists()]  # files yet to come
        selection = "\n    ".join(tests)
        (work / "setup.cfg").write_text(
            f"[mutmut]\nsource_paths=kvplan\nonly_mutate={module}\n"
            f"pytest_add_cli_args_test_selection=\n    {selection}\n"
            # mutmut 3.8.1 kills a mutant at (its tests' time + 1 s) x M of CPU x 2 (workers/isolation.py
            # RLIMIT_CPU) and also at x M of WALL time (ForkRunner.submit register_timeout): at M = 5 on 2 cores
            # shared with other work (load 7), a surviving mutant whose tests ran 3.5 x slower was recorded a
            # timeout, i.e. killed. M = 15 (mutmut's default) leaves room for that load
            f"timeout_multiplier={TIMEOUT_MULTIPLIER}\n"
            # each mutant forked from a server that has only collected the tests, not from mutmut's main process,
            # which ran the whole selection first: hf_peak.py's workers forked from a process that had run
            # test_validation's torch generation hung in a futex (a lock held by a thread the child does not have)
            # until the wall-clock limit, and a timeout counts as killed: 284 of its 732 "kills" were such hangs
            "process_isolation=forkserver\n"
            "also_copy=\n    model_configs\n    validation\n    docs\n    tools\n    app_pages\n    app.py\n")
        # CI=true: hypothesis's "ci" profile (derandomize=True), as .ci/run has it. A random draw in the clean run once
        # found a fuzz case the suite did not expect (test_planner's fp8-calibrated card) and mutmut stopped the whole
        # shard at "Failed to run clean test", every mutant "not checked"; derandomized, each mutant sees the same
        # cases
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "CI": "true"}
        start = time.monotonic()
        # KVPLAN_MUTATION_LOG=FILE keeps mutmut's own output (why a run stopped with mutants "not checked")
        log = os.environ.get("KVPLAN_MUTATION_LOG")
        with open(log, "a") if log else open(os.devnull, "w") as out:
            subprocess.run(["mutmut", "run", "--max-children", str(jobs), *(names or [])], cwd=work, env=env,
                           check=False, stdout=out, stderr=subprocess.STDOUT)   # exits 1 when a mutant survives
        return collect(work, module, tests, round(time.monotonic() - start, 1))


def rerun_names(shard: dict) -> list[str]:
    """The mutants of a recorded run to run again: all but the killed. A mutant no test covered is named as a pattern
    (`NAME*`, which also matches NAME0-NAME9...: rerun too, harmlessly): mutmut 3.8.1 looks an exact name's tests up
    in its coverage map and raises KeyError where there are none (`tests_for_mutant_names`)."""
    return sorted(n + "*" if s == "no tests" else n for n, s in shard["statuses"].items() if s not in KILLED)


def merge_again(old: dict, new: dict, names: list[str]) -> dict:
    """The recorded run with the rerun mutants' statuses replaced by the new run's."""
    rerun = {n for n in new["statuses"] if any(fnmatch.fnmatchcase(n, p) for p in names)}
    statuses = {**old["statuses"], **{n: new["statuses"][n] for n in rerun}}
    survivors = {n: d for n, d in {**old["survivors"], **new["survivors"]}.items() if statuses.get(n) in SURVIVED}
    first = old.get("again", {"seconds": old["seconds"], "tests": old["tests"]})
    return {**new, "statuses": statuses, "survivors": survivors, "isolated": bool(old.get("isolated")),
            "forkserver": bool(old.get("forkserver")),   # the timeouts kept are the old run's
            "again": {**first, "rerun": len(rerun), "kills_kept": sum(s in KILLED for s in old["statuses"].values())}}


def collect(work: Path, module: str, tests: list[str], seconds: float | None) -> dict:
    """The statuses mutmut recorded in `work`; a run stopped midway leaves its unrun mutants "not checked" (other)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    listing = subprocess.run(["mutmut", "results", "--all", "true"], cwd=work, env=env, capture_output=True,
                             text=True, check=True).stdout
    statuses = {m.group(1): m.group(2) for m in map(STATUS.match, listing.splitlines()) if m}
    diffs = {name: _diff(work, env, name) for name, status in statuses.items() if status in SURVIVED}
    return {"module": module, "tests": tests, "seconds": seconds, "statuses": statuses, "survivors": diffs,
            "timeout_multiplier": TIMEOUT_MULTIPLIER, "blob": blob(module, work), "isolated": True,
            "forkserver": True}


def _diff(work: Path, env: dict, name: str) -> list[str]:
    shown = subprocess.run(["mutmut", "show", name], cwd=work, env=env, capture_output=True, text=True,
                           check=True).stdout
    # a removed or added line of the function, past the diff's ---/+++ header; one at the left margin (its `def`
    # line, a default argument's mutant) is written "- def ..." like the indented ones ("-    body = ..."), which
    # `line[:2] in ("- ", "+ ")` dropped: spec_decode.py's three default mutants came out with no diff at all
    return [line if line[1:2] == " " else f"{line[0]} {line[1:]}" for line in shown.splitlines()
            if line[:1] in "-+" and not line.startswith(("--- ", "+++ ")) and len(line) > 1]


def counts(shard: dict) -> dict[str, int]:
    values = list(shard["statuses"].values())
    killed = sum(v in KILLED for v in values)
    survived = sum(v in SURVIVED for v in values)
    return {"mutants": len(values), "killed": killed, "survived": survived,
            "other": len(values) - killed - survived, "timeouts": sum(v == "timeout" for v in values)}


def score(c: dict[str, int]) -> float:
    return 100.0 * c["killed"] / max(1, c["killed"] + c["survived"])


def floor(c: dict[str, int]) -> float:
    """The score with every timeout counted a survivor: the lower bound where timeouts are unverified."""
    return 100.0 * (c["killed"] - c["timeouts"]) / max(1, c["killed"] + c["survived"])


def reason_key(module: str, diff: list[str]) -> str:
    """A survivor's identity that outlives mutmut's numbering: the module and its -/+ lines, spaces squeezed."""
    return module + " | " + " / ".join(" ".join(line.split()) for line in diff)


def prune_reasons(module: str, shard: dict) -> list[str]:
    """Drop `module`'s reasons that no survivor of its finished run uses: a mutant a new test killed ("killed since
    this shard ran") or a line since rewritten, and any "killed since" claim the run just contradicted. Returns the keys
    dropped; a run stopped midway drops none."""
    if not REASONS.exists() or shard["seconds"] is None:
        return []
    reasons = json.loads(REASONS.read_text())
    used = {reason_key(module, diff) for diff in shard["survivors"].values()}
    # a "killed since this shard ran" reason on a mutant that survived this run was wrong: dropped, it shows as missing
    stale = [k for k in reasons if k.startswith(module + " | ")
             and (k not in used or reasons[k].startswith("killed since this shard ran"))]
    if stale:
        REASONS.write_text(json.dumps({k: v for k, v in reasons.items() if k not in stale}, indent=1,
                                      sort_keys=True, ensure_ascii=False) + "\n")
    return stale


def write_report(results: dict[str, dict], reasons: dict[str, str]) -> str:
    intro = ("Written by `python tools/mutation.py` (mutmut 3.8.1, one shard per module against the tests named; "
             "see the script's docstring). Score = killed / (killed + survived), a timeout counted as killed (a "
             "mutant that used more than (its tests' time + 1 s) x 2M of CPU, M the shard's timeout multiplier; their "
             "number in brackets); other = a "
             "segfault or a mutant mutmut could not check, left out of the score. Every survivor is listed with the "
             "reason it stands (docs/mutation_reasons.json), or marked **no reason: a missing test**. mutmut also "
             "stops a mutant at (its tests' time + 1 s) x M of wall time: a shard measured at M = 5 on a loaded "
             "machine may have recorded slow survivors as timeouts, so its timeouts are unverified and the column "
             "'if no timeout killed' gives its score with every timeout counted a survivor; shards at M = 15 "
             "(mutmut's default) leave room for a 3-fold slowdown. 'source': current where the shard ran on the "
             "module as it is now, older where the module has changed since (that score is the older source's until "
             "the shard runs again), warm caches where its kills come from a run in which a test could see results "
             "an earlier test left in kvplan's caches (false kills and false survivors both; the shard's next whole "
             "run replaces them), forked timeouts where its timeouts come from mutants forked from mutmut's main "
             "process after it ran the tests, whose workers can hang on a lock held by a thread the fork left "
             "behind (shards now fork each mutant from a server that only collected the tests).")
    lines = ["# Mutation testing", "", intro, "",
             "| module | mutants | killed (of them timeouts) | survived | other | score % | M | if no timeout killed % "
             "| seconds | source | tests |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    total = {"mutants": 0, "killed": 0, "survived": 0, "other": 0, "timeouts": 0}
    for module, shard in sorted(results.items()):
        c = counts(shard)
        total = {k: total[k] + c[k] for k in total}
        lines.append(f"| `{module}` | {c['mutants']} | {c['killed']} ({c['timeouts']}) | {c['survived']} | "
                     f"{c['other']} | {score(c):.1f} | {shard.get('timeout_multiplier', 5)} | {floor(c):.1f} | "
                     f"{_seconds(shard)} | {_source(module, shard)} | {_tests(shard['tests'])} |")
    lines += [(f"| all | {total['mutants']} | {total['killed']} ({total['timeouts']}) | {total['survived']} | "
               f"{total['other']} | {score(total):.1f} | | {floor(total):.1f} | | | |"), ""]
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


def _seconds(shard: dict) -> str:
    if "again" not in shard:
        return str(shard["seconds"] or "stopped midway")
    a = shard["again"]
    before = f"a run of {a['seconds']} s" if a["seconds"] else "a run stopped midway"
    return (f"{shard['seconds'] or 'stopped midway'}: a rerun of the {a['rerun']} mutants {before} did not kill "
            f"({a['kills_kept']} kills kept from it)")


def _source(module: str, shard: dict) -> str:
    """Whether the shard was measured on the module as it is now: "current", or "older" once the module changed
    since (its score stands for the older source until the shard runs again, whole), or "warm caches" where its
    kills, or the kills a rerun kept, come from a run before tests/conftest.py emptied kvplan's caches for each test
    (commit 7594ed7, `isolated`): vllm_runner.py's such run killed 183 of 184, its next 160 of 183, among the 23 an
    equivalent mutant it had counted killed (`version[:3] < (0, 26)` for `version[:2]`), or "forked timeouts" where
    its timeouts (each counted killed) come from a run that forked mutants from mutmut's main process, whose workers
    can hang on a lock a thread held at the fork (run_shard: hf_peak.py's 284)."""
    path = REPO / module
    if not path.exists() or shard.get("blob") != blob(module):
        return "older"
    if not shard.get("isolated"):
        return "warm caches"
    if counts(shard)["timeouts"] and not shard.get("forkserver"):
        return "forked timeouts"   # its timeouts may be hangs of the fork, not of the mutant (run_shard)
    return "current"


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
    parser.add_argument("--again", nargs="*", default=None,
                        help="rerun only what the recorded run of these shards did not kill (same module source)")
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
    if args.again is not None:
        return again(results, args.again, args.jobs)
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
            if not _finished(module, shard, shard["statuses"]):
                continue
            record(module, shard)
    write_all()
    return 0


def _finished(module: str, shard: dict, ran) -> bool:
    """Whether mutmut checked every mutant it was asked to: a run stopped by a signal, or one whose clean test run
    failed ("Failed to run clean test"), leaves them "not checked", and recording it would replace the shard's last
    whole record with a fragment (a parse.py run stopped after 23 of 314 mutants once did, its reasons pruned). A run
    of no mutants at all is one stopped before mutmut listed them: vllm_kv.py's, stopped 0.8 s in while it generated
    its mutants, was recorded as 0 / 0 and took the shard's 35 reasons with it."""
    if not shard["statuses"]:
        print(f"mutation: {module}: no mutants (mutmut stopped before it generated them): nothing recorded, the last "
              "record kept", file=sys.stderr)
        return False
    missing = sum(shard["statuses"].get(n) == "not checked" for n in ran)
    if missing:
        print(f"mutation: {module}: {missing} mutants not checked (mutmut stopped, or its clean test run failed): "
              "nothing recorded, the last record kept", file=sys.stderr)
    return not missing


def record(module: str, shard: dict) -> None:
    """Keep a finished shard in docs/mutation.json and prune its reasons. The file is read again: a shard runs for
    minutes to an hour, and the record may have been edited (another shard's run, a merge) meanwhile; only this
    shard's entry is replaced."""
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[module] = shard
    RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    prune_reasons(module, shard)


def write_all() -> None:
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    reasons = json.loads(REASONS.read_text()) if REASONS.exists() else {}
    REPORT.write_text(write_report(results, reasons))


def again(results: dict, only: list[str], jobs: int) -> int:
    chosen = [m for m in results if any(m.endswith(o) for o in only)]
    for module in chosen:
        old = results[module]
        if old.get("blob") != blob(module):
            print(f"mutation: {module} changed since its recorded run (or the record has no blob): run it whole "
                  f"with --only", file=sys.stderr)
            return 2
        names = rerun_names(old)
        shard = merge_again(old, run_shard(module, SHARDS[module], jobs, names), names)
        c = counts(shard)
        print(f"{module}: {c['killed']}/{c['killed'] + c['survived']} killed ({score(c):.1f} %), {len(names)} "
              f"rerun in {shard['seconds']} s", file=sys.stderr)
        rerun = [n for n in shard["statuses"] if any(fnmatch.fnmatchcase(n, p) for p in names)]
        if not _finished(module, shard, rerun):
            continue
        record(module, shard)
    write_all()
    return 0 if chosen else 2


if __name__ == "__main__":
    sys.exit(main())
