# Fresh machine:  make matrix   (sets up, brings up Docker, picks the matrix for this host's GPU,
#                                checks the host, locks the pins, builds/serves/benchmarks it)
#                 make test     (sets up, brings up Docker and what the tests need, runs the suite)
VENV    ?= .venv
PY      := $(VENV)/bin/python
HARNESS := $(VENV)/bin/harness
# Empty: `harness doctor --pick-matrix` chooses for the GPU found (and says why); MATRIX=... overrides.
MATRIX  ?=
K       ?=
ARGS    ?=
PYTEST_ARGS ?=
# Exit codes: GNU make itself exits 2 whenever a recipe fails, whatever the recipe's code, so
# `make doctor` cannot exit 3 the way `harness doctor` does. Each recipe that runs harness ends
# with $(KEEP_RC): it writes harness's own code (0 done, 1 a verdict failed, 2 bad input, 3 this
# host cannot, 130 interrupted) to $(RC_FILE) and exits with it, so make's "Error N" line shows it
# too. `tools/make-rc TARGET...` runs make and exits with that code, for scripts and CI.
RC_FILE ?= .make-rc
KEEP_RC = rc=$$?; echo $$rc > $(RC_FILE); exit $$rc
# The matrix to use, as a shell expression (a recipe line reads it into $$m).
PICK = rm -f $(RC_FILE); m='$(MATRIX)'; if [ -z "$$m" ]; then m=$$($(HARNESS) doctor --pick-matrix) \
       || { rc=$$?; echo $$rc > $(RC_FILE); exit $$rc; }; else echo "matrix: $$m (MATRIX= given)"; fi

.PHONY: install matrix plan doctor lock test test-say test-fast test-toolchain probe-defaults lint docker-up test-deps clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,audit]'
	touch $@

install: $(VENV)/.installed

# The main job: rebuild and verify the stacks of the matrix for this host, then report.
# `harness run` locks the pins first when the matrix has no .lock yet (and prints them).
matrix: install docker-up
	@$(PICK); set -x; $(HARNESS) doctor -m "$$m" && $(HARNESS) run -m "$$m" $(if $(K),-k '$(K)') $(ARGS); \
	$(KEEP_RC)

plan: install
	@$(PICK); $(HARNESS) plan -m "$$m" $(if $(K),-k '$(K)'); $(KEEP_RC)

doctor: install
	@$(PICK); $(HARNESS) doctor -m "$$m"; $(KEEP_RC)

# Pin base-image digests and PyPI sha256s into <matrix>.lock (needs the registry and pypi.org).
lock: install
	@$(PICK); $(HARNESS) lock -m "$$m" $(ARGS); $(KEEP_RC)

# Brings up a Docker engine (installing Debian's docker.io if root and none is there) and the
# local base images the Docker tests build on; without an engine those tests skip, with reason.
docker-up:
	@bash tools/docker-up.sh && bash tools/base-images.sh || echo "make: no Docker engine here: Docker tests will skip, and nothing can be built"

# chromium and docker-registry from Debian when root with apt; elsewhere their tests skip.
test-deps: install
	@PYTHON=$(PY) bash tools/test-deps.sh

# The first run also downloads the pinned vLLM and FlashInfer sdists (136 MB, unpacked to
# ~690 MB in ~/.cache/vllm-bw-harness) for the patch tests; the last lines list every skip and why.
# TEST_WORKERS pytest-xdist workers (0: one process): most of the suite's time is spent waiting on
# Docker, servers and subprocesses, so 4 keep a 2-core machine busy; tests/support/workers.py
# keeps each module on one worker and the tests that share the engine's or the cache's state together.
TEST_WORKERS ?= 4
test: test-say install docker-up test-deps
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

# The source-build probe test and what it needs: the image harness-test/toolchain:cu130 (2.6 GB
# of torch and CUDA wheels the first time, an 8.6 GB image, ~6 min on 2 cores; needs nvcc); the
# vLLM 0.33.0 configure test and its image harness-test/cuda13-devel:trixie (3.1 GB of wheels,
# a 6.7 GB image, ~9 min on 2 cores).
# `make test` runs that test only where the image is there, and skips it with this command.
test-toolchain: install docker-up
	PYTHON=$(PY) bash tools/toolchain-base.sh
	PYTHON=$(PY) bash tools/cuda13-base.sh
	PYTHON=$(PY) bash tools/cuda13-devel-base.sh
	HARNESS_REQUIRE_TOOLCHAIN=1 $(PY) -m pytest tests/test_source_probe_docker.py tests/test_packaging_probe_docker.py \
	  tests/test_configure_0330_docker.py tests/test_flashinfer_aot_docker.py $(PYTEST_ARGS)

# The packaging probe of every stack of the three default matrices, on the stand-in CUDA 13 base
# of the host's platform and on linux/arm64 (the DGX Spark's CPU) under qemu-user-static:
# examples/defaults-probe/ holds what it wrote (and how long each took). PLATFORMS overrides.
PLATFORMS ?= linux/amd64 linux/arm64
probe-defaults: install docker-up
	@for p in $(PLATFORMS); do PYTHON=$(PY) bash tools/cuda13-base.sh $$p || exit 3; done
	@rc=0; for p in $(PLATFORMS); do $(PY) tools/defaults_probe.py $$p examples/defaults-probe || rc=1; done; exit $$rc

# Said first, before anything is installed.
test-say:
	@bash tools/test-deps.sh --say

test-fast: install
	$(PY) -m pytest -m "not docker and not slow" $(PYTEST_ARGS)

# ruff; mypy on harness/ (config in pyproject.toml; any error fails); the import graph
lint: install
	$(VENV)/bin/ruff check harness tests benchmarks tools
	$(PY) -m mypy
	$(PY) tools/import_graph.py
	$(PY) tools/boundary.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
