"""Issue #22 (item 9): the calibration reports are pinned as the hold-out is (test_vllm_holdout's byte-identical
regeneration): each script, run again, writes the committed report and results byte for byte, so a rule changed
for one start-up cannot move another's error unseen (regenerate with the script and read the diff before
committing it)."""

from __future__ import annotations

from pathlib import Path

from validation import sglang_calibration, vllm_calibration, vllm_cudagraph

REPO = Path(__file__).resolve().parents[1]


def _same(tmp_path: Path, *names: str) -> None:
    for name in names:
        assert (tmp_path / name).read_bytes() == (REPO / "validation" / name).read_bytes(), name


def test_vllm_calibration_regenerates_byte_identical(tmp_path, capsys):
    assert vllm_calibration.main(["--out", str(tmp_path)]) == 0
    _same(tmp_path, "vllm_calibration.md", "vllm_calibration.csv")


def test_sglang_calibration_regenerates_byte_identical(tmp_path, capsys):
    assert sglang_calibration.main(["--out", str(tmp_path)]) == 0
    _same(tmp_path, "sglang_calibration.md", "sglang_calibration_results.csv")


def test_vllm_cudagraph_regenerates_byte_identical(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_cudagraph, "HERE", tmp_path)   # writes vllm_cudagraph.md beside it
    text = vllm_cudagraph.main(vllm_cudagraph.DEFAULT_CSV)
    assert text == (REPO / "validation" / "vllm_cudagraph.md").read_text()
    _same(tmp_path, "vllm_cudagraph.md")
