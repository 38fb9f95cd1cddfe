# The README's two set-up commands are `make quickstart` and `make test`.
# Both create .venv and install the project into it first.
#
# TORCH picks the PyTorch build. The default, `auto`, installs pip's normal (CUDA) build
# where `nvidia-smi` lists a GPU, and elsewhere PyTorch's small CPU build from PyTorch's
# CPU wheel index, as PyTorch's own instructions do; where that index cannot be reached it
# falls back to the plain package index within seconds. `TORCH=cpu` or `TORCH=cuda`
# forces one; any other value is passed to pip as it is (e.g. `TORCH=torch==2.11.0`).
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= auto
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# What each set-up command installs: the quickstart's stages, the surfaces its summary
# points to and GPT-2's vocabulary its tokenizer line compares against (compare); the
# tests need everything plus the test tools.
QUICKSTART_EXTRAS ?= eval,app,lsp,compare
TEST_EXTRAS ?= dev

.PHONY: install install-quickstart torch quickstart test lint format

install: $(VENV)/.installed-$(TEST_EXTRAS)
install-quickstart: $(VENV)/.installed-$(QUICKSTART_EXTRAS)

$(VENV)/.torch:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@set -e; choice="$(TORCH)"; \
	if [ "$$choice" = auto ]; then \
	  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then choice=cuda; else choice=cpu; fi; \
	fi; \
	case "$$choice" in \
	  cuda) $(PY) -m pip install -q "torch==$(TORCH_VERSION)" ;; \
	  cpu) $(PY) -m pip install -q --index-url "$(TORCH_CPU_INDEX)" --timeout 10 --retries 0 \
	         "torch==$(TORCH_VERSION)" 2>/dev/null \
	       || { echo "PyTorch's CPU index could not be reached: installing torch from the package index"; \
	            $(PY) -m pip install -q "torch==$(TORCH_VERSION)"; } ;; \
	  *) $(PY) -m pip install -q "$$choice" ;; \
	esac
	@$(PY) -W ignore -c "import torch; print('installed torch', torch.__version__, '(CUDA ' + torch.version.cuda + ' build)' if torch.version.cuda else '(CPU build)')"
	touch $@

$(VENV)/.installed-%: pyproject.toml $(VENV)/.torch
	$(PY) -m pip install -q -e ".[$*]"
	touch $@

# the time before the install: the quickstart's --total-minutes counts the install too
STARTED := $(shell date +%s)

quickstart: install-quickstart
	$(VENV)/bin/codeparrot quickstart --allow-code-execution --started-at $(STARTED)

test: install lint
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
