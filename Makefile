# Every target installs what it needs into .venv first (pinned by constraints.txt).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SOURCES := src tests bench examples flows

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,maf,dask]'
	touch $(STAMP)

install: $(STAMP)

## make demo: evaluate the scripted travel agent over the demo query set, offline, and print a summary
demo: $(STAMP)
	$(BIN)/evalpipe eval --agent examples.travel.agent:agent \
		--queries examples/travel/queries.jsonl --repetitions 3 --max-concurrency 8 \
		--check tool_calls_present --check tool_call_args_match \
		--check examples.travel.checks:mentions_expected --check examples.travel.checks:concise

## make test: lint, type-check and run the test suite
test: lint
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/mypy

## make bench: the benchmarks (not tests), beside MAF (the maf extra); numbers go to bench/results/
bench: $(STAMP)
	$(BIN)/python bench/bench_evaluate.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
