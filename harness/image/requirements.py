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
- a requirement by URL or path, a VCS or editable requirement (`-e git+https://...`,
  `pkg @ git+...`), or one that cannot be parsed, is refused with its file and line (the
  template installs by name from an index or a wheelhouse).

The tree is read as a root (harness.safety.roots): a link in place of pyproject.toml, a
requirements file, an include's target or any folder on the way (`requirements/build/`) is
refused, never followed. Requirements files are read as pip reads them (pip 26.3,
pip/_internal/req/req_file.py): lines joined at a final backslash, `#` comments dropped, the
options after the requirement split with shlex and read by optparse, so `-r../x`, `-r<TAB>../x`,
`--requirement=../x` and `--requ ../x` (an unambiguous abbreviation) are the includes they are
to pip; an include or a constraint file (`-c`) is followed inside the tree only; a constraint
narrows a requirement of the same name and adds none. Every file is bounded (MAX_FILE bytes,
MAX_LINES lines) and so is the whole (MAX_REQUIREMENTS), before anything is shown or written.

The rest is written into the build context as `build-requirements.txt` (one requirement a line,
each with the file it came from); docker/build_requirements.py installs what the image lacks
and checks the result, so a build stops at the base stage, naming the requirement, instead of
at the vLLM build after an hour of FlashInfer compile.
"""

from __future__ import annotations

import optparse
import posixpath
import re
import shlex
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
from harness.safety.readers import loads_toml
from harness.safety.roots import Root

# Where each project keeps its build requirements, in the order they are read (CUDA builds).
FILES = {
    "vllm": ("pyproject.toml", "requirements/build/cuda.txt", "requirements/build.txt"),
    "flashinfer-python": ("pyproject.toml",),
}
REQUIREMENTS_FILE = "build-requirements.txt"  # its name in the build context
MAX_FILE = 256 << 10  # vLLM's build files are under 1 KiB
MAX_LINES = 2000  # per file
MAX_REQUIREMENTS = 500  # in all, per tree
MAX_INCLUDES = 8  # `-r other.txt` depth
FILENAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# pip's requirements-file comments and `${VAR}` (pip 26.3 req_file.py COMMENT_RE, ENV_VAR_RE)
_COMMENT = re.compile(r"(^|\s+)#.*$")
_ENV_VAR = re.compile(r"\$\{[A-Z0-9_]+\}")


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


class _OptionError(Exception):
    pass


class _LineOptions(optparse.OptionParser):
    """The options pip reads in a requirements file (pip 26.3, req_file.py SUPPORTED_OPTIONS and
    SUPPORTED_OPTIONS_REQ, their option strings and actions as pip's cmdoptions declares them):
    optparse itself, so a glued short option and an abbreviated long one read as they do to pip."""

    def __init__(self) -> None:
        super().__init__(add_help_option=False)
        for strings, action in (
                (("-i", "--index-url", "--pypi-url"), "store"), (("--extra-index-url",), "append"),
                (("--no-index",), "store_true"), (("-c", "--constraint"), "append"),
                (("-r", "--requirement"), "append"), (("-e", "--editable"), "append"),
                (("-f", "--find-links"), "append"), (("--no-binary",), "append"), (("--only-binary",), "append"),
                (("--prefer-binary",), "store_true"), (("--require-hashes",), "store_true"),
                (("--no-require-hashes",), "store_true"), (("--pre",), "store_true"),
                (("--all-releases",), "append"), (("--only-final",), "append"),
                (("--trusted-host",), "append"), (("--use-feature",), "append"), (("--hash",), "append"),
                (("-C", "--config-settings"), "append")):
            self.add_option(*strings, action=action, dest=strings[-1].lstrip("-").replace("-", "_"))

    def error(self, msg: str):
        raise _OptionError(msg)

    def exit(self, status: int = 0, msg: str | None = None):
        raise _OptionError(msg or "cannot be read")


@dataclass(frozen=True)
class _Line:
    text: str  # the requirement, as pip reads it (its options left out)
    origin: str  # "vllm-0.33.0/requirements/build/cuda.txt"
    number: int  # its line in that file
    constraint: bool  # from a `-c` file: narrows a requirement, adds none


def _join(data: str) -> list[tuple[int, str]]:
    """pip's preprocess: lines joined at a final backslash, comments dropped, blanks skipped."""
    out: list[tuple[int, str]] = []
    first, parts = 0, []
    for number, line in enumerate(data.splitlines(), start=1):
        if line.endswith("\\") and not _COMMENT.match(line):
            first = first or number
            parts.append(line.strip("\\"))
            continue
        if _COMMENT.match(line):
            line = " " + line
        if parts:
            line, number, first, parts = "".join(parts) + line, first, 0, []
        out.append((number, line))
    if parts:
        out.append((first, "".join(parts)))
    return [(n, stripped) for n, line in out if (stripped := _COMMENT.sub("", line).strip())]


def _split(line: str) -> tuple[str, list[str]]:
    """pip's break_args_options: the requirement (the words before the first that starts with
    '-') and the rest, split as shell words."""
    tokens = line.split(" ")
    cut = next((i for i, t in enumerate(tokens) if t.startswith("-")), len(tokens))
    try:
        options = shlex.split(" ".join(tokens[cut:]))
    except ValueError as exc:
        raise _OptionError(f"cannot split its options ({exc})") from None
    return " ".join(tokens[:cut]), options


def _lines(root: Root, rel: str, where: str, label: str, seen: int = 0, constraint: bool = False,
           budget: list[int] | None = None) -> list[_Line]:
    """The requirements of one requirements file under `root`, includes followed inside it."""
    budget = budget if budget is not None else [MAX_REQUIREMENTS]
    origin = f"{label}/{rel}"
    fix = "the source is not a release this tool reads: pin another, or patch the file"
    if seen > MAX_INCLUDES:
        raise ConfigError(f"{where}: {origin}: `-r` includes nest deeper than {MAX_INCLUDES}", hint=fix)
    data = root.load_bytes(rel, limit=MAX_FILE).decode("utf-8", "replace")
    if data.count("\n") >= MAX_LINES or len(data.splitlines()) > MAX_LINES:
        raise ConfigError(f"{where}: {origin}: more than {MAX_LINES} lines (a build requirements file holds a "
                          "few dozen)", hint=fix)
    out: list[_Line] = []
    for number, line in _join(data):
        at = f"{where}: {origin} line {number}"
        if _ENV_VAR.search(line):
            raise ConfigError(f"{at}: {line[:120]!r} names an environment variable, which pip would fill from the "
                              "build's environment", hint=fix)
        try:
            requirement, words = _split(line)
            opts, _rest = _LineOptions().parse_args(words)
        except _OptionError as exc:
            raise ConfigError(f"{at}: pip cannot read {line[:120]!r} ({exc})", hint=fix) from None
        if opts.editable:
            raise ConfigError(f"{at}: an editable requirement ({line[:120]!r}) installs a checkout, not a "
                              "package from an index", hint=fix)
        if requirement:
            _check(requirement, at, fix)
            budget[0] -= 1
            if budget[0] < 0:
                raise ConfigError(f"{at}: more than {MAX_REQUIREMENTS} build requirements in {label}", hint=fix)
            out.append(_Line(requirement, origin, number, constraint))
        elif opts.requirement or opts.constraint:  # pip follows the first include of a line only
            inc = (opts.requirement or opts.constraint)[0]
            target = posixpath.normpath(posixpath.join(posixpath.dirname(rel), inc))
            if posixpath.isabs(inc) or target.startswith("..") or "://" in inc or \
                    not all(FILENAME.match(p) for p in target.split("/")):
                raise ConfigError(f"{at}: includes {inc[:80]!r}, outside the source tree", hint=fix)
            out += _lines(root, target, where, label, seen + 1, constraint or not opts.requirement, budget)
        # any other option (an index, --pre, --hash) is the stack's to decide, not the file's
    return out


def _check(text: str, at: str, fix: str) -> None:
    """A requirement the template can install by name: parsed, from no URL (VCS, archive, path)."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        if "://" in text or text.startswith((".", "/", "~")):
            raise ConfigError(f"{at}: {text[:120]!r} is a URL or a path, not a package from an index",
                              hint=fix) from None
        raise ConfigError(f"{at}: a build requirement that cannot be parsed: {text[:120]!r} ({exc})",
                          hint=fix) from None
    if req.url:
        raise ConfigError(f"{at}: needs {req.name} from {req.url[:120]}, not from an index", hint=fix)


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


def _tree_lines(tree: Path, project: str, where: str, label: str) -> tuple[list[_Line], str | None]:
    root = Root(tree, what=f"{where}: source tree")
    lines: list[_Line] = []
    requires_python = None
    files = FILES[project]
    fix = "the source is not a release this tool reads: pin another, or patch the file"
    if root.exists(files[0]):
        doc = loads_toml(root.load_bytes(files[0], limit=MAX_FILE), name=f"{where}: {label}/{files[0]}", hint=fix)
        data = PyProject.model_validate(doc)
        reqs = data.build_system.requires or []
        if not isinstance(reqs, list) or not all(isinstance(r, str) for r in reqs):
            raise ConfigError(f"{where}: {label}/pyproject.toml: [build-system] requires is not a list of strings",
                              hint="the source is not a release this tool reads")
        if len(reqs) > MAX_REQUIREMENTS:
            raise ConfigError(f"{where}: {label}/pyproject.toml: more than {MAX_REQUIREMENTS} build requirements",
                              hint=fix)
        for i, r in enumerate(reqs):
            _check(r, f"{where}: {label}/pyproject.toml [build-system] requires[{i}]", fix)
        lines += [_Line(r, f"{label}/pyproject.toml", 0, False) for r in reqs]
        rp = data.project.requires_python
        requires_python = rp if isinstance(rp, str) else None
    for rel in files[1:]:
        if root.exists(rel):
            lines += _lines(root, rel, where, label)
            break  # the newer layout wins; the older file is the fallback only
    return lines, requires_python


def read_tree(tree: Path, project: str, where: str, label: str | None = None) -> tuple[list[tuple[str, str]], str | None]:
    """(requirement text, origin) pairs and requires-python of one source tree; `label` names
    the tree in each origin ("vllm-0.33.0"), the folder's name by default. A constraint (`-c`)
    is kept only where a requirement of its name is (pip's rule: it narrows, it adds nothing)."""
    lines, requires_python = _tree_lines(tree, project, where, label or tree.name)
    return [(ln.text, ln.origin) for ln in _constrained(lines)], requires_python


def _constrained(lines: list[_Line]) -> list[_Line]:
    names = set()
    for ln in lines:
        if not ln.constraint:
            with_name = Requirement(ln.text)
            names.add(canonicalize_name(with_name.name))
    return [ln for ln in lines if not ln.constraint or canonicalize_name(Requirement(ln.text).name) in names]


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
