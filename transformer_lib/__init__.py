"""transformer_lib: the Transformer of "Attention Is All You Need", generated from the book.

Every module but this one and ``__main__.py`` is written by ``tools/tangle.py`` from ``book/``.
Each public name is imported from its module on first use, so importing the package loads no
torch; the stub ``__init__.pyi`` gives editors the same names (PEP 561). ``transformer_lib.book``
is the book's own machinery, not part of this surface.
"""

from importlib import import_module

# Each module's public names; the API reference page documents the same names.
_MODULES = {
    "model": ("Transformer", "TransformerConfig"),
    "attention": (
        "MultiHeadAttention",
        "scaled_dot_product_attention",
        "padding_mask",
        "subsequent_mask",
    ),
    "data": ("load_multi30k",),
    "tokenizer": ("BPETokenizer",),
    "batching": ("make_batches",),
    "objective": ("TrainingConfig",),
    "training": ("train", "Validation", "RunOptions"),
    "recipe": ("train_translation",),
    "checkpoints": ("load_checkpoint",),
    "decoding": ("SearchConfig", "translate", "greedy_search", "beam_search"),
    "evaluation": ("average_checkpoints", "corpus_scores", "evaluate_split"),
    "pretrained": ("load_pretrained", "save_pretrained", "ModelRecord"),
    "marian": ("save_huggingface",),
    "errors": ("TransformerLibError",),
}
_PUBLIC = {name: module for module, names in _MODULES.items() for name in names}  # name -> module

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    """A public name, imported from its module on first use (PEP 562), or ``__version__``, read
    only when asked (importlib.metadata scans every installed package)."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("transformer_lib")
        except PackageNotFoundError:  # imported from a source tree that was never installed
            value = "0+unknown"
    elif name in _PUBLIC:
        value = getattr(import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    else:
        raise AttributeError(f"module 'transformer_lib' has no attribute {name!r}")
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
