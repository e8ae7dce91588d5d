# Fresh machine: `make run` (main job on the embedded sample bucket), `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BUCKET ?= data/sample_bucket
WAREHOUSE ?= data/warehouse.duckdb
SITE ?= site

.PHONY: run test test-fast bench bench-scale samples clean lock browser

# constraints.txt pins every package to the versions the suite passed with: installs are
# reproducible, and pip does not spend many minutes backtracking through boto versions.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# After changing dependencies in pyproject.toml and passing `make test`: pin what was tested.
lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable > constraints.txt

run: $(STAMP)
	$(BIN)/dumpscope run --bucket $(BUCKET) --warehouse $(WAREHOUSE) --site $(SITE)
	$(BIN)/dumpscope sql --warehouse $(WAREHOUSE) "SELECT kind, status, count(*) AS dumps FROM dumps GROUP BY ALL ORDER BY kind"
	@echo "report site: $(SITE)/index.html (browse it: $(BIN)/python -m http.server -d $(SITE) 8000 --bind 127.0.0.1)"

# The suite in four tiers (tests/conftest.py): fast (in this process only), slow (in process, seconds
# each), integration (Prefect, subprocesses, S3) and browser. `make test` runs them all on three workers,
# `make test-fast` the fast tier on three: on two cores, since ~40 % of a worker's time is spent waiting
# (subprocesses, servers, locks), a third worker fills it (docs/speed.md). pytest-xdist hands a unit at a time to the worker that is free,
# in the order tests/conftest.py sorts them (`_schedule`, `pytest_xdist_make_scheduler`): the slow tiers
# first, the fast tier last, and a module's tests that share a module-scoped fixture as one unit
# (--dist loadfile built each module's fixtures once, but its last files ran on one worker while the
# other idled, a minute longer).
# Bytecode is cached (__pycache__, ignored by git) even where PYTHONDONTWRITEBYTECODE is set: compiling
# the tree again costs each worker seconds.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q
TEST_WORKERS ?= 3
WORKERS := -n $(TEST_WORKERS)

# The 25 slowest tests end the output: where CI's minutes go (the suite's budget is 10 minutes).
test: $(STAMP) browser
	$(PYTEST) $(WORKERS) --durations=25

test-fast: $(STAMP)
	$(PYTEST) $(WORKERS) -m "not integration and not browser and not slow"

# The browser tests drive Debian's chromium (Playwright's own browser download does not work
# here). A clean machine has none: install it with apt-get, as root or through sudo.
browser:
	@if [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1; then :; else \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  echo "installing chromium (apt-get)"; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    chromium fonts-dejavu-core >/dev/null; \
	fi

# bench_real: `dumpscope parse`, `parse --json` and the nightly's staging on ~50 and ~200 MB
# modules made from data/corpus (CPU MB/s, peak RSS; benchmarks/out/bench_real.json), ~1 minute.
# floor_hlo: what the pieces of any Python HLO reader cost on XLA's LLM modules (docs/speed.md).
# bench_torch_trace: the TORCH_TRACE parser on a ~200 MB log made from the real ones (MB/s, peak RSS).
# bench_names: a night of one log of 20,000 compiled functions (pages, site MB, peak RSS of the tree), ~2 minutes.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_parse.py
	$(BIN)/python benchmarks/bench_real.py
	$(BIN)/python benchmarks/bench_hlo.py
	$(BIN)/python benchmarks/floor_hlo.py
	$(BIN)/python benchmarks/bench_aggregate.py
	$(BIN)/python benchmarks/bench_bomb.py
	$(BIN)/python benchmarks/bench_torch_trace.py --mb 200
	$(BIN)/python benchmarks/bench_names.py

# Big nights with a year of history (issue 13): ~10 minutes; figures in benchmarks/out/bench_scale.json.
bench-scale: $(STAMP)
	$(BIN)/python benchmarks/bench_scale.py

# Regenerate the sample bucket with the real compilers (optional extra: jax, torch 2.13.0 CPU, onnx...).
# torch is installed first and pinned: any other torch version pulls GBs of CUDA packages.
samples:
	test -x .venv-samples/bin/python || $(PYTHON) -m venv .venv-samples
	.venv-samples/bin/python -m pip install --quiet torch==2.13.0
	.venv-samples/bin/python -m pip install --quiet -e '.[samples]'
	.venv-samples/bin/python data/generate_samples.py --out $(BUCKET)

clean:
	rm -rf $(VENV) site .pytest_cache .hypothesis
