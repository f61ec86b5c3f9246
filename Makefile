# The two set-up commands of the README, plus helpers. Everything runs from .venv at the repo root.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Ray: no usage stats, no token auth file in $HOME, a short private temp dir (socket paths are length-limited).
export RAY_USAGE_STATS_ENABLED := 0
export RAY_AUTH_MODE := disabled

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: quickstart test test-fast lint bench browse clean chromium

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-install whenever pyproject.toml changes; the stamp records which extras are in.
$(VENV)/.installed-base: pyproject.toml | $(PY)
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(PY)
	$(PIP) install -q -e ".[dev,export-test]"
	touch $@ $(VENV)/.installed-base

quickstart: $(VENV)/.installed-base
	$(PY) experiments/quickstart.py

# The browser's end-to-end tests drive Debian's Chromium (Playwright's own browser download fails offline).
chromium:
	@command -v chromium >/dev/null || ($(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null)

# CI must not pass by skipping: with MARIN_REQUIRE_ALL=1 a missing test dependency (the gs:// and s3://
# servers, CPU torch + transformers from export-test, lm-eval and playwright from dev, Debian chromium) is an
# error naming it (tests/requirements.py). Every one of them is installed by the two prerequisites.
# A run killed by a signal ends by naming the test and the crashing thread's stack (tests/crash_log.py).
# Two xdist workers (tests/conftest.py groups each module's tests, the quickstart's readers and the books' tests
# on one worker each): the tests that wait on processes, servers and leases overlap with those that compile.
CRASH_LOG := .pytest_cache/crash.txt
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadgroup
test: $(VENV)/.installed-dev chromium lint
	rm -f $(CRASH_LOG)*
	MARIN_REQUIRE_ALL=1 MARIN_CRASH_LOG=$(CRASH_LOG) $(PY) -m pytest -q $(XDIST) --durations=25 || \
		{ status=$$?; $(PY) -m tests.crash_log $(CRASH_LOG); exit $$status; }

# One formatter and linter for the whole tree (settings in pyproject.toml); `ruff format .` fixes the layout.
lint: $(VENV)/.installed-dev
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test-fast: $(VENV)/.installed-dev chromium
	$(PY) -m pytest -q $(XDIST) -m "not slow"

bench: $(VENV)/.installed-dev
	$(PY) benchmarks/executor_bench.py

$(VENV)/.installed-browser: pyproject.toml | $(PY)
	$(PIP) install -q -e ".[browser]"
	touch $@ $(VENV)/.installed-base

browse: $(VENV)/.installed-browser
	$(PY) -m data_browser --root ./local_store $(BROWSE_FLAGS)

clean:
	rm -rf $(VENV) local_store .pytest_cache
