"""A bisect's folder: what was asked, one JSON per judged point, and the answer.

    bisect.json        the history, the probe, and the list of points (fixed at the start)
    steps/NNNN-ID.json one per judged point, written once, whole (atomic rename)
    logs/NNNN-ID.log   what the probe printed for that point
    result.json/.md    the answer, rewritten after every step

The records of these files are defined here, beside FORMAT (session.py fills them, cmakediff.py
adds its part to the answer): pydantic models that keep keys they do not know (`Open`), written
with the keys that were given, so a file read and written again keeps its shape.

A step file's presence is what "judged" means: a resumed bisect reads them and never judges
those points again; the point list is read back from bisect.json, not from the index or the
repository, so a resume sees the same history.

The folder is a root (harness.safety.roots): a link under it (steps/, logs/, a step file) is
refused, never followed, and every file is read with a size and nesting bound.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.bisect.history import HistorySpec, Point
from harness.bisect.probes import Decision, ProbeSpec
from harness.bisect.search import Verdict
from harness.errors import ConfigError
from harness.record import Open
from harness.redact import redact_json, redact_text
from harness.results.store import utc_now
from harness.safety import grammar
from harness.safety.paths import MiB
from harness.safety.roots import Root

FORMAT = 1
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class SetupSpec(Open):
    """What is done to every point's tree before the probe: the patches, in order."""

    patches: list[tuple[str, str]] = Field(default_factory=list)  # (name, absolute path)


class BisectSpec(Open):
    """What was asked: the history, the probe and the setup (fixed at the start)."""

    history: HistorySpec
    probe: ProbeSpec
    setup: SetupSpec = Field(default_factory=SetupSpec)


class BisectFile(Open):
    """bisect.json: what was asked, and the point list it was asked over."""

    format: int
    created: str
    history: HistorySpec
    probe: ProbeSpec
    setup: SetupSpec = Field(default_factory=SetupSpec)
    preferred: list[int] = Field(default_factory=list)  # indexes judged first (search.next_point)
    points: list[Point]

    @field_validator("format")
    @classmethod
    def _readable(cls, value: int) -> int:
        if value != FORMAT:
            raise ValueError(f"this version reads format {FORMAT}")
        return value

    @property
    def spec(self) -> BisectSpec:
        return BisectSpec(history=self.history, probe=self.probe, setup=self.setup)


class Step(Open):
    """steps/NNNN-ID.json: one judged point."""

    index: int
    id: str
    title: str = ""
    date: str = ""
    step: int  # the order it was judged in, from 1
    verdict: Verdict
    reason: str = ""
    decision: Decision | None = None  # a comparing probe's decision
    detail: dict[str, object] = Field(default_factory=dict)  # the probe's own facts
    started: str = ""
    seconds: float


class Side(Open):
    """One end of the answer's range: a point and how it was judged."""

    id: str
    title: str
    date: str
    verdict: Verdict
    reason: str
    decision: Decision | None = None


class Suspect(Open):
    id: str
    title: str


class StepLine(Open):
    """A judged point as the answer lists it."""

    step: int
    index: int
    id: str
    title: str
    verdict: Verdict
    reason: str
    seconds: float


class CMakeDiff(Open):
    """result.json's `cmake_diff`: the arch hunks across the answer (all of them in `file`), or
    the `error` that kept the two trees from being compared."""

    model_config = ConfigDict(populate_by_name=True)
    file: str | None = None
    from_: str | None = Field(None, alias="from")  # the last good point's id
    to: str | None = None  # the first bad point's id
    hunks: int | None = None
    text: str = ""
    error: str | None = None


class CMakeCommit(Open):
    """result.json's `cmake_commits`: a commit that touched the CMake files (git histories)."""

    id: str
    date: str
    title: str


class BisectResult(Open):
    """result.json: the answer, rewritten after the last step."""

    history: HistorySpec
    probe: ProbeSpec
    setup: SetupSpec = Field(default_factory=SetupSpec)
    points: int
    done: bool
    first_bad: Side | None  # None: not done, or skips leave several suspects
    suspects: list[Suspect] = Field(default_factory=list)  # when done: the points that may be the first bad one
    last_good: Side
    bad_side: Side
    reference: Decision | None = None  # a comparing probe: the good endpoint's decision
    steps: list[StepLine]
    seconds: float
    cmake_diff: CMakeDiff | None = None  # the configure and build probes, when done
    cmake_commits: list[CMakeCommit] | None = None  # the same, over a git history


def dump(record: BaseModel) -> dict[str, object]:
    """A record as its file holds it: the keys that were given (or read), unknown ones kept."""
    return record.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _bad(path: Path, why: str) -> ConfigError:
    return ConfigError(f"{path}: {why}", hint="give the folder of a `harness bisect` run, or a new --out folder")


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    return f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"


class BisectStore:
    def __init__(self, folder: Path, spec: BisectSpec, points: list[Point], preferred: set[int]) -> None:
        self.dir, self.spec, self.points, self.preferred = Path(folder), spec, points, preferred
        self.root = Root(self.dir, what="bisect folder")

    @classmethod
    def create(cls, folder: Path, spec: BisectSpec, points: list[Point], preferred: set[int]) -> BisectStore:
        root = Root(folder, what="--out", create=True)
        if root.exists("bisect.json"):
            raise _bad(Path(folder), "holds a bisect already (resume it with --resume)")
        store = cls(Path(folder), spec, points, preferred)
        store._write_json("bisect.json", BisectFile(
            format=FORMAT, created=utc_now(), history=spec.history, probe=spec.probe, setup=spec.setup,
            preferred=sorted(preferred), points=points))
        return store

    @classmethod
    def open(cls, folder: Path) -> BisectStore:
        path = Path(folder) / "bisect.json"
        try:
            doc = Root(folder, what="bisect folder").load_json("bisect.json", limit=64 * MiB)
        except FileNotFoundError:
            raise _bad(path.parent, "no bisect.json: not a bisect folder") from None
        try:
            file = BisectFile.model_validate(doc)
        except ValidationError as exc:
            for e in exc.errors():
                if e["loc"] == ("format",):
                    said = None if e["type"] == "missing" else e["input"]
                    raise _bad(path, f"format {said!r}, this version reads {FORMAT}") from None
            raise _bad(path, f"unreadable (ValidationError: {_first_error(exc)[:200]})") from None
        # a point id reaches git (`git archive ID`) or a file name: checked against its grammar
        field = "sha" if file.history.kind == "git" else "version"
        for p in file.points:
            grammar.check(field, p.id, where=f"{path}: point id", hint="start a new bisect")
        return cls(path.parent, file.spec, file.points, set(file.preferred))

    def _write_json(self, rel: str, record: BaseModel) -> None:
        # masked like every file the tool writes (an --index URL's token, a probe's --api-key)
        self.root.save_text(rel, json.dumps(redact_json(dump(record)), indent=2, ensure_ascii=False,
                                            allow_nan=False) + "\n")

    def _name(self, index: int) -> str:
        return f"{index:04d}-{_UNSAFE.sub('_', self.points[index].short)}"

    def step_path(self, index: int) -> Path:
        return self.dir / "steps" / f"{self._name(index)}.json"

    def log_path(self, index: int) -> Path:
        """Where a point's probe log goes: logs/ made under the root (never a link); the log
        itself is written through harness.safety.writes, which never writes through a link."""
        return self.root.mkdir("logs") / f"{self._name(index)}.log"

    def steps(self) -> dict[int, Step]:
        out: dict[int, Step] = {}
        for name in self.root.files("steps", suffix=".json"):
            path = self.dir / "steps" / name
            hint = "delete it to judge that point again"
            doc = self.root.load_json(f"steps/{name}", limit=16 * MiB, hint=hint)
            try:
                step = Step.model_validate(doc)
            except ValidationError as exc:
                raise _bad(path, f"unreadable step (ValidationError: {_first_error(exc)[:200]}): {hint}") from None
            if not (0 <= step.index < len(self.points) and self.points[step.index].id == step.id):
                raise _bad(path, f"does not match this bisect's points: {hint}")
            out[step.index] = step
        return out

    def write_step(self, step: Step) -> None:
        self._write_json(f"steps/{self._name(step.index)}.json", step)

    def save_text(self, rel: str, text: str) -> Path:
        return self.root.save_text(rel, text)

    def write_result(self, result: BisectResult, markdown: str) -> None:
        self._write_json("result.json", result)
        self.root.save_text("result.md", redact_text(markdown))
