"""The book's own machinery: support code for the chapters, not part of the library's API.

Figures, tables and explorers, the solutions of the exercises, the Table 3 sweep and its verdicts,
and the reports of recorded runs. The chapters, the tools and the tests import these modules; the
library itself (everything in ``transformer_lib`` outside this folder) never does, so editing a
chart changes nothing a user imports and does not retrain the runs the chapters cache. Like the
library, every module here is written by ``tools/tangle.py`` from the chapters in ``book/``.
"""
