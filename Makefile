# Every target installs what it needs into .venv first (pinned by constraints.txt).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SOURCES := src tests bench examples flows tools

.PHONY: install demo demo-local test lint bench clean

# llama-cpp-python (the local extra) compiles llama.cpp: for a fixed x86-64 level (AVX2), not
# -march=native, so every machine runs the same build; native builds on CPUs with AMX crashed
# (SIGSEGV in ggml_backend_amx_mul_mat) where the kernel does not grant AMX to the process.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,maf,dask,ray,local]'
	touch $(STAMP)

install: $(STAMP)

## make demo: run the demo suite's Prefect flow (ephemeral Prefect, scripted three-agent workflow,
## local checks, per-agent sub-results, Parquet in runs/), then the canary suite, whose gate must fail
demo: $(STAMP)
	$(BIN)/evalpipe run examples/travel/suite.yaml
	@echo "--- canary: known-bad agents; the same gate must fail (exit code 1) ---"
	@$(BIN)/evalpipe run examples/travel/canary.yaml --no-progress > /dev/null 2> runs/canary.log; \
		status=$$?; \
		if [ $$status -eq 1 ]; then echo "canary gate failed, as it must: $$(tail -n 1 runs/canary.log | cut -c1-300)"; \
		else echo "canary gate did NOT fail (exit $$status): the evaluation is broken"; cat runs/canary.log; exit 1; fi

## make demo-local: the real-model demo (examples/local): SmolLM2-135M on llama-cpp-python's server
## (the local extra) on 127.0.0.1:8737, an OpenAIChatAgent with a tool, local checks and a judge on
## the same model; the server is stopped afterwards (also on failure) and the run's exit code kept
demo-local: $(STAMP)
	$(BIN)/python -m evalpipe.local_model --port 8737 -- $(BIN)/evalpipe run examples/local/suite.yaml

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
	$(BIN)/python bench/bench_artifacts.py
	$(BIN)/python bench/bench_flow.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
