# Two commands set up and run everything:
#   make demo   creates .venv if needed, then runs the main job on built-in data
#   make test   creates .venv if needed, then runs the test suite
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: env test demo clean-env

env:
	@VENV=$(VENV) PYTHON=$(PYTHON) bash tools/setup_env.sh

test: env
	$(PY) -m pytest tests $(PYTEST_ARGS)

demo: env
	$(PY) tools/demo.py

clean-env:
	rm -rf $(VENV)
