# Every target creates .venv itself, so a clean clone needs only Python 3.11.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev,tokenizers,plot]'
	touch $(STAMP)

# The main job: replay a real recorded session under a small window, compare the
# three policies, write the report and plot to demo-output/ (offline).
DEMO_SESSION := examples/sessions/ctf-web-i_got_id_demo.traj
demo: $(STAMP)
	$(BIN)/cairn replay $(DEMO_SESSION) --window 12288 --compare --report demo-output
	$(BIN)/cairn inspect demo-output/cairn/transcript.jsonl

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy src

test: lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_estimator.py
	$(BIN)/python benchmarks/bench_transcript.py
	$(BIN)/python benchmarks/bench_pipeline.py
	$(BIN)/python benchmarks/replay.py

clean:
	rm -rf $(VENV) build demo-output .pytest_cache .mypy_cache .ruff_cache
