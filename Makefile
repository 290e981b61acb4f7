# One entry point for people and CI. `make check` is the test command README.md gives.
PYTHON ?= python3
TYPECHECK_DIR := build/typecheck

.PHONY: install lint format typecheck test check bench clean

install:
	$(PYTHON) -m pip install -e ".[dev,examples,phoenix]"

lint:
	ruff format --check .
	ruff check .

format:
	ruff format .
	ruff check --fix .

# mypy cannot follow setuptools' package-dir mapping, so it checks a tree of links laid out the
# way the package installs (otel_bridge/receivers -> receivers/, ...).
typecheck:
	rm -rf $(TYPECHECK_DIR) && mkdir -p $(TYPECHECK_DIR)/otel_bridge
	for f in otel_bridge/*; do ln -s "$$(pwd)/$$f" $(TYPECHECK_DIR)/otel_bridge/; done
	for d in receivers processors exporters configs; do ln -s "$$(pwd)/$$d" $(TYPECHECK_DIR)/otel_bridge/$$d; done
	cd $(TYPECHECK_DIR) && $(PYTHON) -m mypy --strict --config-file $(CURDIR)/pyproject.toml -p otel_bridge
	MYPYPATH=$(TYPECHECK_DIR) $(PYTHON) -m mypy --strict --config-file pyproject.toml tests benchmarks examples

test:
	$(PYTHON) -m pytest

check: lint typecheck test

clean:
	rm -rf build dist *.egg-info .mypy_cache .pytest_cache .ruff_cache
