"""Issue #26 item 2: every committed report is what its script writes today, byte for byte.

Each report below is regenerated from its committed source (the measured CSVs, the conformance rows) into a
temporary folder and compared with the committed file. A rule changed for one row moves the report, and this test
fails until the regenerated report is committed, its diff read. The hold-out report has its own test
(tests/test_vllm_holdout.py::test_the_report_regenerates_byte_identical); README's figures are checked against these
reports in tests/test_readme.py, so the chain README <- report <- script <- source is closed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from validation import conformance, sglang_calibration, vllm_calibration, vllm_cudagraph

REPO = Path(__file__).resolve().parents[1]
VALIDATION = REPO / "validation"


@pytest.mark.parametrize("script, names", [
    (vllm_calibration, ("vllm_calibration.md", "vllm_calibration.csv")),
    (sglang_calibration, ("sglang_calibration.md", "sglang_calibration_results.csv")),
], ids=["vllm_calibration", "sglang_calibration"])
def test_calibration_reports_regenerate_byte_identical(script, names, tmp_path, capsys):
    assert script.main(["--out", str(tmp_path)]) == 0
    capsys.readouterr()
    for name in names:
        assert (tmp_path / name).read_bytes() == (VALIDATION / name).read_bytes(), (
            f"validation/{name} is stale: run `python validation/{script.__name__.split('.')[-1]}.py` and commit it")


def test_cudagraph_report_regenerates_byte_identical(tmp_path):
    vllm_cudagraph.main(out=tmp_path)
    assert (tmp_path / "vllm_cudagraph.md").read_bytes() == (VALIDATION / "vllm_cudagraph.md").read_bytes(), (
        "validation/vllm_cudagraph.md is stale: run `python validation/vllm_cudagraph.py` and commit it")


def _record() -> tuple[list[dict], str]:
    rows = json.loads((REPO / "docs" / "coverage.json").read_text())
    version = json.loads((REPO / "kvplan" / "data" / "conformance.json").read_text())["transformers"]
    return rows, version


def test_conformance_markdown_is_the_rows_written_out(tmp_path):
    """docs/coverage.md is docs/coverage.json's rows as `python -m validation.conformance --rows docs/coverage.json
    --write-data` writes them (the rows themselves are re-measured live in tests/test_conformance_live.py)."""
    rows, version = _record()
    conformance.write_markdown(rows, version, tmp_path / "coverage.md")
    assert (tmp_path / "coverage.md").read_text() == (REPO / "docs" / "coverage.md").read_text(), (
        "docs/coverage.md is stale: run `python -m validation.conformance --rows docs/coverage.json --write-data`")


def test_the_runtime_record_is_the_rows_folded_by_family():
    """kvplan/data/conformance.json, which decides at run time what is verified and what is refused, is the same
    rows folded per model_type: nobody edits one without the other."""
    rows, version = _record()
    stored = json.loads((REPO / "kvplan" / "data" / "conformance.json").read_text())
    assert stored == {"transformers": version, "families": conformance.families(rows)}
