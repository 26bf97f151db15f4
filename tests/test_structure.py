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
MODULES = sorted(path.stem for path in PACKAGE.glob("*.py"))

# Lowest first. A module may import only modules of lower layers (its own layer excluded): the
# layers say what each part of the library is allowed to know about.
LAYERS = [
    ["__init__"],  # the package itself: its version, and load_pretrained on first use
    # atomic files, commit, machine; the user's mistakes on the command line: they know nothing
    # of the model or the data
    ["provenance", "usage"],
    # masks, files, processes; oneDNN's products (decoding and training may use them); the
    # learning-rate schedule
    ["attention", "checkpoints", "data", "distributed", "onednn", "schedule"],
    ["model", "tokenizer"],  # the Transformer; the BPE vocabulary (raises data's DataError)
    # on a model or a tokenizer (diagrams: Figures 1 and 2, drawn from the model's modules)
    ["batching", "decoding", "diagrams", "inspection", "recurrent", "training"],
    # the shipped models' folders (safetensors, config, tokenizer, checksums); the pictures, tables
    # and corpus measurements of Part I; copies into PyTorch's modules
    ["charts", "corpus", "explorers", "pretrained", "references", "tables"],
    # BLEU and averaging; the CTranslate2 engine; ONNX graphs; FLOPs (of both kinds of model)
    ["engine", "evaluation", "export", "performance"],
    ["lengths", "recipe", "variations"],  # sentence lengths; a training recipe; Table 3's variants
    ["report", "sweep", "verdicts"],  # what a finished run or a sweep writes, and how it reads
    # the solutions of Part I's exercises, which the chapters call
    ["solutions_evaluation", "solutions_model", "solutions_training"],
    ["cli"],  # the command line only wires the others
    ["__main__"],  # ``python -m transformer_lib``
]
LAYER = {module: i for i, modules in enumerate(LAYERS) for module in modules}

MAX_LINES = 420
# Modules allowed to be longer for now, each with its reason. An exception only applies while the
# module is still too long: the test passes as soon as it is not.
LONG_MODULES: dict[str, str] = {}


def imported_modules(module: str) -> set[str]:
    """The modules of transformer_lib that ``module`` imports anywhere in its source.

    ``import transformer_lib`` or ``from transformer_lib import __version__`` is an import of the
    package itself, ``__init__``; ``from transformer_lib import data`` one of the module ``data``.
    """
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    # The package's __getattr__ imports a public name (load_pretrained) on first use only:
    # importing the package imports nothing (test_importing_the_package_imports_nothing_heavy).
    lazy = {
        id(inner)
        for node in tree.body
        if module == "__init__" and isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
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
                    found.add(parts[1] if len(parts) > 1 else "__init__")
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from .x import y
                base = ["transformer_lib", *(node.module.split(".") if node.module else [])]
            else:
                base = (node.module or "").split(".")
            if base[0] != "transformer_lib":
                continue
            if len(base) > 1:
                found.add(base[1])
                continue
            for alias in node.names:  # from transformer_lib import <module or attribute>
                is_module = (PACKAGE / f"{alias.name}.py").is_file()
                found.add(alias.name if is_module else "__init__")
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
        "def later():\n"
        "    from transformer_lib.training import train\n"
        "    import transformer_lib\n"
    )
    package = tmp_path / "transformer_lib"
    package.mkdir()
    for name in ("model", "data", "decoding", "tokenizer", "batching", "training"):
        (package / f"{name}.py").write_text("")
    (package / "probe.py").write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    expected = {"model", "data", "decoding", "tokenizer", "batching", "training", "__init__"}
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


@pytest.mark.parametrize("module", MODULES)
def test_the_module_is_short(module):
    lines = len((PACKAGE / f"{module}.py").read_text(encoding="utf-8").splitlines())
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
