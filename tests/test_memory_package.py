"""planner/memory/ and planner/perf/ stay packages of short functions: none longer than 80 lines, no import inside a
function."""

import ast
from pathlib import Path

PACKAGES = [Path(__file__).resolve().parent.parent / "planner" / name for name in ("memory", "perf")]


def _functions():
    for path in sorted(p for package in PACKAGES for p in package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.name, node


def test_no_function_is_longer_than_80_lines():
    long = [f"{name}:{fn.name} ({fn.end_lineno - fn.lineno + 1} lines)" for name, fn in _functions()
            if fn.end_lineno - fn.lineno + 1 > 80]
    assert not long


def test_no_import_inside_a_function():
    inside = [f"{name}:{fn.name}" for name, fn in _functions()
              if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(fn))]
    assert not inside
