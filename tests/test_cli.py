"""`kvplan estimate` from the command line: the table, --json, and one-line errors with exit code 2.

Most cases call `kvplan.cli.main([...])` in-process; a few run `python -m kvplan` to see the real exit code,
streams and imports of a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.cli import main

ROOT = Path(__file__).resolve().parents[1]
LLAMA = "meta-llama/Llama-3.1-8B"


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of main(argv); argparse's own errors arrive as SystemExit."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def run_process(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "kvplan", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=60)


def assert_one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kvplan: error: ")
    return lines[0]


def write_config(tmp_path: Path, data, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# ---------------------------------------------------------------- the table


def test_table_labels_gib_and_gb_honestly(capsys):
    code, out, err = run(["estimate", "meta-llama/Llama-2-70b-hf", "--seq-len", "4096", "--kv-dtype", "fp16"], capsys)
    assert code == 0 and err == ""
    line = next(x for x in out.splitlines() if x.startswith("KV cache:"))
    m = re.fullmatch(r"KV cache: ([\d,]+) B = ([\d.,]+) GiB = ([\d.,]+) GB", line)
    assert m, line
    total = int(m.group(1).replace(",", ""))
    # Llama-2-70b at 4,096 tokens in fp16: 80 x 8 KV heads x 128 x 2 x 2 B x 4,096
    assert total == 1_342_177_280
    assert float(m.group(2)) == round(total / 2**30, 2) == 1.25   # binary, labelled GiB
    assert float(m.group(3)) == round(total / 1e9, 2) == 1.34     # decimal, labelled GB


def test_table_shows_groups_and_formula(capsys):
    code, out, _ = run(["estimate", "google/gemma-2-9b", "--seq-len", "8192", "--batch-size", "2"], capsys)
    assert code == 0
    assert re.search(r"^sliding\s+21\s+2 x 8 KV heads x 256, window 4096\s+4,096\s+1,409,286,144$", out, re.M)
    assert re.search(r"^full\s+21\s+.*8,192\s+2,818,572,288$", out, re.M)
    assert "formula: 21 sliding layers x 2 x 8 KV heads x 256 head_dim x 4,096 tokens x 2 seq x 2 B" in out
    assert "note: head_dim 256 comes from the config" in out


def test_table_for_constant_state(capsys):
    code, out, _ = run(["estimate", "state-spaces/mamba-2.8b-hf", "--seq-len", "100"], capsys)
    assert code == 0 and re.search(r"^state\s+64\s+.*const\s+26,214,400$", out, re.M)


@pytest.mark.parametrize(
    "extra",
    [
        ["--cache", "static", "--max-cache-len", "8192"],
        ["--cache", "quantized", "--kv-dtype", "int4", "--prompt-len", "1000"],
        ["--cache", "offloaded"],
        ["--cache", "quantized", "--kv-dtype", "fp8"],
        ["--cache", "quantized", "--kv-dtype", "int8", "--quant-backend", "hqq", "--q-group-size", "32",
         "--residual-length", "64"],
    ],
)
def test_every_cache_option(extra, capsys):
    code, out, err = run(["estimate", LLAMA, "--seq-len", "4096", *extra], capsys)
    assert code == 0 and err == "" and "KV cache:" in out


# ---------------------------------------------------------------- --json


def test_json_is_one_object_on_stdout(capsys):
    code, out, err = run(["estimate", LLAMA, "--seq-len", "8192", "--batch-size", "4", "--kv-dtype", "fp32",
                          "--json"], capsys)
    assert code == 0 and err == ""
    data = json.loads(out)  # the whole stdout: nothing before or after the object
    assert isinstance(data, dict)
    # 32 layers x 2 x 8 KV heads x 128 x 4 B (fp32) x 8,192 tokens x batch 4 = 8 GiB
    assert data["kv_cache_bytes"] == 32 * 2 * 8 * 128 * 4 * 8192 * 4 == 8 * 2**30
    assert data["groups"][0]["bytes"] == data["kv_cache_bytes"]
    assert data["formula"].endswith("= 8,589,934,592 B (8.00 GiB)")
    assert data["kv_dtype"] == "float32" and data["batch_size"] == 4


def test_json_in_a_fresh_process():
    proc = run_process("estimate", "deepseek-ai/DeepSeek-V3", "--seq-len", "1", "--json")
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(proc.stdout)["kv_cache_bytes"] == 61 * 576 * 2


def test_models_json(capsys):
    code, out, _ = run(["models", "--json"], capsys)
    rows = json.loads(out)
    assert code == 0 and any(r["id"] == LLAMA and r["kv_heads"] == 8 for r in rows)


# ---------------------------------------------------------------- bad input: exit 2, one line, no traceback


@pytest.mark.parametrize(
    "args, needle",
    [
        (["estimate", "no-such-model", "--seq-len", "10"], "no-such-model"),
        (["estimate", LLAMA, "--seq-len", "-5"], "--seq-len"),                   # a token count is positive
    ],
)
def test_bad_input_in_a_fresh_process(args, needle):
    proc = run_process(*args)
    line = assert_one_line_error(proc.returncode, proc.stdout, proc.stderr)
    assert needle in line


@pytest.mark.parametrize(
    "args, needle",
    [
        (["estimate", "no-such-model", "--seq-len", "10"], "kvplan models"),      # not bundled, not a Hub id
        (["estimate", LLAMA, "--seq-len", "0"], "seq_len"),
        (["estimate", LLAMA, "--seq-len", "-1"], "--seq-len"),
        (["estimate", LLAMA, "--seq-len", "abc"], "--seq-len"),                   # argparse: invalid int
        (["estimate", LLAMA], "--seq-len"),                                       # missing --seq-len
        (["estimate", LLAMA, "--seq-len", "10", "--kv-dtype", "int3"], "--kv-dtype"),
        (["estimate", LLAMA, "--seq-len", "10", "--frobnicate"], "--frobnicate"),  # unknown flag
        (["estimate", LLAMA, "--seq-len", "10", "--cache", "paged"], "--cache"),
        (["estimate", LLAMA, "--seq-len", "10", "--batch-size", "0"], "batch_size"),
        (["estimate", LLAMA, "--seq-len", "10", "--prompt-len", "11"], "prompt_len"),
        (["estimate", LLAMA, "--seq-len", "10", "--cache", "static", "--max-cache-len", "5"], "--max-cache-len"),
        (["estimate", LLAMA, "--seq-len", "10", "--kv-dtype", "fp8", "--cache", "static"], "--cache quantized"),
        (["estimate", LLAMA, "--seq-len", "10", "--kv-dtype", "int8"], "--cache quantized"),
        (["estimate", LLAMA, "--seq-len", "10", "--kv-dtype", "bf16", "--dtype", "fp16"], "kv_dtype"),
        (["estimate", "google/gemma-2-9b", "--seq-len", "10", "--cache", "quantized"], "full-attention"),
        (["estimate", LLAMA, "--seq-len", "10", "--cache", "quantized", "--kv-dtype", "int8",
          "--quant-backend", "quanto"], "quanto"),
        (["estimate", LLAMA, "--seq-len", "10", "--num-layers", "0"], "--num-layers"),
        (["estimate", LLAMA, "--seq-len", "10", "--num-layers", str(10**12)], "--num-layers"),
        (["estimate", "./missing/config.json", "--seq-len", "10"], "no such file"),
        (["frobnicate"], "frobnicate"),                                           # unknown command
    ],
)
def test_bad_input(args, needle, capsys):
    line = assert_one_line_error(*run(args, capsys))
    assert needle in line


def test_unknown_hub_id_offline(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    line = assert_one_line_error(*run(["estimate", "some-org/not-bundled-model", "--seq-len", "10"], capsys))
    assert "some-org/not-bundled-model" in line


@pytest.mark.parametrize(
    "content, needle",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2, 3]", "not an object"),
        ("", "not valid JSON"),
        (b"\xff\xfe\x00garbage", "UTF-8"),
        ('{"model_type": "llama", "num_hidden_layers": "thirty-two", "num_attention_heads": 32, '
         '"hidden_size": 4096}', "num_hidden_layers"),
        ('{"model_type": "bert", "num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 768}',
         "decoder"),
    ],
)
def test_malformed_config_file(content, needle, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    line = assert_one_line_error(*run(["estimate", str(path), "--seq-len", "10"], capsys))
    assert needle in line


def test_folder_without_config(tmp_path, capsys):
    line = assert_one_line_error(*run(["estimate", str(tmp_path), "--seq-len", "10"], capsys))
    assert "config.json" in line


# ---------------------------------------------------------------- unknown families: name the field and the flag


# inputs: an unknown family's config
UNKNOWN = {"model_type": "my_new_arch", "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
           "torch_dtype": "bfloat16"}


@pytest.mark.parametrize(
    "drop, extra, field, fix, per_token",
    [
        ("num_hidden_layers", {}, "num_layers", ["--num-layers", "32"], 32 * 2 * 32 * 128 * 2),
        ("num_attention_heads", {}, "num_heads", ["--num-heads", "32"], 32 * 2 * 32 * 128 * 2),
        ("hidden_size", {}, "hidden_size", ["--head-dim", "128"], 32 * 2 * 32 * 128 * 2),
        # 32 heads cannot share 5 KV heads: the config is inconsistent, the user says what is meant
        (None, {"num_key_value_heads": 5}, "KV heads", ["--kv-heads", "8"], 32 * 2 * 8 * 128 * 2),
    ],
)
def test_missing_field_names_field_and_flag(drop, extra, field, fix, per_token, tmp_path, capsys):
    data = {**UNKNOWN, **extra}
    data.pop(drop, None)
    path = write_config(tmp_path, data)
    line = assert_one_line_error(*run(["estimate", str(path), "--seq-len", "1"], capsys))
    assert field in line and fix[0] in line, line
    code, out, err = run(["estimate", str(path), "--seq-len", "1", "--json", *fix], capsys)
    assert code == 0 and err == ""
    assert json.loads(out)["kv_cache_bytes"] == per_token


# ---------------------------------------------------------------- imports


@pytest.mark.parametrize("extra", [[], ["--json"], ["--cache", "quantized", "--kv-dtype", "int4"]])
def test_estimate_never_imports_heavy_modules(extra):
    code = (
        "import sys\n"
        "from kvplan.cli import main\n"
        f"rc = main(['estimate', 'meta-llama/Llama-3.1-8B', '--seq-len', '8192', *{extra!r}])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'streamlit'})\n"
        "print('HEAVY', heavy, rc, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY [] 0" in proc.stderr


@pytest.mark.parametrize("text, tokens", [
    ("32768", 32_768), ("32,768", 32_768), ("128k", 128_000), ("128K", 131_072), ("1M", 1_048_576),
    ("1m", 1_000_000), ("25.6k", 25_600),   # vLLM utils/argparse_utils.py human_readable_int (0.33): k 10^3, K 2^10
])
def test_lengths_are_read_as_vllm_reads_them(text, tokens, capsys):
    rc, out, _ = run(["estimate", "Qwen/Qwen2.5-7B", "--seq-len", text], capsys)
    assert rc == 0 and f"seq_len={tokens:,}" in out
    rc, out, _ = run(["plan", "Qwen/Qwen2.5-7B", "--gpu", "H100", "--max-model-len", text], capsys)
    assert f"max_model_len {tokens:,}" in out


@pytest.mark.parametrize("text, says", [
    ("12x", "is not a token count: write 32768, 32k (32,000) or 32K (32,768)"),
    ("1.5K", "a binary suffix takes a whole number (write 1.5k for a decimal count)"),
    ("12.3", "is not a whole number of tokens"), ("-5", "a token count is positive"), ("9" * 40, "at most a few digits"),
])
def test_a_length_kvplan_cannot_read_is_one_line_exit_2(text, says, capsys):
    rc, _, err = run(["estimate", "Qwen/Qwen2.5-7B", "--seq-len", text], capsys)
    assert rc == 2 and says in err and err.count("\n") == 1


def test_version_names_kvplan_and_the_engine_releases(capsys):
    import tomllib

    import kvplan
    rc, out, _ = run(["--version"], capsys)
    assert rc == 0 and out == f"kvplan {kvplan.__version__} (rules read from vLLM 0.33.0 and SGLang 0.5.23 and older)\n"
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert project["version"] == kvplan.__version__


# ---------------------------------------------------------------------------------------------- issue #24 frictions


@pytest.mark.parametrize("args, suggestion", [
    (["plna", LLAMA], "did you mean 'plan'?"),                                            # a subcommand
    (["plan", LLAMA, "--gpu-memory-utilisation", "0.95"], "did you mean '--gpu-memory-utilization'?"),  # a flag
    (["plan", LLAMA, "--max-modl-len=8k"], "did you mean '--max-model-len'?"),            # a flag with =value
    (["estimate", LLAMA, "--seq-len", "10", "--jsn"], "did you mean '--json'?"),
    (["plan", LLAMA, "--engine", "vlm"], "did you mean 'vllm'?"),                          # a choice
    (["estimate", LLAMA, "--seq-len", "10", "--cache", "dynamc"], "did you mean 'dynamic'?"),
])
def test_a_mistyped_name_says_the_nearest_one(args, suggestion, capsys):
    code, out, err = run(args, capsys)
    assert code == 2 and not out and err.count("\n") == 1, err
    assert suggestion in err


def test_nothing_close_suggests_nothing(capsys):
    code, _, err = run(["estimate", LLAMA, "--seq-len", "10", "--frobnicate"], capsys)
    assert code == 2 and "unrecognized arguments: --frobnicate" in err and "did you mean" not in err


def test_exit_codes_are_listed_in_help_and_readme(capsys):
    """compare's exit 3 was undocumented: --help and README now list every code main() returns."""
    from kvplan.cli import EXIT_CODES

    code, out, _ = run(["--help"], capsys)
    assert code == 0
    listed = out.split("exit codes:")[1]
    for number in (0, 2, 3):
        assert f"\n  {number}  " in listed
    assert "`kvplan compare`: a setup was planned and does not fit" in " ".join(listed.split())
    assert sorted(EXIT_CODES) == [0, 2, 3]
    readme = (ROOT / "README.md").read_text()
    assert all(f"| {number} |" in readme for number in (0, 2, 3))
    # and compare really exits 3 for a setup that does not fit (Llama-3.1-405B in bf16 is 756 GiB of weights)
    assert run(["compare", f"{LLAMA}@H100-80GBx1", "meta-llama/Llama-3.1-405B@H100-80GBx1"], capsys)[0] == 3


def test_json_fixes_are_structured_and_replan_from_their_flags(capsys):
    """Issue #24: each fix as data beside its sentence. gpt-oss-120b at 131,072 tokens on one H100 does not fit;
    every fix's flags, run through `kvplan plan` again, give the figures its record states."""
    base = ["plan", "openai/gpt-oss-120b", "--max-model-len", "131072", "--json"]
    code, out, _ = run(base, capsys)
    data = json.loads(out)
    assert code == 3 and not data["fits"] and len(data["fix_plans"]) == len(data["fixes"]) >= 3
    flags = [f["flags"] for f in data["fix_plans"]]
    assert "--kv-dtype fp8" in flags and any(f.startswith("--gpu-memory-utilization 0.9") for f in flags)
    for fix, prose in zip(data["fix_plans"], data["fixes"]):
        assert prose == f"{fix['change']} ({fix['flags']})" and fix["fits"] is True and fix["error"] is None
        again = json.loads(run([*base, *fix["flags"].split()], capsys)[1])
        assert again["fits"]
        for key in ("kv_cache_tokens", "max_concurrency", "num_gpus", "tensor_parallel_size",
                    "pipeline_parallel_size", "max_model_len", "gpu_memory_utilization", "command"):
            assert fix[key] == again[key], key
    fp8 = next(f for f in data["fix_plans"] if f["flags"] == "--kv-dtype fp8")
    assert fp8["settings"] == {"kv_dtype": "fp8"} and fp8["kv_cache_dtype"] == "float8_e4m3"
    assert f"{fp8['max_concurrency']:,.2f} requests of 131,072 tokens" in fp8["change"]


@pytest.mark.parametrize("engine, starts", [("vllm", "vllm serve "), ("sglang", "python -m sglang.launch_server "),
                                            ("hf", "")])
def test_json_names_the_engine_of_its_command(engine, starts, capsys):
    """SGLang's launch command sat in `vllm_command`; `command` names its engine (vllm_command stays, equal, for
    readers of the earlier JSON)."""
    code, out, _ = run(["plan", LLAMA, "--engine", engine, "--max-model-len", "8192", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["command"]["engine"] == engine
    assert data["command"]["line"] == data["vllm_command"] and data["command"]["line"].startswith(starts)


def test_gpus_lists_the_h200_nvl_beside_the_h200_without_a_price(capsys):
    """`kvplan gpus`: the H200 NVL is its own line, the SXM card's 139.80 GiB (143,156 MiB) and 4.80 TB/s, and no
    price (gpu_prices.json's SkyPilot catalogs list none), where the H200 carries RunPod's $3.99."""
    code, out, _ = run(["gpus"], capsys)
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line and not line.startswith("prices")}
    assert code == 0 and lines["H200-NVL"] == ["H200-NVL", "139.80", "GiB", "4.80", "TB/s"]
    assert lines["H200"] == ["H200", "139.80", "GiB", "4.80", "TB/s", "$", "3.99/h"]
    names = list(lines)
    assert names.index("H200-NVL") == names.index("H200") + 1
    code, out, _ = run(["gpus", "--json"], capsys)
    nvl = next(g for g in json.loads(out) if g["name"] == "H200-NVL")
    assert nvl["memory_bytes"] == 143_156 * 2**20 and nvl["usd_per_gpu_hour"] is None
    assert nvl["bf16_flops"] == 835_500_000_000_000   # 1,671 TFLOPS with sparsity, halved
