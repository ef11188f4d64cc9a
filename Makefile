# Fresh machine:  make matrix   (sets up, then builds/serves/benchmarks the default matrix)
#                 make test     (sets up, then runs the test suite)
VENV    ?= .venv
PY      := $(VENV)/bin/python
HARNESS := $(VENV)/bin/harness
MATRIX  ?= matrix/spark.toml
K       ?=
ARGS    ?=
PYTEST_ARGS ?=

.PHONY: install matrix plan doctor test test-fast lint docker-up clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,audit]'
	touch $@

install: $(VENV)/.installed

# The main job: rebuild and verify the stacks of the default matrix, then report.
matrix: install
	$(HARNESS) doctor -m $(MATRIX)
	$(HARNESS) run -m $(MATRIX) $(if $(K),-k '$(K)') $(ARGS)

plan: install
	$(HARNESS) plan -m $(MATRIX) $(if $(K),-k '$(K)')

doctor: install
	$(HARNESS) doctor -m $(MATRIX)

# Brings up a Docker engine (installing Debian's docker.io if root and none is there) and the
# local base images the Docker tests build on; without an engine those tests skip, with reason.
docker-up:
	@bash tools/docker-up.sh && bash tools/base-images.sh || echo "make: no Docker engine here; Docker tests will be skipped"

test: install docker-up
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: install
	$(PY) -m pytest -m "not docker and not slow" $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check harness tests benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
