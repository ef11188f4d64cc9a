"""What a source stack's build reads from the network, fetched (or checked) into the cache first.

A stack that builds vLLM from a release sdist reads the vLLM and FlashInfer sdists and every tree
vLLM's CMake would clone (harness/data/sources/vllm-<version>.toml), minus what its patches leave
out. `harness sources fetch` fills the cache for the selected stacks (and carries it to an
air-gapped host with --out/--from); `harness lock` does the same for every `offline = true`
stack, so that its build runs with no network afterwards. An archive already in the cache is
unpacked and its content sha256 checked again, an sdist its sha256.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError, EnvironmentProblem
from harness.image import offline, sources
from harness.image.offline import Pin, Table
from harness.image.offline_stack import (
    SourcePlan,
    plan_sources,
    refuse_unpinned,
    require_release,
    require_table,
)
from harness.image.render import patch_files
from harness.matrix.plan import expand, group_by_stack
from harness.safety.roots import Root


@dataclass(frozen=True)
class StackNeeds:
    """What one source stack's build reads from the network."""

    stack: str
    offline: bool
    sdists: tuple[sources.Source, ...]
    table: Table | None
    plan: SourcePlan | None  # the table read through the stack's patches (None: no table)

    @property
    def cut(self) -> frozenset[str]:
        """Sources its patches leave out."""
        return self.plan.cut if self.plan else frozenset()

    @property
    def pins(self) -> tuple[Pin, ...]:
        """Pinned sources its build reads, stand-ins included."""
        return self.plan.pins if self.plan else ()

    @property
    def unpinned(self) -> tuple[str, ...]:
        return self.plan.unpinned if self.plan else ()


@dataclass(frozen=True)
class Got:
    file: str
    path: Path
    how: str  # what was done: downloaded, fetched from git, taken from DIR, cached and checked


def needs(matrix, k: str | None = None) -> list[StackNeeds]:
    """Every selected stack that builds vLLM from source (docker, no prebuilt image or wheels)."""
    return [n for name in group_by_stack(expand(matrix, k)) if (n := stack_needs(matrix, name)) is not None]


def stack_needs(matrix, name: str) -> StackNeeds | None:
    """What one stack's build reads from the network; None for a stack that builds no vLLM."""
    stack = matrix.spec.stacks[name]
    if stack.runner != "docker" or stack.image is not None or stack.wheels is not None or stack.vllm is None:
        return None
    srcs = [sources.vllm_source(stack)] + ([sources.flashinfer_source(stack)] if stack.flashinfer else [])
    table = offline.load_table(stack.vllm.pypi) if stack.vllm.pypi else None
    texts = [p.data for p in patch_files(matrix, stack) if p.series == "vllm"]
    plan = plan_sources(f"stacks.{name}", table, texts) if table else None
    return StackNeeds(name, stack.offline, tuple(srcs), table, plan)


def source_lines(n: StackNeeds) -> list[str]:
    """What `harness build --dry-run` says of the sources vLLM's CMake fetches for one stack: each
    one still unpinned by name (an offline build refuses it; an online one clones it unchecked),
    each stand-in and what it replaces, what the patches leave out."""
    if n.table is None:
        return ["no table of what this vLLM's CMake fetches (harness/data/sources/)"]
    lines = [f"{len(n.pins) - len(n.plan.stand_ins if n.plan else ())} pinned ({n.table.path.name})"]
    urls = {u[0]: u[1] for u in n.table.unpinned}
    lines += [f"NOT pinned: {name} ({urls[name]})" + (": an offline build is refused" if n.offline else ": the build clones it, unchecked")
              for name in n.unpinned]
    lines += [f"stand-in: {p.name} @ {p.commit[:12]} for {p.stands_in_for}" for p in (n.plan.stand_ins if n.plan else ())]
    if n.cut:
        lines.append("left out by a patch: " + ", ".join(sorted(n.cut)))
    return lines


def parse_mirrors(items: list[str]) -> dict[str, str]:
    """`URL=PATH` flags: read that git URL from a local git folder (a clone, a bare mirror)."""
    repos: dict[str, str] = {}  # git URL -> a local git folder to read it from; other URLs are read as they are
    for item in items:
        url, sep, path = item.partition("=")
        if not sep or not Path(path).is_dir():
            raise ConfigError(f"--mirror {item!r}: expected URL=PATH with PATH a local git folder",
                              hint="e.g. --mirror https://github.com/NVIDIA/cutlass.git=/src/cutlass")
        repos[url] = path
    return repos


def air_gap_hint(matrix_path: Path | str) -> str:
    return (f"with no network here: on a host with network `harness sources fetch -m {matrix_path} --out DIR`, "
            f"then here `harness sources fetch -m {matrix_path} --from DIR` (or --mirror URL=PATH from a local clone)")


def check_offline(matrix, wanted: list[StackNeeds]) -> None:
    """What an offline build would refuse, refused before anything is fetched (the same checks as
    the build's, harness.image.offline_stack)."""
    for n in wanted:
        where = f"stacks.{n.stack}"
        table = require_table(where, require_release(where, matrix.spec.stacks[n.stack]))
        refuse_unpinned(where, table, list(n.unpinned))


def fetch_all(wanted: list[StackNeeds], *, matrix_path: Path | str, repos: Mapping[str, str] | None = None,
              from_dir: Path | None = None, say: Callable[[str], None] = lambda _s: None) -> list[Got]:
    """Each sdist (sha256 checked) and each pinned source (content sha256 checked) the stacks
    need, once; a failure names the stack, the source and the fix."""
    got: dict[str, Got] = {}
    for n in wanted:
        for s in n.sdists:
            if s.kind != "pypi":
                continue
            want = sources.sdist_filename(s.name, s.pin)
            if want in got:
                continue
            cached = any(Root(d, what="sdist cache").exists(want) for d in (sources.SDIST_CACHE, sources.CACHE))
            # without a pin (no sdist_sha256, no lock) only a download is checked, against the index
            checked = "sha256 checked" if s.sha256 else "sha256 not pinned: `harness lock` pins it"
            how = f"cached, {checked}"
            if not cached and from_dir is not None and Root(from_dir, what="--from").exists(want):
                # a root: an sdist there that is a link (to another file) is refused, not followed
                data = Root(from_dir, what="--from").load_bytes(want, limit=sources.SDIST_MAX_BYTES)
                Root(sources.SDIST_CACHE, what="sdist cache", create=True).save_bytes(want, data)
                how = f"taken from {from_dir}, {checked}"
            elif not cached:
                say(f"downloading {want} from PyPI")
                how = ("downloaded from PyPI, sha256 checked" if s.sha256 else
                       "downloaded from PyPI, sha256 checked against the index only (not pinned: `harness lock`)")
            try:
                path = sources.sdist(s, sources.CACHE)
            except EnvironmentProblem as exc:
                raise EnvironmentProblem(f"stacks.{n.stack}.{s.project}: {want}: {exc.message}",
                                         hint=air_gap_hint(matrix_path)) from None
            got[want] = Got(want, path, how)
        for pin in n.pins:
            if pin.archive_name in got:
                continue
            archive = offline.OFFLINE / pin.archive_name
            if archive.is_file():
                how = "cached, content sha256 checked"
            elif from_dir is not None:
                how = f"taken from {from_dir}, content sha256 checked"
            else:
                where = (repos or {}).get(pin.url, pin.url)
                say(f"fetching {pin.name} @ {pin.commit[:12]} from {where}")
                how = f"fetched from {where} and trimmed, content sha256 checked"
            try:
                path = offline.fetch(pin, repos=repos, from_dir=from_dir, cache=offline.OFFLINE, check_cached=True)
            except EnvironmentProblem as exc:
                if archive.is_file():  # the cached archive itself is unreadable: its own fix
                    raise
                raise EnvironmentProblem(f"stacks.{n.stack}: cannot get the pinned source {pin.name} "
                                         f"({pin.url} @ {pin.commit[:12]}): {exc.message}",
                                         hint=air_gap_hint(matrix_path)) from None
            got[pin.archive_name] = Got(pin.archive_name, path, how)
    return list(got.values())
