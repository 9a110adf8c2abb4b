"""planner/ stays a package of short functions, with none of its own modules imported inside a function.

A function's length is counted in the lines that start a statement, not in physical lines: `ruff format` lays a
long call or literal out one item per line, which lengthens a function without making it longer to read."""

import ast
from pathlib import Path

PLANNER = Path(__file__).resolve().parent.parent / "planner"
MOST_STATEMENT_LINES = 50


def _functions():
    for path in sorted(PLANNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield str(path.relative_to(PLANNER)), node


def statement_lines(fn: ast.AST) -> int:
    return len({node.lineno for node in ast.walk(fn) if isinstance(node, ast.stmt)})


def test_statement_lines_by_hand():
    fn = ast.parse("def f(x):\n    y = g(\n        x,\n        1,\n    )\n    return y\n").body[0]
    assert statement_lines(fn) == 3  # the def, the assignment over four lines, the return


def test_no_function_is_longer_than_50_statement_lines():
    long = [
        f"{name}:{fn.name} ({statement_lines(fn)} statement lines)"
        for name, fn in _functions()
        if statement_lines(fn) > MOST_STATEMENT_LINES
    ]
    assert not long


def _imports_planner(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "planner"
    return isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "planner" for alias in node.names)


def test_no_planner_import_inside_a_function():
    """An import of the planner's own modules inside a function dodges a cycle; an optional dependency imported
    where it is needed (huggingface_hub for --hf-config) is not one."""
    inside = [f"{name}:{fn.name}" for name, fn in _functions() if any(map(_imports_planner, ast.walk(fn)))]
    assert not inside
    assert _imports_planner(ast.parse("from planner.plan import config").body[0])
    assert not _imports_planner(ast.parse("from huggingface_hub import hf_hub_download").body[0])
