# Two commands set up and run everything:
#   make demo   creates .venv if needed, then runs the main job on built-in data
#   make test   creates .venv if needed, then runs the test suite
# and, for the side-by-side study of the routing variants (hours on a CPU):
#   make ablations   trains every variant with several seeds and writes
#                    docs/ablations.md (ABLATION_ARGS: the tool's options)
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
ABLATION_ARGS ?=

.PHONY: env test demo ablations clean-env

env:
	@VENV=$(VENV) PYTHON=$(PYTHON) bash tools/setup_env.sh

test: env
	$(PY) -m pytest tests $(PYTEST_ARGS)

demo: env
	$(PY) tools/demo.py

ablations: env
	$(PY) tools/analysis/ablation_study.py $(ABLATION_ARGS)

clean-env:
	rm -rf $(VENV)
