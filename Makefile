# The README's commands: `make demo` (set up, run the main job on the local machine), `make test`
# (set up everything the tests need, then lint, type-check, build the docs site strictly, run every
# test but gpu and `make check-knowledge`), `make docs` (the site alone, into site/) and
# `make check` (the fast loop: lint, type-check and the unit tests that need no network and start
# no fleet of processes, on every core).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU torch wheel for the smoke job on machines without a GPU. Where the PyTorch CPU index is
# reachable, `make TORCH_PIP_ARGS='--index-url https://download.pytorch.org/whl/cpu' ...` keeps the
# download small; a plain `torch==X` from PyPI is the multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PYTEST_ARGS ?=
# Tools that start ansible-playbook find the venv's without the venv being activated.
IN_VENV := PATH="$(abspath $(BIN)):$$PATH"

.PHONY: demo test check check-knowledge deps bases venv lint lint-python docs clean

# `make demo`: the main job for real on this machine: plan, apply, verify, report (README, "On a
# fresh machine"). Its config (written to DEMO_DIR) puts the frameworks' venv under the clone, keeps
# the driver that is there (`driver: none`: never a driver install) and never reboots; the stack is
# the default for what the probe finds (torch's CPU build where there is no NVIDIA GPU) at
# DEMO_FRAMEWORK, the torch this machine's wheels hold. DEMO_LOCK_CLOSURE=never: the wheels' hashed
# closure needs download.pytorch.org, which the CI machines cannot reach (`auto` where it is).
# A second `make demo` finds the host converged with its lock and only verifies it.
DEMO_DIR := $(CURDIR)/.provision/demo
DEMO_FRAMEWORK ?= $(TORCH_SPEC)
DEMO_LOCK_CLOSURE ?= never
demo: venv
	mkdir -p $(DEMO_DIR)
	printf 'stack: {driver: none, frameworks: ["%s"]}\ninstall: {venv: "%s", reboot: never, lock_closure: %s}\n' \
		'$(DEMO_FRAMEWORK)' '$(DEMO_DIR)/venv' '$(DEMO_LOCK_CLOSURE)' > $(DEMO_DIR)/provision.yaml
	$(IN_VENV) $(BIN)/provision up --local --yes -c $(DEMO_DIR)/provision.yaml

# Two pytest runs: the unit tests on both of CI's cores (xdist; they share no host, port or file),
# then everything else in one process (the integration tests share one session's test hosts, whose
# runs each use the two cores already). ansible-lint runs once, in tests/unit/roles/test_roles_lint.py.
# --dist loadscope hands out whole modules: a module fixture (the smoke job's two-rank CPU run,
# `verify --local`, jax from the index, gpg keys) runs once, not once per worker, and the other
# worker goes on with other modules while one waits on the network.
# Exit status 5 is "no test selected": a PYTEST_ARGS like '-m unit' selects none in one of the runs.
# The smoke job's two-rank CPU run needs both cores to itself: beside the other worker its 300 s
# bound was missed at load 14-18, so it runs in the second, single-process run.
PYTEST_RUN := $(IN_VENV) PROVISION_REQUIRE_TESTHOSTS=1 $(BIN)/pytest -m "not gpu" --durations=25
BOTH_CORES := tests/unit/remote/test_smoke_job.py
test: deps bases venv lint-python docs
	$(PYTEST_RUN) -n 2 --dist loadscope $(PYTEST_ARGS) tests/unit --ignore=$(BOTH_CORES) || test $$? -eq 5
	$(PYTEST_RUN) $(PYTEST_ARGS) $(BOTH_CORES) tests/integration tests/gpu || test $$? -eq 5
	$(MAKE) check-knowledge

# The knowledge against the package index, with only the index reachable (docs/explanation/knowledge.md):
# wheel METADATA through pip's metadata-only path and the release lists, cached per input under
# ~/.cache/provision/pypi (CHECK_KNOWLEDGE_ARGS='--cache DIR' elsewhere). Exit 1 on a contradiction.
CHECK_KNOWLEDGE_ARGS ?=
check-knowledge: venv
	$(IN_VENV) $(BIN)/python -m provision.matrix.check $(CHECK_KNOWLEDGE_ARGS)

# The docs site (mkdocs.yml): --strict turns every warning (a broken link, a page outside the nav)
# into a failure. The reference pages are generated from the code while it builds
# (docs/_hooks/reference.py), so nothing generated is committed and nothing can drift.
# NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor, not about these pages.
docs: venv
	$(IN_VENV) NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# ansible-lint is not run here: tests/unit/roles/test_roles_lint.py runs it (the same profile).
check: lint-python
	$(IN_VENV) $(BIN)/pytest -m "unit and not slow and not network" -n auto -q $(PYTEST_ARGS)

deps:
	bash tests/hosts/install-deps.sh

# The test hosts' two base rootfs (debootstrap of Debian 12 and 13: minutes each on a fresh
# machine) start building in the background here, beside the venv, the lint and the unit tests;
# the integration fixtures wait for them (tests/hosts/harness.py prefetch_bases).
bases: deps
	$(PYTHON) tests/hosts/harness.py

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,docs]'
	$(BIN)/python -m pip install -q $(TORCH_PIP_ARGS) '$(TORCH_SPEC)'
	touch $@

PY_SOURCES := provision tests benchmarks docs/_hooks playbooks/roles/signed_repo/library playbooks/roles/package_plan/library playbooks/roles/frameworks/library

lint: lint-python
	$(IN_VENV) $(BIN)/ansible-lint --profile production --offline playbooks

lint-python: venv
	$(BIN)/ruff check $(PY_SOURCES)
	$(BIN)/ruff format --check $(PY_SOURCES)
	$(BIN)/mypy

clean:
	bash tests/hosts/testhosts.sh down || true
	rm -rf $(VENV) build dist site .pytest_cache .mypy_cache .ruff_cache
