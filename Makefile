# Every target creates .venv first when it is missing, so any of them works on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
EXTRAS := test,dev,demo,motor,server,odm
# pymongo eras exercised by `make test-compat`: the newest patch of every minor release whose
# retry loop, server selection or handshake changed (4.10 changed none), and 4.20.0, the last
# without conn_mgr (why each: docs/compatibility.md).
COMPAT_VERSIONS ?= 4.9.2 4.11.3 4.12.1 4.13.2 4.14.1 4.15.5 4.16.0 4.17.0 4.18.3 4.19.0 4.20.0 4.20.1

.PHONY: install prometheus valgrind test test-compat test-pythons lookahead lint format demo bench spec-test spec-tests pymongo-tests docs clean FORCE

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The editable install uses setuptools' strict mode: a tree of links (build/__editable__.*) that
# type checkers follow, where the default mode's import hook is invisible to mypy and pyright.
# That tree lists the package's files at install time, so the install is redone when a file is
# added, moved or removed, or the tree is gone: $(VENV)/.files changes only then (edits to existing
# files need nothing).
EDITABLE := --config-settings editable_mode=strict
PACKAGE_FILES := $(shell find backpressure -type f -not -path '*/__pycache__/*' 2>/dev/null | LC_ALL=C sort)

FORCE:

$(VENV)/.files: FORCE | $(BIN)/python
	@ls -d build/__editable__.* > /dev/null 2>&1 || rm -f $@
	@echo '$(PACKAGE_FILES)' | cmp -s - $@ || echo '$(PACKAGE_FILES)' > $@

$(VENV)/.installed: pyproject.toml $(VENV)/.files | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]' $(EDITABLE)
	touch $@

# `make demo` needs only the package's dependencies and its demo extra (a full install already
# has them). It runs from the checkout (python -m puts it on sys.path), so nothing is built;
# where scripts/requirements.py cannot list them (Python < 3.11), the package is installed.
# --no-compile: Python compiles the modules the demo imports, not all of matplotlib and numpy.
$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	if [ ! -f $(VENV)/.installed ] || [ pyproject.toml -nt $(VENV)/.installed ]; then \
		if $(BIN)/python scripts/requirements.py demo > $(VENV)/demo-requirements.txt; then \
			$(BIN)/python -m pip install -q --no-compile -r $(VENV)/demo-requirements.txt; \
		else $(BIN)/python -m pip install -q -e '.[demo]'; fi; fi
	touch $@

install: $(VENV)/.installed

# A real Prometheus for the tests that need one (tests/test_dashboards.py: promtool checks and
# unit-tests the alert rules; tests/integration/test_prometheus_server.py: a server scrapes the
# exporter during an overload): Debian's prometheus package, installed only when `prometheus`
# or `promtool` is missing (as root, with apt; .ci/run runs this before the tests). Without it
# those tests are skipped, and fail where the CI variable is set (tests/prometheus/tools.py).
prometheus:
	@if command -v prometheus > /dev/null && command -v promtool > /dev/null; then \
		echo "prometheus: $$(prometheus --version 2>&1 | head -n 1)"; \
	else \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends prometheus > /dev/null && \
		echo "prometheus: installed $$(prometheus --version 2>&1 | head -n 1)"; \
	fi

# valgrind's callgrind counts instructions for the overhead benchmark's --instructions mode (and
# its test): Debian's valgrind package, installed when missing.
valgrind:
	@if command -v valgrind > /dev/null; then \
		echo "valgrind: $$(valgrind --version)"; \
	else \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends valgrind > /dev/null && \
		echo "valgrind: installed $$(valgrind --version)"; \
	fi

# Branch coverage of the package over the whole suite, with a floor: the total measured when it
# was set (83.0 % on pymongo 4.20.1), less 2 points. Coverage starts with each Python process
# rather than through pytest-cov: the package's own pytest plugin imports it before pytest-cov
# would begin, and every module-level line would count as missed. COVERAGE_PROCESS_START has
# coverage's start-up hook measure the pytest process and every xdist worker from their first
# line; each writes its own data file (parallel = true), combined before the report
# (tests/conftest.py keeps the tests' own subprocesses unmeasured, as in one process).
# The tests run in PYTEST_WORKERS xdist workers (pytest-xdist; 0 runs them in one process): 4 on
# the 2-core machine, where many tests wait on servers and subprocesses (measured against 3).
# The era runs (test-compat, lookahead) are not measured.
COVERAGE_FLOOR ?= 81
PYTEST_WORKERS ?= 4

test: $(VENV)/.installed spec-tests
	@$(BIN)/python -c "import motor, pymongo; print('make test: pymongo', pymongo.version, '/ motor', motor.version)"
	$(BIN)/python -m coverage erase
	COVERAGE_PROCESS_START=pyproject.toml $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal
	$(BIN)/python -m coverage combine -q
	$(BIN)/python -m coverage report --fail-under=$(COVERAGE_FLOOR)

test-compat: $(VENV)/.installed spec-tests
	PYTHON=$(PYTHON) bash scripts/test-compat.sh $(COMPAT_VERSIONS)

# The era-sensitive tests on every other supported Python, each in .venv-py/<version> with the
# newest pymongo it can install and Motor 3.7 (scripts/test-pythons.sh finds the interpreters).
TEST_PYTHONS ?= 3.9 3.10 3.12 3.13

test-pythons: spec-tests
	bash scripts/test-pythons.sh $(TEST_PYTHONS)

# The newest pymongo on the package index against the era-sensitive tests (scripts/lookahead.sh).
lookahead: $(VENV)/.installed
	PYTHON=$(PYTHON) bash scripts/lookahead.sh

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict backpressure
	@# Typical user code, from outside the checkout: the public signatures hold, and mypy finds
	@# the installed package as a user's project would (tests/typing/api.py).
	cd "$$(mktemp -d)" && "$(CURDIR)/$(BIN)/mypy" --strict --no-incremental \
		--python-executable "$(CURDIR)/$(BIN)/python" "$(CURDIR)/tests/typing/api.py"
	$(BIN)/python scripts/unasync.py --check

format: $(VENV)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

demo: $(VENV)/.demo-installed
	$(BIN)/python -m backpressure.demo $(DEMO_ARGS)

bench: $(VENV)/.installed
	$(BIN)/python -m backpressure.bench $(BENCH_ARGS)

# The official spec suites are never committed: `make spec-tests` extracts them from the sdist of
# the pymongo under test (and of 4.17.0, whose sdist still has the SDAM files) on the package index
# into .cache/spec-tests/pymongo-<version>/ (tests/spec/sources.py; without the network it says so
# and those suites are skipped). `make spec-test` runs the unified suites (tests/spec).
spec-tests: $(VENV)/.installed
	$(BIN)/python tests/spec/sources.py

spec-test: $(VENV)/.installed spec-tests
	$(BIN)/python -m pytest tests/spec

# pymongo's own backpressure tests, then its server-selection tests (sync and async, from the
# installed pymongo's source
# distribution, cached in .cache/pymongo-tests) against the embedded replica set, with every
# client enabled with each of PRESET (comma-separated: default, current, adaptive, draft, or
# stock for none); with stock among them, every other preset must pass exactly what stock passes.
# JOBS files run at once, each against its own server (the tests mostly wait).
PRESET ?= default,stock
JOBS ?= 4

pymongo-tests: $(VENV)/.installed
	$(BIN)/python scripts/pymongo_tests.py --preset $(PRESET) --jobs $(JOBS) $(PYMONGO_TESTS_ARGS)
	$(BIN)/python scripts/pymongo_tests.py --suite selection --preset $(PRESET) --jobs $(JOBS) \
		$(PYMONGO_TESTS_ARGS)

# The docs site (Sphinx, furo, MyST): strict (-W: a warning fails; -n: every reference must
# resolve), offline (no intersphinx), into docs/_build/html. The API reference imports the
# package with its extras, so the full install comes first.
$(VENV)/.docs-installed: pyproject.toml | $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[docs]' $(EDITABLE)
	touch $@

docs: $(VENV)/.docs-installed
	rm -rf docs/_build/html
	$(BIN)/python -m sphinx -W -n --keep-going -q -b html docs docs/_build/html
	@echo "docs: open docs/_build/html/index.html"

clean:
	rm -rf $(VENV) .venv-compat .venv-py build *.egg-info .pytest_cache .mypy_cache .ruff_cache docs/_build .coverage .cache
