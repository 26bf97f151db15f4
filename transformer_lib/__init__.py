"""transformer_lib: the Transformer of "Attention Is All You Need", generated from the book.

Every module of this package except this file and ``__main__.py`` is written by ``tools/tangle.py``
from the exported cells of the chapters in ``book/``; edit the book, not the modules. Importing the
package is cheap: it imports nothing heavy, so ``python -m transformer_lib --help`` answers at once.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("transformer_lib")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
