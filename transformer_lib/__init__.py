"""transformer_lib: the Transformer of "Attention Is All You Need", generated from the book.

Every module of this package except this file and ``__main__.py`` is written by ``tools/tangle.py``
from the exported cells of the chapters in ``book/``; edit the book, not the modules. Importing the
package is cheap: it imports nothing heavy, so ``python -m transformer_lib --help`` answers at once.
"""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["TransformerLibError", "load_pretrained"]

try:
    __version__ = version("transformer_lib")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str):
    """``transformer_lib.load_pretrained`` and ``transformer_lib.TransformerLibError`` (the base
    class of the errors a user can fix), imported on first use so that importing the package
    stays cheap."""
    if name == "TransformerLibError":
        from transformer_lib.errors import TransformerLibError

        return TransformerLibError
    if name == "load_pretrained":
        from transformer_lib.pretrained import load_pretrained

        return load_pretrained
    raise AttributeError(f"module 'transformer_lib' has no attribute {name!r}")
