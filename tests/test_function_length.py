"""No function of transformer_lib is longer than MAX_FUNCTION_LINES: a longer one is a script
written as a library function, to be split into named steps (as ``training.train`` was).

A function's length counts from its ``def`` line to its last line, less its docstring (the
documentation the API reference shows is not code to read); a method or a nested function is
counted on its own, and also as part of the function around it.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "transformer_lib"
MAX_FUNCTION_LINES = 80


def docstring_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """How many lines the function's docstring takes (0 without one)."""
    first = function.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        if isinstance(first.value.value, str):
            return first.end_lineno - first.lineno + 1
    return 0


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """The functions and methods of ``source`` longer than ``limit`` lines, as (qualified name,
    length), methods named ``Class.method`` and nested functions ``outer.inner``."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    length = child.end_lineno - child.lineno + 1 - docstring_lines(child)
                    if length > limit:
                        found.append((name, length))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_no_function_of_the_package_is_too_long():
    too_long = [
        f"{path.relative_to(PACKAGE.parent)}: {name} has {length} lines"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, length in long_functions(path.read_text(encoding="utf-8"))
    ]
    assert not too_long, (
        f"functions longer than {MAX_FUNCTION_LINES} lines (split them into named steps, in "
        "their chapters): " + "; ".join(too_long)
    )


def test_the_checker_finds_a_long_function_and_a_long_method():
    body = "".join(f"    x{i} = {i}\n" for i in range(79))
    source = (
        "def short():\n"
        + body  # 80 lines: allowed
        + "\n\ndef long():\n"
        + body
        + "    return x0\n"  # 81 lines
        + "\n\nclass Box:\n    async def method(self):\n"
        + body.replace("    ", "        ")
        + "        return 1\n"
    )
    assert long_functions(source) == [("long", 81), ("Box.method", 81)]
    documented = source.replace(
        "def short():\n", 'def short():\n    """A docstring\n    of two."""\n'
    )
    assert long_functions(documented) == [("long", 81), ("Box.method", 81)]
