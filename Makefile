# The two set-up commands of the README: `make figures` and `make test`.
VENV ?= .venv
BIN := $(VENV)/bin
PROFILE ?= full

.PHONY: setup figures test test-browser lint format
setup:
	VENV=$(VENV) scripts/setup.sh dev

figures: setup
	$(BIN)/grpo-lab figures --profile $(PROFILE)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy
	$(BIN)/python scripts/check_notebooks.py

# the test suite, then the committed full-profile notebooks re-executed against results/ under nbval, their
# figures compared with figures/ (nothing trained)
test: lint
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=25
	$(BIN)/grpo-lab figures --check

# the playground in JupyterLab and headless Chromium (needs /usr/bin/chromium: apt-get install chromium)
test-browser: setup
	$(BIN)/python -m pytest -q tests/browser

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
	$(BIN)/nbstripout notebooks/*.ipynb
