"""The names a user imports from ``transformer_lib`` itself: each is the object its module
defines and declares public, and none of them costs an import until it is used."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import transformer_lib

ROOT = Path(__file__).resolve().parent.parent
# The names the design promises at the top of the package (DESIGN.md, "The public surface").
PROMISED = [
    "Transformer",
    "TransformerConfig",
    "BPETokenizer",
    "SearchConfig",
    "translate",
    "train_translation",
    "load_pretrained",
    "save_pretrained",
]


def test_the_promised_names_are_public():
    assert set(PROMISED) <= set(transformer_lib.__all__)


@pytest.mark.parametrize("name", transformer_lib.__all__)
def test_each_public_name_is_its_modules_own(name):
    value = getattr(transformer_lib, name)
    module = importlib.import_module(value.__module__)
    assert module.__name__.startswith("transformer_lib.")
    assert not module.__name__.startswith("transformer_lib.book"), "the book is not the API"
    assert getattr(module, name) is value
    assert name in module.__all__, f"{module.__name__}.__all__ does not declare {name}"
    assert value.__doc__, f"{name} has no docstring for the API reference"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'Decoder'"):
        transformer_lib.Decoder  # noqa: B018
    assert "Transformer" in dir(transformer_lib)


def test_from_import_loads_only_the_modules_it_names():
    """``from transformer_lib import BPETokenizer`` imports the tokenizer, not the model."""
    code = (
        "import sys; from transformer_lib import BPETokenizer; "
        "print(sorted(m for m in sys.modules if m.startswith('transformer_lib.')))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    loaded = done.stdout.strip()
    assert "transformer_lib.tokenizer" in loaded, done.stderr
    assert "transformer_lib.model" not in loaded and "transformer_lib.training" not in loaded


def test_importing_the_package_loads_neither_torch_nor_the_metadata_scan():
    """``import transformer_lib`` stays cheap: no torch, no numpy, and ``importlib.metadata``
    (which scans the installed packages) only when ``__version__`` is asked for."""
    code = (
        "import sys, transformer_lib; "
        "print(sorted({'torch', 'numpy', 'importlib.metadata'} & set(sys.modules))); "
        "transformer_lib.__version__; print('importlib.metadata' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "True"], done.stdout


def test_the_package_is_typed_and_its_stub_names_every_public_name():
    """PEP 561: the package ships ``py.typed`` and the stub ``__init__.pyi``, whose imports give an
    editor each public name from the module that defines it, and nothing else."""
    import ast

    assert (ROOT / "transformer_lib" / "py.typed").is_file()
    stub = ast.parse((ROOT / "transformer_lib" / "__init__.pyi").read_text())
    imported = {
        alias.name: node.module.removeprefix("transformer_lib.")
        for node in stub.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == transformer_lib._PUBLIC
    declared = [n for n in stub.body if isinstance(n, ast.Assign) and n.targets[0].id == "__all__"]
    assert ast.literal_eval(declared[0].value) == transformer_lib.__all__
    built = (ROOT / "pyproject.toml").read_text()
    assert "py.typed" in built and "__init__.pyi" in built
