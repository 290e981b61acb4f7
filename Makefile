# One entry point for people and CI. `make check` is the test command README.md gives.
PYTHON ?= python3

.PHONY: install lint format typecheck test check bench clean

install:
	$(PYTHON) -m pip install -e ".[dev,examples,phoenix,postgres]"

lint:
	ruff format --check .
	ruff check .

format:
	ruff format .
	ruff check --fix .

typecheck:
	$(PYTHON) -m mypy --strict --config-file pyproject.toml -p otel_bridge
	$(PYTHON) -m mypy --strict --config-file pyproject.toml tests benchmarks examples

test:
	$(PYTHON) -m pytest

check: lint typecheck test

clean:
	rm -rf build dist *.egg-info .mypy_cache .pytest_cache .ruff_cache
