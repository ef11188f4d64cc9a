"""Markers that need outside things, and the CI switches that turn their skips into failures.

- `docker`: a reachable Docker engine. Skips here when none answers; with
  HARNESS_REQUIRE_DOCKER=1 (set by .ci/run) a missing engine FAILS the test instead.
- `nvcc`: nvcc and cuobjdump. HARNESS_REQUIRE_NVCC=1 turns the skip into a failure.
- `gpu`: an NVIDIA GPU. CI has none, so these always skip there with the reason.
A test's own prerequisite (an image, sshd, the aarch64 handler) goes through
`skip_or_fail_under_ci` with the switch that covers it (HARNESS_REQUIRE_DOCKER, HARNESS_REQUIRE_ARM64).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Test doubles (the fake vLLM server and its launcher) live in tests/support, outside the
# product package: `from support.local import fake_server`.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@functools.cache
def docker_problem() -> str | None:
    try:
        from harness.engine import connect

        connect(timeout=5)
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine here"
        return f"no Docker engine: {exc}"
    return None


@functools.cache
def nvcc_problem() -> str | None:
    from harness.cli.doctor import find_cuobjdump

    if not (shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists()):
        return "nvcc not found"
    if not find_cuobjdump():
        return "cuobjdump not found (pip install nvidia-cuda-cuobjdump)"
    return None


@functools.cache
def gpu_problem() -> str | None:
    from harness.gpus import probe

    p = probe()
    return None if p.ok else f"no NVIDIA GPU on this host ({p.reason})"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.path.name in _UNPLACED:
        pytest.fail(f"{item.path.name} holds Docker or network tests but tests/support/workers.py does not "
                    "place it: add it to GROUPS there (pytest-xdist would run it beside the others)", pytrace=False)
    if item.get_closest_marker("docker"):
        problem = docker_problem()
        if problem:
            if os.environ.get("HARNESS_REQUIRE_DOCKER") == "1":
                pytest.fail(f"HARNESS_REQUIRE_DOCKER=1 but {problem}", pytrace=False)
            pytest.skip(f"{problem} (set HARNESS_REQUIRE_DOCKER=1 to make this a failure)")
    if item.get_closest_marker("nvcc"):
        problem = nvcc_problem()
        if problem:
            if os.environ.get("HARNESS_REQUIRE_NVCC") == "1":
                pytest.fail(f"HARNESS_REQUIRE_NVCC=1 but {problem}", pytrace=False)
            pytest.skip(problem)
    if item.get_closest_marker("gpu"):
        problem = gpu_problem()
        if problem:
            pytest.skip(f"needs a GPU: {problem}")


def _worker(config: pytest.Config) -> bool:
    """True in a pytest-xdist worker (`make test` runs the suite in several)."""
    return hasattr(config, "workerinput")


# pytest-xdist: which tests share a worker, and in which order (tests/support/workers.py).
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadgroup":
        from support.workers import scheduler

        return scheduler(config, log)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _worker(config):
        return
    from support.workers import order, unlisted

    _UNPLACED.update(unlisted(items))  # their tests fail at setup, saying so
    order(items)


_UNPLACED: set[str] = set()


def skip_or_fail_under_ci(why: str, switch: str = "HARNESS_REQUIRE_DOCKER") -> None:
    """A Docker test whose own prerequisite is missing (an image, sshd, docker-registry, the
    kernel's aarch64 handler): skip with the reason here; under `switch`=1 (CI sets it and installs
    all of them) fail instead, so a green CI means these tests ran too."""
    if os.environ.get(switch) == "1":
        pytest.fail(f"{switch}=1 but {why}", pytrace=False)
    pytest.skip(f"{why} (set {switch}=1 to make this a failure)")


def make_runs_module():
    """tests/fixtures/runs/make_runs.py, imported once: it builds run dirs from real pieces."""
    import importlib.util
    import sys

    name = "harness_fixture_make_runs"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, FIXTURES / "runs" / "make_runs.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


_BEFORE: dict[str, set[str]] = {}
_LEAKED: dict[str, list[str]] = {}
_TMP: list[str] = []
_WORKER_LEAKS: dict[str, list[str]] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist, in the controller: a worker ended; what it left in its temporary folder."""
    for kind, items in (getattr(node, "workeroutput", None) or {}).get("harness_leaked", {}).items():
        _WORKER_LEAKS.setdefault(kind, []).extend(items)


def pytest_sessionstart(session: pytest.Session) -> None:
    from support.caches import no_cache_outside_tests
    from support.leftovers import private_tmp, snapshot

    _TMP.append(private_tmp())
    no_cache_outside_tests(_TMP[0])
    if not _worker(session.config):  # the engine is counted once, around the whole session
        _BEFORE.update(snapshot())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite leaves nothing behind: a new image, container or temporary file fails the run.
    Images and containers are counted on the whole engine: set HARNESS_SHARED_ENGINE=1 where
    other test sessions use the same engine at the same time (they are then listed, not failed).
    Under pytest-xdist each worker has its own temporary folder and hands what is left in it to
    the controller, which counts the engine after every worker has ended."""
    from support.leftovers import new_since, snapshot

    if _worker(session.config):
        tmp = new_since({}, {"temporary files": snapshot(_TMP[0], engine=False)["temporary files"]})
        session.config.workeroutput["harness_leaked"] = tmp  # type: ignore[attr-defined]
        shutil.rmtree(_TMP[0], ignore_errors=True)
        return
    _LEAKED.update(new_since(_BEFORE, snapshot(_TMP[0] if _TMP else None)))
    for kind, items in _WORKER_LEAKS.items():
        _LEAKED[kind] = sorted({*_LEAKED.get(kind, []), *items})
    if _TMP:
        shutil.rmtree(_TMP[0], ignore_errors=True)
    if os.environ.get("HARNESS_SHARED_ENGINE") == "1":
        # another test session on the same engine makes images meanwhile: only warn about those
        for kind in ("images", "containers"):
            if kind in _LEAKED:
                _LEAKED[f"{kind} (HARNESS_SHARED_ENGINE=1: not counted, maybe another session's)"] = _LEAKED.pop(kind)
    if any(not k.endswith("not counted, maybe another session's)") for k in _LEAKED) and session.exitstatus == 0:
        session.exitstatus = 1


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """After pytest's own summary: every skipped test, grouped by reason, so the last lines of
    `make test` say what did not run and what would make it run."""
    result = yield
    if _LEAKED:
        terminalreporter.section("left behind by this session (a test must remove what it makes)", sep="-")
        for kind, items in _LEAKED.items():
            for item in items:
                terminalreporter.write_line(f"  {kind}: {item}")
    skipped = terminalreporter.stats.get("skipped", [])
    by_reason: dict[str, list[str]] = {}
    for rep in skipped:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        by_reason.setdefault(" ".join(reason.removeprefix("Skipped: ").split()), []).append(rep.nodeid)
    if by_reason:
        terminalreporter.section(f"{len(skipped)} skipped, by reason", sep="-")
        for reason, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            names = ", ".join(i.split("::")[-1] for i in ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
            terminalreporter.write_line(f"{len(ids):4d}  {reason}")
            terminalreporter.write_line(f"      ({names})")
    return result


# The hostile-input suites (tests/test_hostile_*.py): a process the tool did not start, which no
# command may signal, and a HOME and working folder of the test's own.
@pytest.fixture(scope="module")
def victim():
    from support.hostile import start_victim

    p = start_victim()
    yield p
    p.kill()
    p.wait()


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def pinned_sources():
    """The one way a test gets a download: the pinned vLLM and FlashInfer sdists (and their
    unpacked trees) in the suite's one cache, fetched once, under a lock
    (`pinned_sources.sdist(name, version)`, `pinned_sources.tree(source)`). A test that asks for
    it sees that cache; every other test sees an empty one (tests/support/caches.py)."""
    from support.caches import PinnedSources

    return PinnedSources()


@pytest.fixture
def default_sources(pinned_sources):
    """The trees the shipped default matrices pin (vLLM 0.33.0, FlashInfer 0.7.2.post1), unpacked in
    the cache a render reads its build requirements from (`harness build --dry-run`, `render`)."""
    pinned_sources.tree("vllm", "0.33.0")
    pinned_sources.tree("flashinfer-python", "0.7.2.post1")


@pytest.fixture(autouse=True)
def _own_caches(request, tmp_path, monkeypatch):
    """Each test has download caches of its own, empty, unless it asks for `pinned_sources`
    (then the suite's one cache); a repository on disk is read through a bare mirror in the cache
    (harness/git.py): each test keeps its mirrors in its own folder, never the user's."""
    from support import caches

    import harness.bisect.history as history
    import harness.image.offline as offline

    pinned = "pinned_sources" in request.fixturenames
    root = caches.SHARED if pinned else tmp_path / ".harness-cache"
    # the compile cache is each test's own, also where it reads the shared sdists (never the
    # user's store, which an earlier harness may have made without the marker)
    own = tmp_path / ".harness-cache"
    caches.point(root, monkeypatch.setattr, compile_root=own)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(root))
    monkeypatch.setenv("HARNESS_COMPILE_CACHE_DIR", str(own / "compile"))
    monkeypatch.setattr(history, "GIT_CACHE", tmp_path / ".git-mirrors")
    monkeypatch.setattr(offline, "MIRRORS", tmp_path / ".git-mirrors")
    before = caches.listing() if pinned else set()
    yield
    if pinned and (added := caches.added_by_tests(before)):
        pytest.fail(f"this test wrote {added} into the shared download cache: only pinned_sources writes there "
                    "(ask it for that tree or sdist first)", pytrace=False)
    if not pinned and (downloaded := caches.downloads_in(root)):
        pytest.fail(f"this test downloaded {downloaded} (a command it started did): ask for pinned_sources "
                    "or default_sources instead", pytrace=False)
