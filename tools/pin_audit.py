"""List the pinned numbers in tests/ that have no source beside them (issue #26: "every pinned number in tests/
has its source beside it").

A pinned number is a numeric literal >= 1000 that a test expects of kvplan:
- on the expected side of an `assert` comparison (a literal fed to a call inside the assert is an input, not a
  pin: `plan(..., max_model_len=8192) == ...` pins nothing; `pytest.approx(x)`, `int(x)`, `round(x)` and
  arithmetic stay transparent),
- in a `pytest.mark.parametrize` table,
- in a module-level UPPER_CASE table, or a local `expected` / `want` / `truth` / `published` assignment.

Its source counts as "beside it" when a comment sits on its line, on any line of its statement, or in the
comment block just above the statement (or above the decorators of a parametrize table), or when the enclosing
function's or module's docstring writes the number out (`131,072`, `131_072` or `131072`).

    python tools/pin_audit.py            # one line a pin without a source: path:line value
    python tools/pin_audit.py --count    # the count per file
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THRESHOLD = 1000
TRANSPARENT_CALLS = {"approx", "int", "float", "round", "abs", "Fraction", "Decimal"}
LOCAL_NAMES = re.compile(r"expect|want|truth|published|measured", re.I)
# unit conversions, not pins: per thousand / KiB / an hour in seconds / per million ... / MiB, GiB, TiB
UNITS = {1000, 1024, 3600, 10**6, 10**9, 10**12, 10**15, 2**20, 2**30, 2**40}
ABOVE = 3   # a comment this many lines above a statement, in the same paragraph, is beside it


# what a source says: arithmetic (a digit), or where the figure comes from
SOURCE_WORDS = re.compile(r"\d|transformers|vllm|sglang|log|csv|config|hand|measured|published|card|source|"
                          r"regression|input|datasheet|devicequery|rule|docstring|printed|checkpoint|header", re.I)


def comment_lines(source: str) -> set[int]:
    """Lines holding a comment that names a source (see SOURCE_WORDS); a bare `# noqa` or `# why` is not one."""
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and SOURCE_WORDS.search(tok.string.replace("noqa", "")):
            lines.add(tok.start[0])
    return lines


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def expected_constants(node: ast.AST):
    """Numeric constants in `node`, not descending into the arguments of non-transparent calls (inputs)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        if abs(node.value) >= THRESHOLD and node.value not in UNITS:
            yield node
        return
    if isinstance(node, ast.Call) and _call_name(node) not in TRANSPARENT_CALLS:
        return
    if isinstance(node, (ast.JoinedStr, ast.Subscript, ast.Attribute)):
        return
    for child in ast.iter_child_nodes(node):
        yield from expected_constants(child)


def all_constants(node: ast.AST):
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
            if abs(n.value) >= THRESHOLD and n.value not in UNITS:
                yield n


def _spellings(value) -> set[str]:
    if isinstance(value, float) and not value.is_integer():
        return {repr(value)}
    v = int(value)
    return {f"{v:,}", f"{v:_}", str(v)}


class Audit(ast.NodeVisitor):
    def __init__(self, path: Path, source: str):
        self.path, self.lines = path, source.splitlines()
        self.comments = comment_lines(source)
        self.docs: list[str] = []
        self.missing: list[tuple[int, object]] = []
        self.pins = 0

    # -- where a source may sit
    def _block_above(self, line: int) -> bool:
        """A comment up to ABOVE lines above `line` (1-based) in the same paragraph (no blank line, no `def`
        between), decorators skipped."""
        i, seen = line - 1, 0
        while i >= 1 and seen < ABOVE:
            text = self.lines[i - 1].strip()
            if i in self.comments:
                return True
            if not text or text.startswith(("def ", "class ")):
                return False
            if not text.startswith("@"):
                seen += 1
            i -= 1
        return False

    def _sourced(self, const: ast.Constant, stmt: ast.AST, top: int) -> bool:
        if any(n in self.comments for n in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)):
            return True
        if self._block_above(top) or self._block_above(const.lineno):
            return True
        return any(s in doc for doc in self.docs for s in _spellings(const.value))

    def _check(self, consts, stmt, top=None):
        for c in consts:
            self.pins += 1
            if not self._sourced(c, stmt, top or stmt.lineno):
                self.missing.append((c.lineno, c.value))

    # -- walking
    def visit_Module(self, node):
        self.docs.append(ast.get_docstring(node) or "")
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        for dec in node.decorator_list:
            if isinstance(dec, ast.Call) and _call_name(dec) == "parametrize" and len(dec.args) >= 2:
                self.docs.append(ast.get_docstring(node) or "")
                self._check(expected_constants(dec.args[1]), dec, dec.lineno)
                self.docs.pop()
        self.docs.append(ast.get_docstring(node) or "")
        for child in node.body:
            self.visit(child)
        self.docs.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assert(self, node):
        for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            for operand in [cmp.left, *cmp.comparators]:
                self._check(expected_constants(operand), node)

    def visit_Assign(self, node):
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        module_level = node.col_offset == 0
        if any((module_level and n.isupper()) or LOCAL_NAMES.search(n) for n in names):
            self._check(all_constants(node.value), node)
        self.generic_visit(node)


def audit(paths) -> tuple[list[str], Counter, int]:
    out, per_file, total = [], Counter(), 0
    for path in paths:
        source = path.read_text()
        a = Audit(path, source)
        a.visit(ast.parse(source))
        total += a.pins
        for line, value in a.missing:
            out.append(f"{path.relative_to(ROOT)}:{line} {value}")
            per_file[str(path.relative_to(ROOT))] += 1
    return out, per_file, total


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="test files (default: tests/*.py)")
    parser.add_argument("--count", action="store_true", help="the count per file")
    args = parser.parse_args(argv)
    paths = [Path(p).resolve() for p in args.paths] or sorted((ROOT / "tests").glob("*.py"))
    missing, per_file, total = audit(paths)
    if args.count:
        for name, n in per_file.most_common():
            print(f"{n:5d} {name}")
        print(f"{len(missing)} of {total} pinned numbers have no source beside them")
    else:
        print("\n".join(missing))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
