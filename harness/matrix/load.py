"""Load a matrix file: TOML -> pydantic -> cross-checks, with every problem named at once.

A problem reads `<key path>: <what is wrong>` and then a `fix:` line, e.g.
`stacks.spark-121a.vllm.patches[2]: patch file not found: ...` / `fix: add it under patches/`;
pydantic's own messages get their fix from the field's description. All problems of a file are
collected and raised together as one MatrixError (exit code 2). The paths a matrix names are
kept inside its repository here (harness.matrix.paths), before anything reads them.
"""

from __future__ import annotations

import collections
import fnmatch
import json
import re
import tomllib
import types
import typing
from pathlib import Path

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from harness.errors import MatrixError
from harness.matrix.model import MatrixFile, PatchRef, is_local_checkpoint
from harness.matrix.mounts import matrix_problems
from harness.matrix.pairs import partner_models
from harness.matrix.paths import is_inside, mount_problem, repo_root, secret_part, system_folder
from harness.matrix.problem import problem
from harness.matrix.select import SelectionError, compile_expression

MAX_FILE_BYTES = 4 << 20
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_.=,+*-]+$")


def key_path(loc: tuple) -> str:
    """('stacks', 'a', 'vllm', 'patches', 2) -> 'stacks.a.vllm.patches[2]'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = str(part) if _PLAIN_KEY.fullmatch(str(part)) else json.dumps(str(part))
            out += f".{text}" if out else text
    return out or "(top level)"


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class that owns the last key of `loc`, to list its valid keys."""
    current: object = MatrixFile
    for part in loc[:-1]:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        elif typing.get_origin(current) is tuple:
            current = typing.get_args(current)[0]
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(tp: object) -> object:
    """Optional[X] / Annotated[X, ...] -> X."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _field_at(loc: tuple) -> FieldInfo | None:
    """The pydantic field that `loc` (or, for a list item or dict entry, its container) names."""
    keys = list(loc)
    while keys:
        owner = _model_at(tuple(keys))
        field = owner.model_fields.get(str(keys[-1])) if owner else None
        if field is not None:
            return field
        keys.pop()
    return None


def _fix_for(error: ErrorDetails, loc: tuple) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "remove the key, or correct its spelling to one of the valid keys"
    if loc and loc[-1] == "[key]":
        return "a name is lowercase letters, digits and . _ = , + - (at most 64), e.g. spark-121a"
    field = _field_at(loc)
    described = field.description if field is not None and field.description else None
    if kind == "missing":
        return f"add it: {described}" if described else "add the key (README 'Matrix format')"
    if kind in ("tuple_type", "list_type"):
        return f"write a list, e.g. [1, 8]{': ' + described if described else ''}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"write a table {{ key = value, ... }}{': ' + described if described else ''}"
    if described:
        return described
    return "change the value as the message says (README 'Matrix format' describes every key)"


def _describe(error: ErrorDetails) -> str:
    loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    where = key_path(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        owner = _model_at(loc)
        valid = ", ".join(owner.model_fields) if owner else "see README 'Matrix format'"
        what = f"unknown key (valid keys here: {valid})"
    elif kind == "missing":
        what = "required key is missing"
    else:
        what = error["msg"].removeprefix("Value error, ")
    return problem(where, what, _fix_for(error, loc))


def load_matrix(path: str | Path) -> Matrix:
    path = Path(path)
    fix_path = "check the -m path"
    try:
        if not path.is_file():
            kind = "a folder" if path.is_dir() else "missing" if not path.exists() else "not a regular file"
            raise MatrixError(str(path), [problem("(file)", f"cannot read the matrix file: {kind}", fix_path)])
        if path.stat().st_size > MAX_FILE_BYTES:
            raise MatrixError(str(path), [problem("(file)", f"the file is larger than {MAX_FILE_BYTES} bytes",
                                                  "a matrix is a few kilobytes: check the -m path")])
        raw = path.read_bytes()
    except OSError as exc:
        raise MatrixError(str(path), [problem("(file)", f"cannot read the file: {exc.strerror}", fix_path)]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a 5000-digit int
        raise MatrixError(str(path), [problem("(file)", f"not valid TOML: {exc}",
                                              "correct the TOML syntax at the line named")]) from None
    except RecursionError:
        raise MatrixError(str(path), [problem("(file)", "not valid TOML: arrays or tables nested too deep to read",
                                              "a matrix nests a few levels: remove the runaway nesting")]) from None
    try:
        spec = MatrixFile.model_validate(data)
    except ValidationError as exc:
        raise MatrixError(str(path), [_describe(e) for e in exc.errors()]) from None
    except RecursionError:
        raise MatrixError(str(path), [problem("(file)", "values nested too deep to check",
                                              "a matrix nests a few levels: remove the runaway nesting")]) from None
    try:
        problems = _cross_check(spec, path)
    except (OSError, RuntimeError) as exc:  # a symlink loop in a path the file names, ...
        raise MatrixError(str(path), [problem("(file)", f"a path it names cannot be resolved: {exc}",
                                              "point every path at a real file or folder")]) from None
    if problems:
        raise MatrixError(str(path), problems)
    return Matrix(path=path.resolve(), spec=spec, source_bytes=raw)


class Matrix(typing.NamedTuple):
    """A validated matrix file and where it lives (patch paths resolve against it)."""

    path: Path
    spec: MatrixFile
    source_bytes: bytes

    @property
    def patches_root(self) -> Path:
        return (self.path.parent / self.spec.matrix.patches_dir).resolve()

    @property
    def repo_root(self) -> Path:
        return repo_root(self.path)

    def patch_path(self, rel: str | PatchRef) -> Path:
        """The resolved patch file; load_matrix has already kept it inside the repository (or
        the matrix allowed it out)."""
        return (self.patches_root / str(rel)).resolve()


def _patch_series(name: str, stack) -> list[tuple[str, str, bool]]:
    """(key path, path as written, allow_outside) of both patch series of a stack."""
    series: list[tuple[str, str, bool]] = []
    if stack.vllm:
        series += [(f"stacks.{name}.vllm.patches[{i}]", p.path, p.allow_outside)
                   for i, p in enumerate(stack.vllm.patches)]
    if stack.flashinfer:
        series += [(f"stacks.{name}.flashinfer.prs[{i}].patch", pr.patch, pr.allow_outside)
                   for i, pr in enumerate(stack.flashinfer.prs)]
    if stack.wheels:
        series += [(f"stacks.{name}.wheels.patches[{i}]", p, False) for i, p in enumerate(stack.wheels.patches)]
    return series


def _patch_problem(where: str, rel: str, allow_outside: bool, patches_root: Path, root: Path) -> str | None:
    raw = Path(rel)
    if not allow_outside and (raw.is_absolute() or ".." in raw.parts):
        return problem(where, f"'{rel}' must be a relative path inside {patches_root}",
                       "name the file relative to patches_dir, or write { path = \"...\", allow_outside = true } "
                       "for a file you trust outside the repository")
    try:
        target = (patches_root / raw).resolve()
    except (OSError, RuntimeError) as exc:
        return problem(where, f"cannot resolve '{rel}': {exc}", "fix the path")
    if not allow_outside and not is_inside(target, root):
        return problem(where, f"'{rel}' resolves to {target}, outside the matrix's repository {root}",
                       "keep patches inside the repository (patches_dir and symlinks included), or write "
                       "{ path = \"...\", allow_outside = true } for a file you trust")
    if (sysdir := system_folder(target)) is not None:
        return problem(where, f"'{rel}' resolves to {target}, under the system folder {sysdir}",
                       "a patch is never read from a system folder: copy it under patches/")
    if (part := secret_part(target)) is not None:
        return problem(where, f"'{rel}' resolves to {target}, in '{part}' (credentials)",
                       "a patch is never read from a folder of credentials: copy it under patches/")
    if not target.is_file():
        return problem(where, f"patch file not found: {target}",
                       "add it under patches/, or fix the path; `harness patches add-pr` fetches a PR")
    return None


def _checkpoint_problems(spec: MatrixFile, matrix_dir: Path, root: Path) -> list[str]:
    problems = []
    for name, model in spec.models.items():
        if not is_local_checkpoint(model.checkpoint):
            continue
        where = f"models.{name}.checkpoint"
        named = matrix_dir / model.checkpoint
        try:
            folder = named.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            problems.append(problem(where, f"cannot resolve '{model.checkpoint}': {exc}", "point it at a real folder"))
            continue
        if not model.allow_outside and not is_inside(folder, root):
            problems.append(problem(where, f"'{model.checkpoint}' resolves to {folder}, outside the matrix's "
                                    f"repository {root}",
                                    f"set models.{name}.allow_outside = true if this folder is meant, "
                                    "or move the checkpoint into the repository"))
        elif (why := mount_problem(named)) is not None:
            problems.append(problem(where, why, "name the model's own folder (the one with config.json)"))
    if (cache := spec.serve.model_cache) is not None and (why := mount_problem(Path(cache))) is not None:
        problems.append(problem("serve.model_cache", why,
                                "name the cache folder itself, e.g. /home/me/.cache/huggingface"))
    return problems


def _cross_check(spec: MatrixFile, path: Path) -> list[str]:
    problems: list[str] = []
    patches_root = (path.parent / spec.matrix.patches_dir).resolve()
    root = repo_root(path)
    if spec.matrix.hardware not in spec.hardware:
        problems.append(problem("matrix.hardware", f"'{spec.matrix.hardware}' is not a hardware profile",
                                f"use one of: {', '.join(spec.hardware)}"))
    for name, stack in spec.stacks.items():
        if stack.flashinfer:
            numbers = [pr.number for pr in stack.flashinfer.prs]
            for dup in sorted({n for n in numbers if numbers.count(n) > 1}):
                problems.append(problem(f"stacks.{name}.flashinfer.prs", f"PR #{dup} is listed twice", "keep one"))
        seen: set[str] = set()
        for where, rel, allow_outside in _patch_series(name, stack):
            if rel in seen:
                problems.append(problem(where, f"'{rel}' appears twice in the series",
                                        "a patch applies once: remove the second entry"))
            seen.add(rel)
            if (bad := _patch_problem(where, rel, allow_outside, patches_root, root)) is not None:
                problems.append(bad)
    problems += _checkpoint_problems(spec, path.resolve().parent, root)
    served = [m.served_name or k for k, m in spec.models.items()]
    counts = collections.Counter(served)  # (not list.count: a 4 MiB file can name 40,000 models)
    for twice in sorted(served_as for served_as, uses in counts.items() if uses > 1):
        problems.append(problem("models", f"served name '{twice}' is used by two models",
                                "served names must differ: set served_name on one of them"))
    for key, names in (("stacks", spec.stacks), ("models", spec.models), ("configs", spec.configs)):
        patterns = getattr(spec.cells, key)
        for i, pat in enumerate(patterns):
            if not fnmatch.filter(names, pat):
                problems.append(problem(f"cells.{key}[{i}]", f"'{pat}' names no {key[:-1]} (defined: {', '.join(names)})",
                                        f"use a name or glob of a defined {key[:-1]}"))
            if patterns.count(pat) > 1 and patterns.index(pat) == i:
                problems.append(problem(f"cells.{key}[{i}]", f"'{pat}' is listed twice", "keep one"))
    for lname in ("exclude", "only"):
        for i, flt in enumerate(getattr(spec.cells, lname)):
            for key, names in (("stack", spec.stacks), ("model", spec.models), ("config", spec.configs)):
                pat = getattr(flt, key)
                if not fnmatch.filter(names, pat):
                    problems.append(problem(f"cells.{lname}[{i}].{key}",
                                            f"'{pat}' names no {key} (defined: {', '.join(names)})",
                                            f"use a name or glob of a defined {key}"))

    problems += matrix_problems(spec, path.resolve().parent)
    problems += partner_models(spec.models)[1]
    if spec.hosts:
        problems += host_problems(spec)
    for i, rule in enumerate(spec.expect.select):
        try:
            compile_expression(rule.cells)
        except SelectionError as exc:
            problems.append(problem(f"expect.select[{i}].cells", str(exc),
                                    "use words joined by and/or/not, e.g. 'nvfp4 and not marlin'"))
    return problems


def host_problems(spec: MatrixFile) -> list[str]:
    """Cross-checks of [hosts] that need the rest of the file."""
    problems = []
    if spec.hosts and "host" in spec.model_fields_set:
        problems.append(problem("host", "[host] and [hosts] are both given: one unnamed [host] is the "
                                "same as a one-entry [hosts]", "keep one of them"))
    for name, h in spec.hosts.items():
        if h.gpu_attach != "runtime":
            # the serve stage takes its attach mode, devices and driver folders from [host] today
            problems.append(problem(f"hosts.{name}.gpu_attach", f"'{h.gpu_attach}' per [hosts] entry is not "
                                    "supported yet (only 'runtime')", "for one host, use [host] with "
                                    "gpu_attach, devices and driver_dirs"))
        if h.hardware is not None and h.hardware not in spec.hardware:
            problems.append(problem(f"hosts.{name}.hardware", f"'{h.hardware}' is not a hardware profile "
                                    f"(defined: {', '.join(spec.hardware)})", "name a [hardware.NAME] table"))
        for i, pat in enumerate(h.stacks):
            if not fnmatch.filter(spec.stacks, pat):
                problems.append(problem(f"hosts.{name}.stacks[{i}]", f"'{pat}' names no stack "
                                        f"(defined: {', '.join(spec.stacks)})", "use a name or glob of a defined stack"))
    return problems
