"""Issue #26: every pinned number in tests/ has its source beside it, as tools/pin_audit.py reads "beside"."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("pin_audit", ROOT / "tools" / "pin_audit.py")
pin_audit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pin_audit)


def _missing(source: str) -> list[tuple[int, object]]:
    audit = pin_audit.Audit(Path("t.py"), source)
    audit.visit(ast.parse(source))
    return audit.missing


def test_every_pinned_number_in_tests_has_a_source():
    missing, _, total = pin_audit.audit(sorted((ROOT / "tests").glob("*.py")))
    assert total > 700          # the audit sees the pins (758 when it was written)
    assert not missing, "pinned numbers without a source beside them:\n" + "\n".join(missing)


def test_the_audit_tells_a_bare_pin_from_a_sourced_one():
    bare = "def test_x():\n    assert kv() == 131_072\n"
    assert _missing(bare) == [(2, 131072)]   # the line and value of the bare input above
    assert _missing("def test_x():\n    assert kv() == 131_072  # 32 x 2 x 8 x 128 x 2 B\n") == []
    assert _missing("def test_x():\n    # 32 layers x 2 x 8 heads x 128 x 2 B\n    assert kv() == 131_072\n") == []
    assert _missing('def test_x():\n    """131,072 B a token."""\n    assert kv() == 131_072\n') == []
    assert _missing("def test_x():\n    assert kv() == 131_072  # noqa\n") == [(2, 131072)]   # no source in it
    assert _missing("def test_x():\n    assert kv(max_model_len=8192) == 4 * 1024\n") == []  # an input, units
    assert _missing("import pytest\n@pytest.mark.parametrize('n, b', [(1, 98_304)])\ndef test_x(n, b):\n    pass\n") \
        == [(2, 98304)]
