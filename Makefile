# The README's two set-up commands are `make quickstart` and `make test`.
# Both create .venv and install the project into it first.
#
# TORCH picks the torch build: the default is the CPU wheel this project is developed
# on; on a GPU machine use `make quickstart TORCH=torch` to get pip's normal CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0

.PHONY: install quickstart test lint format bench

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

# the time before the install: the quickstart's --total-minutes counts the install too
STARTED := $(shell date +%s)

quickstart: install
	$(VENV)/bin/codeparrot quickstart --allow-code-execution --started-at $(STARTED)

test: install lint
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
