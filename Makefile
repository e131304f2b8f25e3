# Every target creates .venv itself, so a clean clone needs only Python 3.11.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-live test lint bench soak clean tmux chromium postgresql

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev,tokenizers,plot,web,postgres]'
	touch $(STAMP)

# The real model behind a real server for the end-to-end tests: llama.cpp's
# OpenAI-compatible server (built from source by pip, about 7 minutes on 2
# cores) and SmolLM2-135M (98 MB). On x86-64 it is built for a portable AVX2
# baseline, not for the build machine's CPU: llama-cpp-python 0.3.36's native
# build segfaulted in its first batched decode on a CPU with AVX-512 and AMX.
# No pip cache, so a wheel built natively earlier is never reused.
LLAMA_CMAKE_ARGS := $(if $(filter x86_64,$(shell uname -m)),-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
E2E_STAMP := $(VENV)/.installed-e2e
TEST_MODEL := .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf

$(E2E_STAMP): pyproject.toml $(STAMP)
	CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)' CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(BIN)/python -m pip install -q --no-cache-dir -e '.[dev,tokenizers,plot,web,postgres,e2e]'
	touch $(E2E_STAMP)

$(TEST_MODEL): | $(BIN)/python
	$(BIN)/python scripts/fetch_test_model.py $(TEST_MODEL)

# The main job: replay a real recorded session under a small window, compare the
# three policies, write the report and plot to demo-output/ (offline).
DEMO_SESSION := examples/sessions/ctf-web-i_got_id_demo.traj
demo: $(STAMP)
	$(BIN)/cairn replay $(DEMO_SESSION) --window 12288 --compare --report demo-output
	$(BIN)/cairn inspect demo-output/cairn/transcript.jsonl

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples scripts
	$(BIN)/ruff format --check src tests benchmarks examples scripts
	$(BIN)/mypy src tests

# tmux, from Debian's packages: the terminal agent's smoke test runs the real
# `cairn` in it (tests/surfaces/test_terminal_tmux.py).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
tmux:
	@command -v tmux >/dev/null || { $(SUDO) apt-get update -q && \
		$(SUDO) apt-get install -y -q --no-install-recommends tmux; }

# Chromium, from Debian's packages: the browser UI's tests drive the real page in it
# headless through playwright (tests/surfaces/web/test_web_browser.py), never a
# browser playwright downloads.
chromium:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -q && \
		$(SUDO) apt-get install -y -q --no-install-recommends chromium; }

# PostgreSQL's server, from Debian's packages: the PostgreSQL store's tests and its
# benchmark start a throwaway server of their own from it (tests/support/postgres_server.py),
# on a Unix socket in a temporary folder.
postgresql:
	@{ [ -x "$$(pg_config --bindir 2>/dev/null)/initdb" ] || ls /usr/lib/postgresql/*/bin/initdb || \
		command -v initdb; } >/dev/null 2>&1 || { $(SUDO) apt-get update -q && \
		$(SUDO) apt-get install -y -q --no-install-recommends postgresql; }

test: lint tmux chromium postgresql $(E2E_STAMP) $(TEST_MODEL)
	CAIRN_TEST_MODEL=$(abspath $(TEST_MODEL)) $(BIN)/python -m pytest -q

# The reliability campaign at full counts (tests/reliability/, DESIGN's
# durability contract): >= 1,000 kills, >= 100,000 fuzzed inputs, >= 3,000
# symlink races per file tool; the figures go to benchmarks/results/reliability.json.
SOAK_RESULTS := benchmarks/results/reliability.json
soak: $(E2E_STAMP)
	rm -f $(SOAK_RESULTS)
	CAIRN_SOAK=1 CAIRN_SOAK_RESULTS=$(abspath $(SOAK_RESULTS)) $(BIN)/python -m pytest -q tests/reliability

# The agent against the real local model: watch a real model compact.
demo-live: $(E2E_STAMP) $(TEST_MODEL)
	$(BIN)/python scripts/demo_live.py $(abspath $(TEST_MODEL))

bench: $(STAMP) postgresql
	$(BIN)/python benchmarks/bench_estimator.py
	$(BIN)/python benchmarks/bench_transcript.py
	$(BIN)/python benchmarks/bench_writer.py
	$(BIN)/python benchmarks/bench_store.py
	$(BIN)/python benchmarks/bench_pipeline.py
	$(BIN)/python benchmarks/bench_terminal.py
	$(BIN)/python benchmarks/bench_web.py
	$(BIN)/python benchmarks/bench_compaction_wait.py
	$(BIN)/python benchmarks/replay.py

clean:
	rm -rf $(VENV) build demo-output .cache .pytest_cache .mypy_cache .ruff_cache
