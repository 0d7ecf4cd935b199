# Every target installs what it needs into .venv first (pinned by constraints.txt).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.installed-core
STAMP := $(VENV)/.installed
SOURCES := src tests bench examples flows tools

.PHONY: install demo demo-local test lint bench clean

# llama-cpp-python (the local extra: make test, make demo-local) compiles llama.cpp. It is built
# here, always from source and never taken from pip's cache or a prebuilt wheel: pip keys the wheels
# it has built by the source archive alone, so a wheel built on another machine or with other flags
# would be reused without a word. (CI's SIGSEGV at the first token most likely came from such a
# reuse: its install was too short to have built llama.cpp. A native build also crashed on a CPU
# whose AMX the kernel does not grant: SIGSEGV in ggml_backend_amx_mul_mat.) On x86-64 the build
# is portable (GGML_NATIVE=OFF: SSE4.2, AVX, AVX2, FMA, F16C, BMI2; no AVX-512, no AMX), so it runs
# the same wherever it is built, and here as fast as a native one; elsewhere llama.cpp's default.
ifeq ($(shell uname -m),x86_64)
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF
endif
LLAMA := $(VENV)/.installed-llama

# make demo needs only evalpipe itself (no C++ build); everything else installs every extra.
$(CORE): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e .
	touch $(CORE)

# Rebuilt when the pins change, not on every edit of pyproject.toml (~6 min on two cores).
$(LLAMA): constraints.txt | $(CORE)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet --disable-pip-version-check \
		--no-cache-dir --no-binary llama-cpp-python --force-reinstall --no-deps -c constraints.txt llama-cpp-python
	touch $(LLAMA)

$(STAMP): $(LLAMA)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,maf,dask,ray,local]'
	touch $(STAMP)

install: $(STAMP)

## make demo: run the demo suite's Prefect flow (a Prefect server with its UI, kept for the next
## run; scripted three-agent workflow, local checks, per-agent sub-results, Parquet in runs/), then
## the canary suite, whose gate must fail; it ends saying where the UI and the view are
demo: $(CORE)
	$(BIN)/evalpipe run examples/travel/suite.yaml
	@echo "--- canary: known-bad agents; the same gate must fail (exit code 1) ---"
	@$(BIN)/evalpipe run examples/travel/canary.yaml --no-progress > runs/canary.log 2>&1; \
		status=$$?; \
		if [ $$status -eq 1 ]; then echo "canary: its gate failed, as it must ($$(grep -c '  FAIL  ' runs/canary.log) clauses violated; runs/canary.log)"; \
		else echo "canary gate did NOT fail (exit $$status): the evaluation is broken"; cat runs/canary.log; exit 1; fi
	@echo ""
	@echo "Prefect UI: $$($(BIN)/evalpipe server url)  (both runs; it stops 10 min after the last run)"
	@echo "the view:   $(BIN)/evalpipe view runs  (then open http://127.0.0.1:8765/)"
	@echo "next:       $(BIN)/evalpipe run examples/travel/suite.yaml --param repetitions=5, then $(BIN)/evalpipe history runs"

## make demo-local: the real-model demo (examples/local): SmolLM2-135M on llama-cpp-python's server
## (the local extra) on 127.0.0.1:8737, an OpenAIChatAgent with a tool, local checks and a judge on
## the same model; the server is stopped afterwards (also on failure) and the run's exit code kept
demo-local: $(STAMP)
	$(BIN)/python -m evalpipe.local_model --port 8737 -- $(BIN)/evalpipe run examples/local/suite.yaml

## make test: lint, type-check and run the test suite
# Two pytest workers (pytest-xdist), a test file each at a time: most tests wait on a real server
# (Prefect, the local model, Chromium), so two cores run the suite in ~10 min instead of ~15.
# Each worker starts its own session servers. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: lint
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

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
