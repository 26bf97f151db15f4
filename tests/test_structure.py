"""The shape of transformer_lib: which module may import which, how long a module may grow, and
that importing a module does nothing visible.

The imports are read from the source with ``ast`` (those inside functions included), so a lazy
import that would close a cycle at run time is caught here as well.
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "transformer_lib"
BOOK = "book"  # the subpackage of the book's machinery, which the library never imports


def module_name(path: Path) -> str:
    """A module's dotted name within the package: ``model``, ``book.charts``; a subpackage's
    ``__init__.py`` is the subpackage (``book``), the package's own is ``__init__``."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def module_path(module: str) -> Path:
    """The file of a dotted module name (the inverse of :func:`module_name`)."""
    folder = PACKAGE.joinpath(*module.split("."))
    return folder / "__init__.py" if folder.is_dir() else folder.with_suffix(".py")


def is_book(module: str) -> bool:
    return module == BOOK or module.startswith(BOOK + ".")


MODULES = sorted(module_name(path) for path in PACKAGE.rglob("*.py"))
LIBRARY_MODULES = [module for module in MODULES if not is_book(module)]

# Lowest first. A module may import only modules of lower layers (its own layer excluded): the
# layers say what each part of the library is allowed to know about. The book's machinery comes
# after the whole library: it may use any of it, and the library never uses it.
LAYERS = [
    ["__init__"],  # the package itself: its version, and its public names on first use
    ["errors"],  # the one base class of the errors a user can fix
    ["provenance"],  # atomic files, commit, machine: it knows nothing of the model or the data
    # masks, files, processes; the learning-rate schedule
    ["attention", "checkpoints", "data", "distributed", "schedule"],
    # the Transformer; the BPE vocabulary (raises data's DataError); the training objective, its
    # update and its loop (on the schedule's optimizer)
    ["model", "objective", "tokenizer"],
    # on a model or a tokenizer: batches; oneDNN's products and its decoder step, with the model's
    # modules and wiring (decoding and training use them); batches without padding
    ["batching", "onednn", "packing"],
    ["decoding", "training"],  # the searches and translate; the loop: files, resumption, validation
    ["pretrained"],  # the shipped models' folders (safetensors, config, tokenizer, checksums)
    # BLEU and averaging; the CTranslate2 engine; ONNX graphs
    ["engine", "evaluation", "export", "marian"],  # ... and our model as a MarianMT model
    ["recipe"],  # a training recipe
    ["cli"],  # the command line only wires the others
    ["__main__"],  # ``python -m transformer_lib``
    # The book's machinery, on top of the library.
    ["book"],  # the subpackage's marker
    ["book.jupyter"],  # what differs between the book's build and a reader's Jupyter
    # the recurrent baseline; the pictures, tables and corpus measurements of Part I; Figures 1
    # and 2 drawn from the model's modules; copies into PyTorch's modules; sentence lengths;
    # the decoding chapter's timings and toy runs; the paired test of two systems' BLEU; the
    # translator page's models; a model's attention weights; the run cache
    ["book.charts", "book.corpus", "book.diagrams", "book.explorers", "book.lengths"]
    + ["book.recurrent", "book.references", "book.tables", "book.timing", "book.toy_runs"]
    + ["book.significance", "book.translator_page", "book.inspection", "book.runs"],
    # FLOPs (of both kinds of model); Table 3's variants; the translator page's inside and the
    # anatomy of a training run, drawn with the diagrams' tools
    ["book.anatomy", "book.performance", "book.translator_internals", "book.variations"],
    ["book.report", "book.sweep", "book.verdicts"],  # what a run or a sweep writes, how it reads
    # the solutions of Part I's exercises, which the chapters call
    ["book.solutions_evaluation", "book.solutions_model", "book.solutions_training"],
]
LAYER = {module: i for i, modules in enumerate(LAYERS) for module in modules}

MAX_LINES = 420
# Modules allowed to be longer for now, each with its reason. An exception only applies while the
# module is still too long: the test passes as soon as it is not.
LONG_MODULES: dict[str, str] = {}


def _resolve(base: list[str], name: str | None = None) -> str:
    """The dotted module (within the package) that ``import transformer_lib.<base>`` or ``from
    transformer_lib.<base> import <name>`` reads: ``name`` itself when it is a module."""
    parts = base[1:]
    if name is not None and module_path(".".join([*parts, name])).is_file():
        parts = [*parts, name]
    return ".".join(parts) or "__init__"


def imported_modules(module: str) -> set[str]:
    """The modules of transformer_lib that ``module`` imports anywhere in its source.

    ``import transformer_lib`` or ``from transformer_lib import __version__`` is an import of the
    package itself, ``__init__``; ``from transformer_lib import data`` one of the module ``data``;
    ``from transformer_lib.book import charts`` one of ``book.charts``.
    """
    tree = ast.parse(module_path(module).read_text(encoding="utf-8"))
    # The package's __getattr__ imports a public name on first use only, and its imports under
    # ``if TYPE_CHECKING:`` are read by editors, never run: importing the package imports nothing
    # (test_importing_the_package_imports_nothing_heavy).
    lazy = {
        id(inner)
        for node in tree.body
        if module == "__init__"
        and (
            (isinstance(node, ast.FunctionDef) and node.name == "__getattr__")
            or (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
        )
        for inner in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in lazy:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "transformer_lib":
                    found.add(_resolve(parts))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from .x import y
                here = module.split(".")[: -node.level] if "." in module else []
                base = ["transformer_lib", *here, *(node.module.split(".") if node.module else [])]
            else:
                base = (node.module or "").split(".")
            if base[0] != "transformer_lib":
                continue
            for alias in node.names:
                found.add(_resolve(base, alias.name))
    found.discard(module)
    return found


GRAPH = {module: imported_modules(module) for module in MODULES}


def test_the_import_parser_sees_every_kind_of_import(tmp_path, monkeypatch):
    """The parser itself, on a module written here: top-level, nested and relative imports."""
    source = (
        "import os\n"
        "import transformer_lib.model\n"
        "from transformer_lib.data import load_multi30k\n"
        "from transformer_lib import decoding, __version__\n"
        "from . import tokenizer\n"
        "from .batching import make_batches\n"
        "from transformer_lib.book import charts\n"
        "def later():\n"
        "    from transformer_lib.training import train\n"
        "    import transformer_lib\n"
    )
    package = tmp_path / "transformer_lib"
    package.mkdir()
    for name in ("model", "data", "decoding", "tokenizer", "batching", "training", "book/charts"):
        (package / f"{name}.py").parent.mkdir(exist_ok=True)
        (package / f"{name}.py").write_text("")
    (package / "probe.py").write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    expected = {"model", "data", "decoding", "tokenizer", "batching", "training", "__init__"}
    expected |= {"book.charts"}
    assert imported_modules("probe") == expected


def test_every_module_has_a_layer():
    unplaced = [module for module in MODULES if module not in LAYER]
    assert not unplaced, f"place {unplaced} in a layer of LAYERS (tests/test_structure.py)"


def test_every_import_points_to_a_module_of_the_package():
    unknown = {m: sorted(GRAPH[m] - set(MODULES)) for m in MODULES if GRAPH[m] - set(MODULES)}
    assert not unknown, f"imports of modules that do not exist: {unknown}"


def test_the_import_graph_has_no_cycle():
    state: dict[str, str] = {}  # "open" while on the current path, "done" after

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for other in sorted(GRAPH.get(module, ())):
            if state.get(other) == "open":
                return [*path, module, other][[*path, module].index(other) :]
            if other not in state and (cycle := visit(other, [*path, module])):
                return cycle
        state[module] = "done"
        return None

    for module in MODULES:
        if module not in state and (cycle := visit(module, [])):
            pytest.fail("import cycle: " + " -> ".join(cycle))


@pytest.mark.parametrize("module", MODULES)
def test_imports_point_only_to_lower_layers(module):
    if module not in LAYER:
        pytest.skip("not in a layer (test_every_module_has_a_layer fails)")
    upward = sorted(m for m in GRAPH[module] if m in LAYER and LAYER[m] >= LAYER[module])
    assert not upward, (
        f"{module} (layer {LAYER[module]}) imports {upward} of layers "
        f"{[LAYER[m] for m in upward]}: a module may import only modules of lower layers"
    )


@pytest.mark.parametrize("module", LIBRARY_MODULES)
def test_the_library_never_imports_the_book(module):
    """The book's machinery is support code for the chapters: nothing a user imports reaches it,
    so editing a chart changes neither the library nor the runs the chapters cache."""
    reached = sorted(m for m in GRAPH[module] if is_book(m))
    assert not reached, (
        f"{module} imports {reached}: the library never imports transformer_lib.book"
    )


def test_the_library_rule_sees_a_book_import():
    """The rule above can fail: a library module that imported a chart would be caught."""
    assert is_book("book.charts") and is_book("book") and not is_book("bookkeeping")
    assert any(is_book(m) for m in GRAPH["book.solutions_model"])


@pytest.mark.parametrize("module", [m for m in MODULES if not m.startswith("__") and m != BOOK])
def test_every_generated_module_declares_its_public_names(module):
    """``__all__`` (written by the tangle) names only what the module defines, and each name is
    there: a reader's tab completion and the API reference see the public surface only. The book's
    machinery is no API and declares none."""
    tree = ast.parse(module_path(module).read_text(encoding="utf-8"))
    declared = [
        node
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and "__all__" in [t.id for t in ast.walk(node) if isinstance(t, ast.Name)]
    ]
    if module.startswith("book."):
        assert not declared, f"{module} is the book's machinery, not API: it declares no __all__"
        return
    assert len(declared) == 1, f"{module} declares __all__ {len(declared)} times"
    names = ast.literal_eval(declared[0].value)
    defined = {
        node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    } | {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    import tangle  # the library: exactly what the API page documents (tools/tangle.py)

    documented = tangle.documented_names(ROOT).get(module, [])
    assert sorted(names) == sorted(documented), f"{module}: the API page documents {documented}"
    assert set(names) <= defined, (
        f"{module}.__all__ names {set(names) - defined}, not defined there"
    )
    assert not [name for name in names if name.startswith("_")]


def code_lines(source: str) -> int:
    """The lines of a module a reader reads as code: its docstrings (documentation, which the API
    reference shows) and the closing ``__all__`` the tangle writes, not counted."""
    tree = ast.parse(source)
    documentation = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                documentation.update(range(body[0].lineno, body[0].end_lineno + 1))
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in targets
        ):  # ``__all__ = [...]``, or ``__all__: list[str] = []`` where nothing is public
            documentation.update(range(node.lineno, node.end_lineno + 1))
    return len(source.splitlines()) - len(documentation)


MAX_LIBRARY_LINES = 5000


def test_the_library_stays_small():
    """What ``import transformer_lib`` promises (the book's machinery apart) stays a small library:
    its code, docstrings left out, within MAX_LIBRARY_LINES."""
    total = sum(code_lines(module_path(m).read_text(encoding="utf-8")) for m in LIBRARY_MODULES)
    assert total <= MAX_LIBRARY_LINES, f"the library has {total} lines of code"


def test_code_lines_leave_out_docstrings_and_all():
    source = '"""Module."""\n\n\ndef f():\n    """Doc\n    more."""\n    return 1\n\n__all__ = [\n    "f",\n]\n'
    assert code_lines(source) == 11 - 1 - 2 - 3
    assert code_lines('"""Module."""\n\n__all__: list[str] = []\n') == 1  # the blank line


@pytest.mark.parametrize("module", MODULES)
def test_the_module_is_short(module):
    lines = code_lines(module_path(module).read_text(encoding="utf-8"))
    if lines > MAX_LINES and module in LONG_MODULES:
        pytest.xfail(f"{lines} lines: {LONG_MODULES[module]}")
    assert lines <= MAX_LINES, f"{module}.py has {lines} lines; split it (at most {MAX_LINES})"


def test_importing_the_modules_prints_and_writes_nothing(tmp_path):
    """Every module imported in one fresh interpreter, in a temporary working directory and
    cache: nothing on stdout or stderr, no file created. (``__main__`` runs the command line by
    design and is left out.)"""
    names = ["transformer_lib"] + [f"transformer_lib.{m}" for m in MODULES if m[0] != "_"]
    code = "; ".join(f"import {name}" for name in names)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", "")
    assert list(tmp_path.iterdir()) == []


def test_importing_the_package_imports_nothing_heavy():
    """``python -m transformer_lib --help`` answers at once because the package imports no torch."""
    code = "import sys, transformer_lib; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
