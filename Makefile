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
	$(BIN)/python -m pip install -q -e '.[dev,tokenizers]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/sample_session.py build/demo/sample-session.jsonl
	$(BIN)/cairn inspect build/demo/sample-session.jsonl

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

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
