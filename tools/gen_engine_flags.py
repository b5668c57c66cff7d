"""Write kvplan/data/engine_flags.json: the command-line flags each engine release accepts, read from its wheel.

    pip download vllm==0.19.0 --no-deps -d DIR && unzip DIR/vllm-*.whl 'vllm/engine/arg_utils.py' -d SRC
    python tools/gen_engine_flags.py vllm 0.19.0 SRC [sglang 0.5.1 SRC2 ...]

vLLM builds `vllm serve`'s flags from the fields of `EngineArgs` (vllm/engine/arg_utils.py: each field
`tensor_parallel_size` is `--tensor-parallel-size`); SGLang 0.5.x lists its own in `ServerArgs.add_cli_args`
(sglang/srt/server_args.py: `parser.add_argument("--tensor-parallel-size", "--tp-size", ...)`). tests/test_planner.py
checks that every flag a kvplan command prints is in the set for the version it plans.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "kvplan" / "data" / "engine_flags.json"


def vllm_flags(src: Path) -> list[str]:
    """Every EngineArgs field as `--field-name`; a bool field also as `--no-field-name` (arg_utils.py gives bools
    `argparse.BooleanOptionalAction`, 0.33 :384-386)."""
    text = (src / "vllm" / "engine" / "arg_utils.py").read_text()
    start = text.index("class EngineArgs")
    end = text.index("\nclass ", start + 10)
    fields = re.findall(r"^    ([a-z_][a-z0-9_]*)\s*:\s*([^=\n]*)", text[start:end], re.M)
    flags = {"--" + f.replace("_", "-") for f, _ in fields} | {"--model"}
    flags |= {"--no-" + f.replace("_", "-") for f, hint in fields
              if re.fullmatch(r"(bool(\s*\|\s*None)?|Optional\[bool\])\s*", hint)}
    return sorted(flags)


def sglang_flags(src: Path) -> list[str]:
    """0.5.x before the arg groups: every quoted "--flag" of server_args.py. 0.5.23 derives most flags from the
    dataclass fields of srt/arg_groups/fields/*.py (`tp_size: A[int, Arg(aliases=["--tensor-parallel-size"])]`
    is --tp-size, arg_utils.py `_field_to_cli_name`), the aliases and the hand-registered ones quoted."""
    srt = src / "sglang" / "srt"
    texts = [(srt / "server_args.py").read_text()]
    groups = srt / "arg_groups"
    flags: set[str] = set()
    if groups.is_dir():
        for path in sorted(groups.rglob("*.py")):
            text = path.read_text()
            texts.append(text)
            if path.parent.name == "fields":
                flags |= {"--" + name.replace("_", "-")
                          for name in re.findall(r"^    ([a-z_][a-z0-9_]*): A\[", text, re.M)}
    for text in texts:
        flags |= set(re.findall(r"[\"'](--[a-z0-9][a-z0-9-]*)[\"']", text))
    return sorted(flags)


def main(argv: list[str]) -> int:
    data = json.loads(OUT.read_text()) if OUT.is_file() else {}
    for engine, version, src in zip(argv[::3], argv[1::3], argv[2::3]):
        flags = vllm_flags(Path(src)) if engine == "vllm" else sglang_flags(Path(src))
        data.setdefault(engine, {})[version] = flags
        print(f"{engine} {version}: {len(flags)} flags")
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
