"""Build requirements read from the pinned sources themselves, never from a hand-kept list.

A release says what it needs to build in its own files: `[build-system] requires` in
pyproject.toml and, for vLLM, `requirements/build/cuda.txt` (releases before the build/ folder
kept `requirements/build.txt`). These are read from the pinned sdist (or git tree), their
markers evaluated for the stack's Python and the build's CPU platform, the same package named
twice merged into one requirement, and the result checked against what the template can meet
before any image step runs:

- torch: the stack installs it from its own index (or the base brings it); its version must
  satisfy every torch requirement (vLLM pins one exact torch per release);
- requires-python: the stack's Python must satisfy it;
- a requirement by URL or path, or one that cannot be parsed, is refused (the template
  installs by name from an index or a wheelhouse).

The rest is written into the build context as `build-requirements.txt` (one requirement a line,
each with the file it came from); docker/build_requirements.py installs what the image lacks
and checks the result, so a build stops at the base stage, naming the requirement, instead of
at the vLLM build after an hour of FlashInfer compile.
"""

from __future__ import annotations

import posixpath
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.errors import ConfigError
from harness.image import sources
from harness.matrix.model import Stack
from harness.platforms import Platform
from harness.safety.paths import read_bytes

# Where each project keeps its build requirements, in the order they are read (CUDA builds).
FILES = {
    "vllm": ("pyproject.toml", "requirements/build/cuda.txt", "requirements/build.txt"),
    "flashinfer-python": ("pyproject.toml",),
}
REQUIREMENTS_FILE = "build-requirements.txt"  # its name in the build context
MAX_FILE = 1 << 20
MAX_INCLUDES = 8  # `-r other.txt` depth
# pip requirement-file options that change where packages come from: a build must not follow them
OPTION = re.compile(r"^\s*-{1,2}[A-Za-z]")
FILENAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class BuildRequirement:
    project: str  # "vllm" or "flashinfer-python": whose build needs it
    requirement: str  # canonical text, markers evaluated away: "setuptools<81.0.0,>=77.0.3"
    name: str  # canonical package name
    origin: str  # "vllm-0.33.0/pyproject.toml"


@dataclass(frozen=True)
class StackRequirements:
    stack: str
    platform: str
    python: str
    items: tuple[BuildRequirement, ...]  # torch left out: it is installed on its own
    torch: tuple[BuildRequirement, ...]  # the torch requirements, each checked against the stack's pin

    def file_text(self) -> str:
        """build-requirements.txt for the image: merged per package, each line with its origins."""
        # no stack name: stacks with the same sources share the image layer this file starts
        lines = [f"# build requirements for {self.platform}, Python {self.python}, read from the pinned",
                 "# sources by harness/image/requirements.py (torch is installed apart)"]
        for name, spec, origins in merged(self.items):
            lines.append(f"{name}{spec}  # {', '.join(origins)}")
        return "\n".join(lines) + "\n"


def _environment(python: str, platform: Platform) -> dict[str, str]:
    major_minor = ".".join(python.split(".")[:2])
    full = python if python.count(".") >= 2 else f"{major_minor}.0"
    return {**platform.markers(), "python_version": major_minor, "python_full_version": full,
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "extra": ""}


def _parse(text: str, origin: str, where: str) -> Requirement:
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise ConfigError(f"{where}: {origin} lists a build requirement that cannot be parsed: {text[:120]!r} ({exc})",
                          hint="the source is not a release this tool reads: pin another, or patch the file") from None
    if req.url:
        raise ConfigError(f"{where}: {origin} needs {req.name} from {req.url[:120]}, not from an index",
                          hint="the template installs build requirements by name: patch the file, or pin another release")
    return req


def _lines(tree: Path, rel: str, where: str, label: str, seen: int = 0) -> list[tuple[str, str]]:
    """(requirement text, origin) of a requirements file, following `-r` inside the tree."""
    if seen > MAX_INCLUDES:
        raise ConfigError(f"{where}: {rel}: `-r` includes nest deeper than {MAX_INCLUDES}", hint="check the source tree")
    data = read_bytes(tree / rel, limit=MAX_FILE, what="requirements file").decode("utf-8", "replace")
    out: list[tuple[str, str]] = []
    for raw in data.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            inc = line.split(None, 1)[1].strip()
            target = posixpath.normpath(posixpath.join(posixpath.dirname(rel), inc))
            if target.startswith("..") or not all(FILENAME.match(p) for p in target.split("/")):
                raise ConfigError(f"{where}: {rel} includes {inc[:80]!r}, outside the source tree",
                                  hint="check the source tree")
            out += _lines(tree, target, where, label, seen + 1)
            continue
        if OPTION.match(line):
            continue  # index options (--extra-index-url ...) are the stack's to decide, not the file's
        out.append((line, f"{label}/{rel}"))
    return out


class _Table(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)


class BuildSystem(_Table):
    """pyproject.toml `[build-system]`: `requires` checked where it is read."""

    requires: object = None


class ProjectTable(_Table):
    """pyproject.toml `[project]`: only `requires-python` is read."""

    requires_python: object = Field(None, alias="requires-python")


class PyProject(_Table):
    """A source tree's pyproject.toml, the tables this module reads; unknown keys are kept. A
    table of another type reads as empty."""

    build_system: BuildSystem = Field(BuildSystem(), alias="build-system")
    project: ProjectTable = ProjectTable()

    @field_validator("build_system", "project", mode="before")
    @classmethod
    def _table(cls, value: object) -> object:
        return value if isinstance(value, dict) else {}


def read_tree(tree: Path, project: str, where: str, label: str | None = None) -> tuple[list[tuple[str, str]], str | None]:
    """(requirement text, origin) pairs and requires-python of one source tree; `label` names
    the tree in each origin ("vllm-0.33.0"), the folder's name by default."""
    label = label or tree.name
    pairs: list[tuple[str, str]] = []
    requires_python = None
    files = FILES[project]
    pyproject = tree / files[0]
    if pyproject.is_file():
        data = PyProject.model_validate(
            tomllib.loads(read_bytes(pyproject, limit=MAX_FILE, what="pyproject.toml").decode("utf-8", "replace")))
        reqs = data.build_system.requires or []
        if not isinstance(reqs, list) or not all(isinstance(r, str) for r in reqs):
            raise ConfigError(f"{where}: {label}/pyproject.toml: [build-system] requires is not a list of strings",
                              hint="the source is not a release this tool reads")
        pairs += [(r, f"{label}/pyproject.toml") for r in reqs]
        rp = data.project.requires_python
        requires_python = rp if isinstance(rp, str) else None
    for rel in files[1:]:
        if (tree / rel).is_file():
            pairs += _lines(tree, rel, where, label)
            break  # the newer layout wins; the older file is the fallback only
    return pairs, requires_python


def merged(items: tuple[BuildRequirement, ...] | list[BuildRequirement]) -> list[tuple[str, str, list[str]]]:
    """(name, combined specifier, origins) per package, in first-seen order."""
    order: list[str] = []
    specs: dict[str, SpecifierSet] = {}
    origins: dict[str, list[str]] = {}
    extras: dict[str, set[str]] = {}
    for it in items:
        req = Requirement(it.requirement)
        if it.name not in specs:
            order.append(it.name)
            specs[it.name], origins[it.name], extras[it.name] = SpecifierSet(), [], set()
        specs[it.name] &= req.specifier
        extras[it.name] |= set(req.extras)
        if it.origin not in origins[it.name]:
            origins[it.name].append(it.origin)
    return [(n + (f"[{','.join(sorted(extras[n]))}]" if extras[n] else ""), str(specs[n]), origins[n]) for n in order]


def for_stack(stack_name: str, stack: Stack, platform: Platform) -> StackRequirements:
    """The stack's build requirements from its pinned vLLM and FlashInfer sources, checked
    against what the template can meet. A mismatch is a ConfigError naming the requirement."""
    where = f"stacks.{stack_name}"
    items: list[BuildRequirement] = []
    torch: list[BuildRequirement] = []
    env = _environment(stack.python, platform)
    projects = [("vllm", sources.vllm_source(stack) if stack.vllm else None),
                ("flashinfer-python", sources.flashinfer_source(stack) if stack.flashinfer else None)]
    for project, src in projects:
        if src is None:
            continue
        tree = sources.tree(src)
        label = f"{project}-{src.pin}" if src.kind == "pypi" else f"{project}@{src.pin[:12]}"
        pairs, requires_python = read_tree(tree, project, f"{where}.{'vllm' if project == 'vllm' else 'flashinfer'}",
                                           label)
        if requires_python:
            _check_python(where, stack, label, requires_python)
        for text, origin in pairs:
            req = _parse(text, origin, where)
            try:
                if req.marker is not None and not req.marker.evaluate(env):
                    continue
            except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName) as exc:
                raise ConfigError(f"{where}: {origin}: the marker of {text[:120]!r} cannot be evaluated ({exc})",
                                  hint="patch the file, or pin another release") from None
            req.marker = None
            name = canonicalize_name(req.name)
            item = BuildRequirement(project, str(req), name, origin)
            (torch if name == "torch" else items).append(item)
    _check_torch(where, stack, torch)
    return StackRequirements(stack_name, platform.docker, stack.python, tuple(items), tuple(torch))


def _check_python(where: str, stack: Stack, tree: str, requires_python: str) -> None:
    try:
        ok = SpecifierSet(requires_python).contains(Version(stack.python + (".0" if stack.python.count(".") == 1 else "")))
    except (InvalidSpecifier, InvalidVersion):
        return  # the stack's python is validated at load; an odd requires-python is pip's to judge
    if not ok:
        raise ConfigError(f"{where}.python: {tree} requires Python {requires_python}; the stack builds with "
                          f"Python {stack.python}", hint="set `python` in the stack to a version the release supports")


def _check_torch(where: str, stack: Stack, torch: list[BuildRequirement]) -> None:
    if stack.torch is None:
        return
    have = Version(stack.torch.version)
    for t in torch:
        spec = Requirement(t.requirement).specifier
        if not spec.contains(have, prereleases=True):
            raise ConfigError(f"{where}.torch.version: {t.origin} requires {t.requirement}; the stack installs "
                              f"torch {stack.torch.version}",
                              hint=f"set [stacks.<name>.torch] version to one that satisfies `{spec}` "
                                   "(each vLLM release builds against one torch)")
