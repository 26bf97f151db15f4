# The README's two commands: `make book` and `make test`. Both create .venv when it is missing and
# install requirements.txt and the package into it, so a fresh machine with Python 3.11 needs nothing else.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The data set for tests and CI lies beside the repository; a reader's own TRANSFORMER_LIB_DATA wins.
SHARED_DATA := $(abspath ../shared/data/multi30k)
export TRANSFORMER_LIB_DATA ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA))
# The chapters' cached training runs, shared by the tests and the build (tests/conftest.py uses the
# same folder), kept out of the reader's own cache; a reader's TRANSFORMER_LIB_RUNS wins.
export TRANSFORMER_LIB_RUNS ?= $(abspath _build/runs)
# The folder the translator page's models are read from (results/ unless set): absolute, since the
# chapters run in book/.
ifdef TRANSFORMER_LIB_MODELS
export TRANSFORMER_LIB_MODELS := $(abspath $(TRANSFORMER_LIB_MODELS))
endif
# The chapters executed by the tests and the build are the website's: glued numbers stay in the
# prose and long cells show no progress bar (a reader's Jupyter shows both: transformer_lib.book.jupyter).
test book: export TRANSFORMER_LIB_BOOK_BUILD = 1
# Two workers on the two-core machines we test on; set PYTEST_WORKERS=0 to run in one process.
PYTEST_WORKERS ?= 2

.PHONY: help install tangle translator book site-test test check lint format serve lab notebooks bench clean

help:
	@echo "make book   build the HTML book (every chapter executed) into _build/html"
	@echo "make test   tangle check, ruff, and pytest (which executes every chapter, for the book too)"
	@echo "make site-test  open every page of the built book in headless Chromium (after make book)"
	@echo "make tangle regenerate transformer_lib/ from the book"
	@echo "make translator  export the translator page's models to ONNX (make book does it)"
	@echo "make format ruff-format the code, the book's code cells included"
	@echo "make serve  serve the built book on http://127.0.0.1:8000 (builds it if there is none)"
	@echo "make lab    open the chapters in JupyterLab (installed into .venv on first use)"
	@echo "make notebooks  write the chapters as notebooks into _build/notebooks"
	@echo "make bench  run the benchmarks"

# --no-compile: byte-compiling every installed module took a third of the install's time; Python
# compiles the modules a program imports when it first imports them.
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-compile -r requirements.txt
	$(BIN)/python -m pip install -q --no-compile --no-deps -e .
	@touch $@

install: $(STAMP)

# The translator page's JavaScript libraries, pinned by package-lock.json, installed without
# running any package's install script; again only when the lock file changes.
NODE_STAMP := node_modules/.installed
$(NODE_STAMP): package.json package-lock.json
	npm ci --ignore-scripts --no-audit --no-fund
	@touch $@

# The models the translator page offers, exported as ONNX graphs into _build/translator: once per
# model and version (the export is skipped while the models, the code and the tools are unchanged).
# TRANSFORMER_LIB_MODELS=DIR reads them from another folder than results/.
translator: tangle $(NODE_STAMP)
	$(BIN)/python tools/export_translator.py --out _build/translator

tangle: $(STAMP)
	$(BIN)/python tools/tangle.py

# A chapter whose code and inputs are unchanged since its last execution (by the tests or an
# earlier build) is not executed again: tools/book_cache.py empties the cache when the library or
# the results change.
book: tangle translator
	$(BIN)/python tools/book_cache.py --refresh
	$(BIN)/jupyter-book build --all .
	@echo "The book is in _build/html/index.html"

# Serves _build/html on 127.0.0.1 and opens every page in Debian's chromium through Playwright; fails
# on console errors, failed or off-site requests, unrendered math or charts, and broken links.
# Screenshots go to _build/site-test/.
site-test: $(STAMP)
	$(BIN)/python tools/site_check.py --site _build/html --shots _build/site-test

check: $(STAMP)
	$(BIN)/python tools/tangle.py --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# pytest exits 5 when it collects no test; that must fail the run, never pass as green. The
# translator's graphs are exported first, once: two chapters read them, and the tests run chapters
# side by side. The ten slowest tests are listed at the end, to show where the time goes.
test: check translator
	$(BIN)/python tools/book_cache.py --refresh
	@set +e; $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --durations=10 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests; failing"; exit 1; fi; exit $$rc

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/jupytext --pipe "$(abspath $(BIN))/ruff format -" book/*.md
	$(BIN)/python tools/tangle.py

# Serves the book that is built (building it first only when there is none: a build takes minutes).
serve: $(STAMP)
	@test -f _build/html/index.html || $(MAKE) book
	$(BIN)/python -m http.server --directory _build/html --bind 127.0.0.1 8000

# JupyterLab, installed into .venv on first use, opening the chapters as notebooks (jupytext's
# extension, which needs JupyterLab 4.6). jupyterlab-myst, which would render MyST's roles, is
# left out: its newest release (2.7.0) does not load in JupyterLab 4.6 (@jupyter/ydoc 3 against
# 4); a glued number is printed by the cell that computes it instead (transformer_lib.book.jupyter).
LAB_STAMP := $(VENV)/.lab-installed
$(LAB_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q jupyterlab==4.6.6
	$(BIN)/python tools/lab.py
	@touch $@

lab: tangle $(LAB_STAMP)
	$(BIN)/jupyter lab book/

# The chapters as .ipynb notebooks in _build/notebooks/ (FORCE=1 writes over ones you changed).
notebooks: $(STAMP)
	$(BIN)/python tools/notebooks.py $(if $(FORCE),--force)

# Every benchmark prints our figure, a peer's measured in the same run, and their ratio, and writes
# results/perf-<device>/<name>.json. On this CPU they take a few minutes; on a GPU:
# make bench BENCH_ARGS="--device cuda --size base" (tools/gpu/perf.sh runs them as a sequence of commands of at most ten minutes).
BENCHMARKS := attention data train_step profile_step scaling decoding
bench: tangle
	@for name in $(BENCHMARKS); do echo "== benchmarks/$$name.py $(BENCH_ARGS)"; \
	$(BIN)/python benchmarks/$$name.py $(BENCH_ARGS) || exit 1; done

clean:
	rm -rf _build .pytest_cache .ruff_cache
