"""Load a matrix file: TOML -> pydantic -> cross-checks, with every problem named at once.

A problem reads `<key path>: <what is wrong> (<what would be valid>)`, e.g.
`stacks.spark-121a.vllm.patches[2]: patch file not found: ...`. All problems of a file are
collected and raised together as one MatrixError (exit code 2).
"""

from __future__ import annotations

import fnmatch
import tomllib
import types
import typing
from pathlib import Path

from pydantic import BaseModel, ValidationError

from harness.errors import MatrixError
from harness.matrix.model import MatrixFile
from harness.matrix.select import SelectionError, compile_expression


def key_path(loc: tuple) -> str:
    """('stacks', 'a', 'vllm', 'patches', 2) -> 'stacks.a.vllm.patches[2]'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
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


def _describe(error: dict) -> str:
    loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    where = key_path(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        owner = _model_at(loc)
        valid = ", ".join(owner.model_fields) if owner else "see README 'Matrix format'"
        return f"{where}: unknown key (valid keys here: {valid})"
    if kind == "missing":
        return f"{where}: required key is missing"
    msg = error["msg"].removeprefix("Value error, ")
    return f"{where}: {msg}"


def load_matrix(path: str | Path) -> Matrix:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise MatrixError(str(path), [f"cannot read the file: {exc.strerror} (check the -m path)"]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MatrixError(str(path), [f"not valid TOML: {exc}"]) from None
    try:
        spec = MatrixFile.model_validate(data)
    except ValidationError as exc:
        raise MatrixError(str(path), [_describe(e) for e in exc.errors()]) from None
    problems = _cross_check(spec, path)
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

    def patch_path(self, rel: str) -> Path:
        return self.patches_root / rel


def _cross_check(spec: MatrixFile, path: Path) -> list[str]:
    problems: list[str] = []
    patches_root = (path.parent / spec.matrix.patches_dir).resolve()
    if spec.matrix.hardware not in spec.hardware:
        problems.append(
            f"matrix.hardware: '{spec.matrix.hardware}' is not a hardware profile "
            f"(defined: {', '.join(spec.hardware)})"
        )
    for name, stack in spec.stacks.items():
        series: list[tuple[str, str]] = []
        if stack.vllm:
            series += [(f"stacks.{name}.vllm.patches[{i}]", p) for i, p in enumerate(stack.vllm.patches)]
        if stack.flashinfer:
            series += [(f"stacks.{name}.flashinfer.prs[{i}].patch", pr.patch)
                       for i, pr in enumerate(stack.flashinfer.prs)]
            numbers = [pr.number for pr in stack.flashinfer.prs]
            for dup in sorted({n for n in numbers if numbers.count(n) > 1}):
                problems.append(f"stacks.{name}.flashinfer.prs: PR #{dup} is listed twice (keep one)")
        seen: set[str] = set()
        for where, rel in series:
            if rel in seen:
                problems.append(f"{where}: '{rel}' appears twice in the series (a patch applies once)")
            seen.add(rel)
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                problems.append(f"{where}: '{rel}' must be a relative path inside {patches_root}")
            elif not (patches_root / rel).is_file():
                problems.append(
                    f"{where}: patch file not found: {patches_root / rel} "
                    "(add it under patches/, or fix the path; `harness patches add-pr` fetches a PR)"
                )
    served = [m.served_name or k for k, m in spec.models.items()]
    for dup in sorted({s for s in served if served.count(s) > 1}):
        problems.append(f"models: served name '{dup}' is used by two models (served names must differ)")
    for key, names in (("stacks", spec.stacks), ("models", spec.models), ("configs", spec.configs)):
        patterns = getattr(spec.cells, key)
        for i, pat in enumerate(patterns):
            if not fnmatch.filter(names, pat):
                problems.append(
                    f"cells.{key}[{i}]: '{pat}' names no {key[:-1]} (defined: {', '.join(names)})"
                )
            if patterns.count(pat) > 1 and patterns.index(pat) == i:
                problems.append(f"cells.{key}[{i}]: '{pat}' is listed twice")
    for lname in ("exclude", "only"):
        for i, flt in enumerate(getattr(spec.cells, lname)):
            for key, names in (("stack", spec.stacks), ("model", spec.models), ("config", spec.configs)):
                pat = getattr(flt, key)
                if not fnmatch.filter(names, pat):
                    problems.append(
                        f"cells.{lname}[{i}].{key}: '{pat}' names no {key} (defined: {', '.join(names)})"
                    )
    if spec.hosts:
        from harness.hosts import host_problems

        problems += host_problems(spec)
    for i, rule in enumerate(spec.expect.select):
        try:
            compile_expression(rule.cells)
        except SelectionError as exc:
            problems.append(f"expect.select[{i}].cells: {exc}")
    return problems
