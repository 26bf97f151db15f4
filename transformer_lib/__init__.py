"""transformer_lib: the Transformer of "Attention Is All You Need", generated from the book.

Every module of this package except this file and ``__main__.py`` is written by ``tools/tangle.py``
from the exported cells of the chapters in ``book/``; edit the book, not the modules.

The names a user needs are here at the top::

    from transformer_lib import Transformer, TransformerConfig, load_pretrained, translate

Each is imported from its module on first use, so importing the package loads no torch; editors
read the same names from the stub ``__init__.pyi`` (the package ships ``py.typed``, PEP 561).
``transformer_lib.book`` is the book's own machinery, not part of this surface.
"""

from importlib import import_module

# Public name -> the module that defines it. The API reference page documents the same names.
_PUBLIC = {
    # the model (Figure 1) and its parts (Figure 2)
    "Transformer": "model",
    "TransformerConfig": "model",
    "MultiHeadAttention": "attention",
    "scaled_dot_product_attention": "attention",
    "padding_mask": "attention",
    "subsequent_mask": "attention",
    # data and the shared vocabulary
    "load_multi30k": "data",
    "BPETokenizer": "tokenizer",
    "make_batches": "batching",
    # training
    "TrainingConfig": "objective",
    "train": "training",
    "Validation": "training",
    "RunOptions": "training",
    "train_translation": "recipe",
    "load_checkpoint": "checkpoints",
    # decoding and evaluation
    "SearchConfig": "decoding",
    "translate": "decoding",
    "greedy_search": "decoding",
    "beam_search": "decoding",
    "average_checkpoints": "evaluation",
    "corpus_scores": "evaluation",
    "evaluate_split": "evaluation",
    # the shipped models
    "load_pretrained": "pretrained",
    "save_pretrained": "pretrained",
    "ModelRecord": "pretrained",
    # the model for another runtime: a Hugging Face MarianMT folder
    "save_huggingface": "marian",
    # the base of every error a user can fix (a bad file, option or download)
    "TransformerLibError": "errors",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    """A public name, imported from its module on first use (PEP 562); ``__version__`` too, read
    from the installed metadata only when asked (importlib.metadata scans every package)."""
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
