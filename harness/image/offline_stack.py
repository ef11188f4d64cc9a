"""The structure of a stack's Dockerfile that depends on where its inputs come from.

Online (the default): the base stage installs Python from apt and torch from its index, the
sdists are downloaded inside the build (sha256 checked) and vLLM's CMake clones what it needs.
Offline (`offline = true`): everything arrives in the build context, pinned: the sdists from the
cache, each source vLLM's CMake would fetch as a checked archive unpacked to the path its
override variable names (with FETCHCONTENT_FULLY_DISCONNECTED=ON), and the dependencies from
`vllm.deps_wheelhouse`. A local base (a `docker import`ed root) must hold Python, torch, nvcc,
cmake and ninja; the base stage checks them instead of installing them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness import labels as label
from harness.bundle import LOCK, wheelhouse_files
from harness.bundle import read_lock as read_bundle_lock
from harness.errors import ConfigError
from harness.image import offline, sources
from harness.matrix.model import Stack
from harness.safety.roots import Root

LEAVES_OUT = re.compile(r"^Leaves-out:\s*(.+)$", re.MULTILINE)
STAND_IN = re.compile(r"^Stand-in:\s*(.+)$", re.MULTILINE)

REGISTRY_BASE = '''# deadsnakes is not needed on ubuntu24.04 for 3.12; other versions fail here, loudly.
RUN apt-get update \\
 && apt-get install -y --no-install-recommends \\
      python${PYTHON_VERSION} python${PYTHON_VERSION}-venv python${PYTHON_VERSION}-dev \\
      git ccache ca-certificates build-essential ninja-build \\
 && rm -rf /var/lib/apt/lists/* \\
 && python${PYTHON_VERSION} -m venv /opt/venv
ENV PATH=/opt/venv/bin:${PATH} VIRTUAL_ENV=/opt/venv
RUN python -m pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"'''

# A local base has no package index behind it: what the build needs must already be there.
LOCAL_BASE = '''# Local base: Python, torch and the CUDA toolchain are the base's own (no index reachable).
# (nvcc where a CUDA install puts it, if the base's PATH lacks it; torch finds CUDA through it;
# /tmp, which a root file system imported without it lacks and nvcc needs; `python -m pip`: a
# venv may have no pip script, and the system pip refuses to install, PEP 668)
ENV PATH=${PATH}:/usr/local/cuda/bin:/usr/local/cuda-13.0/bin
RUN mkdir -p -m 1777 /tmp && python -c "import sys, torch; v = torch.__version__.split('+')[0]; \\
sys.exit(0 if v == '${TORCH_VERSION}' else f'the base has torch {v}, the stack pins ${TORCH_VERSION}')" \\
 && python -c "import os, sys, sysconfig; h = sysconfig.get_paths()['include']; \\
sys.exit(0 if os.path.isfile(h + '/Python.h') else 'no Python.h in ' + h + ': the base needs Python headers')" \\
 && echo "nvcc: $(command -v nvcc)" && nvcc --version | tail -1 && cmake --version | head -1 \\
 && echo "ninja $(ninja --version)" && python --version && gcc --version | head -1'''


@dataclass(frozen=True)
class OfflineParts:
    values: dict[str, str]  # template placeholders
    files: tuple[tuple[str, bytes], ...]  # build-context files
    buildargs: dict[str, str]  # overrides of render.buildargs_for
    labels: dict[str, str]


def _header_names(patch_texts: list[bytes], line: re.Pattern[str]) -> set[str]:
    names: set[str] = set()
    for data in patch_texts:
        head = data.decode("utf-8", "replace").split("\ndiff --git", 1)[0]
        for m in line.finditer(head):
            names |= {n.strip() for n in m.group(1).split(",") if n.strip()}
    return names


def left_out(patch_texts: list[bytes]) -> set[str]:
    """Sources a patch series removes from the build: `Leaves-out: a, b` in a patch's header."""
    return _header_names(patch_texts, LEAVES_OUT)


def stood_in(patch_texts: list[bytes]) -> set[str]:
    """Unpinned sources a patch series builds from the table's stand-in tree instead: `Stand-in: a`."""
    return _header_names(patch_texts, STAND_IN)


@dataclass(frozen=True)
class SourcePlan:
    """What a stack's build reads of what its vLLM's CMake fetches, its patches applied."""

    pins: tuple[offline.Pin, ...]  # pinned, then stand-ins (Pin.stands_in_for set)
    cut: frozenset[str]  # left out by a patch
    unpinned: tuple[str, ...]  # still needed and not pinned: an offline build is refused

    @property
    def stand_ins(self) -> tuple[offline.Pin, ...]:
        return tuple(p for p in self.pins if p.stands_in_for)


def plan_sources(where: str, table: offline.Table, patch_texts: list[bytes]) -> SourcePlan:
    """The table read through the patches' `Leaves-out:` and `Stand-in:` lines; a name the table
    does not know, or a stand-in it has none of, is an error naming the patch line."""
    cut, asked = left_out(patch_texts), stood_in(patch_texts)
    unknown = cut - set(table.names)
    if unknown:
        raise ConfigError(f"{where}: a patch leaves out {', '.join(sorted(unknown))}, which vLLM "
                          f"{table.vllm} does not fetch", hint=f"use names from {table.path.name}")
    have = {p.name for p in table.stand_ins}
    if asked - have:
        raise ConfigError(f"{where}: a patch asks for a stand-in for {', '.join(sorted(asked - have))}, which "
                          f"{table.path.name} has none of", hint="add a [[stand_ins]] entry, or drop the Stand-in line")
    if asked & cut:
        raise ConfigError(f"{where}: a patch both leaves out and stands in for {', '.join(sorted(asked & cut))}",
                          hint="keep one of the two patch header lines")
    stand = tuple(p for p in table.stand_ins if p.name in asked)
    return SourcePlan(tuple(p for p in table.pins if p.name not in cut) + stand, frozenset(cut),
                      tuple(u[0] for u in table.unpinned if u[0] not in cut and u[0] not in asked))


def online(stack: Stack) -> OfflineParts:
    base = LOCAL_BASE if stack.base_image and stack.base_image.brings_python else REGISTRY_BASE
    return OfflineParts({
        "BASE_SETUP": base,
        "DEPS_WHEELHOUSE": "# dependencies come from the package index",
        "SOURCES_COPY": "# sources are downloaded during the build (sha256 checked)",
        "PIP_OFFLINE": "",
        "REQUIREMENTS_PIP_ARGS": "",
        "OFFLINE_SOURCES": "# vLLM's CMake fetches what it needs from GitHub",
        "OFFLINE_ENV": " && true \\",
    }, (), {}, {})


def _wheelhouse(matrix, stack_name: str, deps_wheelhouse: str) -> tuple[list[tuple[str, bytes]], str]:
    """The dependency wheels and their lock, each checked against the lock's sha256. The lock is
    read as the wheel stacks read it (types, wheel file names, bounded size and depth) and every
    wheel must lie inside the wheelhouse."""
    key = f"stacks.{stack_name}.vllm.deps_wheelhouse"
    rel = Path(deps_wheelhouse)
    where = rel if rel.is_absolute() else (matrix.path.parent / rel).resolve()
    if not (where / LOCK).is_file():
        raise ConfigError(f"{key}: no {where / LOCK}",
                          hint=f"unpack the bundle there first: `harness bundle install DIR --dest {where}`")
    files = wheelhouse_files(where, read_bundle_lock(where))
    return files, f"{len(files) - 1} wheels, {LOCK} sha256 checked"


def _cached_sdist(src) -> Path | None:
    want = sources.sdist_filename(src.name, src.pin)
    for folder in (sources.SDIST_CACHE, sources.CACHE):
        if Root(folder, what="sdist cache").exists(want):
            return sources.sdist(src)  # checks the pinned sha256
    return None


def require_release(where: str, stack: Stack) -> str:
    """The vLLM release an offline stack builds (its sdist and source table follow from it)."""
    if stack.vllm is None or not stack.vllm.pypi:
        raise ConfigError(f"{where}: an offline build needs vllm.pypi (a release sdist)",
                          hint="pin a release, or drop `offline`")
    return stack.vllm.pypi


def require_table(where: str, version: str) -> offline.Table:
    """The table of what vLLM `version`'s CMake fetches; none is a refusal."""
    table = offline.load_table(version)
    if table is None:
        raise ConfigError(f"{where}: no table of what vLLM {version}'s CMake fetches "
                          f"({offline.table_path(version).name})",
                          hint="write one (harness/data/sources/), or drop `offline`")
    return table


def refuse_unpinned(where: str, table: offline.Table, names: list[str]) -> None:
    """Sources the build needs (not left out) that the table declares but does not pin."""
    if names:
        raise ConfigError(f"{where}: vLLM {table.vllm}'s CMake fetches {', '.join(names)}, which "
                          f"{table.path.name} does not pin",
                          hint="pin it there (tools/pin-offline-sources.py), or apply a patch that leaves it out")


def offline_parts(matrix, stack_name: str, stack: Stack, patch_texts: list[bytes]) -> OfflineParts:
    """Everything an offline build of this stack needs, from the cache; a missing piece is an
    error naming it and the command that fetches it."""
    where = f"stacks.{stack_name}"
    version = require_release(where, stack)
    if stack.flashinfer is not None and stack.flashinfer.cubin:
        raise ConfigError(f"{where}.flashinfer.cubin: flashinfer-cubin comes from the package index",
                          hint="set cubin = false for an offline build (the AOT kernels, or JIT, instead)")
    fetch_hint = f"run `harness sources fetch -m {matrix.path}` (with network, or --from DIR)"
    files: list[tuple[str, bytes]] = []
    buildargs: dict[str, str] = {}
    for project, src in (("vllm", sources.vllm_source(stack)), ("flashinfer", sources.flashinfer_source(stack))):
        if src.kind != "pypi" or not src.sha256:
            raise ConfigError(f"{where}.{project}: an offline build needs a PyPI release with sdist_sha256",
                              hint="pin the sdist's sha256 (the index lists it)")
        path = _cached_sdist(src)
        if path is None:
            raise ConfigError(f"{where}.{project}: {sources.sdist_filename(src.name, src.pin)} is not in the cache",
                              hint=fetch_hint)
        files.append((f"sources/{path.name}", Root(path.parent, what="sdist cache").load_bytes(
            path.name, limit=sources.SDIST_MAX_BYTES)))
        buildargs[f"{project.upper()}_SOURCE"] = f"file /opt/build/sources/{path.name} {src.pin}"
    table = require_table(where, version)
    plan = plan_sources(where, table, patch_texts)
    refuse_unpinned(where, table, list(plan.unpinned))
    pins, cut = plan.pins, plan.cut
    lines, envs = [], ['-DFETCHCONTENT_FULLY_DISCONNECTED=ON']
    exports = []
    for pin in pins:
        cache = Root(offline.OFFLINE, what="source cache")  # a link planted there is refused
        if not cache.exists(pin.archive_name):
            raise ConfigError(f"{where}: the pinned source {pin.name} ({pin.commit[:12]}) is not in the cache",
                              hint=fetch_hint)
        files.append((f"sources/{pin.archive_name}", cache.load_bytes(pin.archive_name, limit=offline.ARCHIVE_MAX_BYTES)))
        lines.append(f"mkdir -p /opt/build/deps/{pin.name} && tar -C /opt/build/deps/{pin.name} "
                     f"-xJf /opt/build/sources/{pin.archive_name}")
        exports.append(f"{pin.env}=/opt/build/deps/{pin.name}")
    values = {
        "BASE_SETUP": LOCAL_BASE if stack.base_image and stack.base_image.brings_python else REGISTRY_BASE,
        "SOURCES_COPY": "COPY sources/ /opt/build/sources/",
        "PIP_OFFLINE": "--no-index --no-deps ",
        # unmet build requirements come from the wheelhouse, or nowhere: no index is reachable
        "REQUIREMENTS_PIP_ARGS": ("--no-index --find-links /opt/build/wheelhouse" if stack.vllm and stack.vllm.deps_wheelhouse
                                  else "--no-index"),
        "OFFLINE_SOURCES": ("# what vLLM's CMake would fetch, from pinned archives (content sha256 checked "
                            "when they entered the cache)\nRUN " + " \\\n && ".join(lines)) if lines
                           else "# every fetched source is left out by a patch",
        "OFFLINE_ENV": (f' && export CMAKE_ARGS="{" ".join(envs)}" ' + " ".join(exports) + " \\"),
    }
    labels = {label.OFFLINE: "true",
              label.VLLM_OFFLINE_SOURCES: ",".join(f"{p.name}@{p.commit[:12]} sha256:{p.sha256}" for p in pins),
              label.VLLM_LEFT_OUT: ",".join(sorted(cut))}
    if plan.stand_ins:  # another commit than the release names: every image and record says so
        labels[label.VLLM_STAND_INS] = ",".join(f"{p.name}@{p.commit[:12]} for {p.stands_in_for}"
                                                for p in plan.stand_ins)
    if wheelhouse := (stack.vllm.deps_wheelhouse if stack.vllm else None):  # vllm: require_release
        wfiles, what = _wheelhouse(matrix, stack_name, wheelhouse)
        files += wfiles
        values["DEPS_WHEELHOUSE"] = ("# dependencies (and build requirements) from the pinned wheelhouse, no index\n"
                                     "COPY wheelhouse/ /opt/build/wheelhouse/\n"
                                     "RUN python -m pip install --no-index --no-deps --no-compile /opt/build/wheelhouse/*.whl")
        labels[label.VLLM_DEPS_WHEELHOUSE] = what
    else:
        values["DEPS_WHEELHOUSE"] = "# no dependency wheelhouse: the base must hold vLLM's dependencies"
    return OfflineParts(values, tuple(files), buildargs, labels)
