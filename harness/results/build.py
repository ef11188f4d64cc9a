"""builds/<stack>.json: what the build (or reuse, or local audit) of one stack on one host gave,
and what the compile cache did in it. Written by the build stage (harness.stages.build, through
harness.image.builder), read back by the store, the report and `harness bug`."""

from __future__ import annotations

import ast
import re
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field, JsonValue, ValidationError

from harness.audit.report import AuditState, AuditSummary
from harness.audit.scan import arch_sort_key
from harness.record import Open
from harness.results.model import FORMAT, READABLE_FORMATS, Stored, first_errors


class CompileCache(Open):
    """What the compile cache did in one build (harness/image/compile_cache.py)."""

    hits: int = Field(0, description="compiles answered from the cache")
    misses: int = Field(0, description="compiles run and stored")
    uncacheable: int = Field(0, description="compiles ccache declined to cache (they ran)")
    hit_rate: float | None = Field(None, description="hits / (hits + misses + uncacheable)")
    seconds_compiling: float | None = Field(None, description="wall time of the compile steps "
                                            "(configure + compile), from the step itself")
    remote_errors: int = Field(0, description="reads or writes the store did not answer")
    namespace: str | None = Field(None, description="the store folder: machine + toolchain digest")
    off: str | None = Field(None, description="why the build compiled without the cache")
    missed: tuple[str, ...] = Field((), description="the translation units compiled, not taken from the "
                                    "cache (source paths, relative to the source tree)")
    store_errors: tuple[str, ...] = Field((), description="units whose lookup or store failed against "
                                          "the store (each such lookup is also a miss)")


BuildKey = tuple[str, str | None]  # (stack, host): host None in a run on one host


class BuildStatus(StrEnum):
    """What became of a stack's image. Every value is documented in docs/results-format.md."""

    BUILT = "built"  # built by this run
    REUSED = "reused"  # an image of the same content hash (or a prebuilt `image`) was there
    FAILED = "failed"  # it did not build (or the prebuilt image is not on the engine)
    LOCAL = "local"  # a local stack: no image, its installed vllm package audited
    SKIPPED = "skipped"  # not built (older runs)


class BuildOutcome(Open):
    """builds/<stack>.json (builds/<stack>@<host>.json in a run over several hosts): what the
    build (or reuse, or local audit) of one stack on one host gave."""

    format: int = FORMAT
    stack: str
    host: str | None = Field(default=None, description="the [hosts] entry it was built on, in a run of several")
    status: BuildStatus
    image_ref: str | None = None
    image_id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    log_path: str | None = None
    log_tail: tuple[str, ...] = ()
    duration_s: float = 0.0
    audit: AuditSummary | None = Field(None, description="the arch audit of its image (a local stack: of "
                                       "its vllm package); None: not audited. Cells read it here")
    arch_problems: tuple[str, ...] = ()
    reason: str | None = None
    compile_cache: CompileCache | None = None
    rust_frontend: str | None = Field(None, description="vLLM's optional Rust front end: built | not built (why) | "
                                      "none in this release; None: not recorded (a wheel stack, an older image)")

    @property
    def failed(self) -> bool:
        return self.status is BuildStatus.FAILED

    @property
    def key(self) -> BuildKey:
        return (self.stack, self.host)

    @property
    def file_name(self) -> str:
        """Its file under builds/, before the store makes the name safe."""
        return self.stack if self.host is None else f"{self.stack}@{self.host}"

    @property
    def audit_status(self) -> AuditState | None:
        """The arch audit's status; None when the stack was not audited."""
        return self.audit.status if self.audit else None

    @classmethod
    def from_json(cls, data: Any, stack: str | None = None) -> BuildOutcome:
        """A format-4 record, or an older one lifted to it. Raises ValueError on anything else."""
        if not isinstance(data, dict):
            raise ValueError(f"a build record is a JSON object, not {type(data).__name__}")
        fmt = Stored.model_validate({"format": 3, **data}).format  # build records said none before 4
        if fmt not in READABLE_FORMATS:
            raise ValueError(f"results format {fmt!r}; this tool reads formats {READABLE_FORMATS}")
        try:
            if fmt < 4:
                data = _lift_v3(data, stack)
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ValueError(first_errors(exc)) from None


# --- older build records -------------------------------------------------------------------


class _V1ImageRef(Open):
    """A v1 build's image: {ref, id}."""

    ref: str | None = None
    id: str | None = None


class _V3Build(Open):
    """The keys of a format 1-3 build record that differ from format 4, as they were written."""

    stack: str | None = None
    host: str | None = None
    image: _V1ImageRef | None = Field(None, description="v1: {ref, id}, where v2 has image_ref / image_id")
    audit: dict[str, JsonValue] | None = Field(None, description="the full report (a local stack), or the flat "
                                               "labels (v1)")
    audit_summary: dict[str, JsonValue] | None = None


def _lift_v3(data: dict, stack: str | None) -> dict:
    """Format 1-3 -> 4: one audit record (format 3 kept a local stack's full report as `audit`
    beside `audit_summary`, each in its own shape); v2's multi-host key and v1's image read."""
    old = _V3Build.model_validate(data)
    data = {k: v for k, v in data.items() if v is not None and k not in ("audit", "audit_summary")}
    data["format"] = FORMAT
    data.setdefault("stack", stack or "?")
    if old.host is None and old.stack is not None and "@" in old.stack:
        # v2 kept a multi-host build as stack "<stack>@<host>"
        data["stack"], data["host"] = old.stack.split("@", 1)
    if old.image is not None:
        data.setdefault("image_ref", old.image.ref)
        data.setdefault("image_id", old.image.id)
    shapes = [lift_audit(a) for a in (old.audit, old.audit_summary) if a]
    if shapes:
        # the full report (first) has what the summary lacks (the cc of each target), and the
        # summary what the oldest reports lacked (the unreadable count)
        data["audit"] = {k: next((s[k] for s in shapes if s.get(k) is not None), None)
                         for k in shapes[0]}
    return data


class _OldVerdict(Open):
    """A target verdict object of a stored full report (AuditReport.to_json())."""

    target: str
    cc: str | None = None
    status: str
    message: str


class _OldProblem(Open):
    status: str
    message: str


class _OldFamilies(Open):
    nvfp4_gemm: dict[str, int] | None = None


class _OldAudit(Open):
    """Any audit shape format 1-3 stored, read for the fields format 4 keeps: the flat `audit.*`
    labels (AuditReport.summary(); `audit.verdict.<target>` and `audit.problem.<i>` among the
    other keys), those labels with `status`, `cubins` and the verdicts as lines beside them
    (harness.image.builder, format 2-3), or the full report (AuditReport.to_json(), a local
    stack's)."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    status: str | None = None
    reason: str | None = None
    cubins: dict[str, int] | None = None
    totals: dict[str, int] | None = Field(None, description="the full report's cubins")
    ptx: list[str] | None = None
    families: _OldFamilies | None = None
    sass_checked: bool | None = None
    unreadable: list[dict[str, JsonValue]] | None = Field(None, description="the full report's unreadable files")
    verdicts: list[_OldVerdict | str] | None = Field(None, description='objects (the full report), or lines '
                                                     '"SM_121: pass: ..." (the builder\'s)')
    problems: list[_OldProblem] | None = None
    label_status: str | None = Field(None, alias="audit.status")
    label_cubins: str | None = Field(None, alias="audit.cubins")
    label_ptx: str | None = Field(None, alias="audit.ptx")
    label_nvfp4_gemm: str | None = Field(None, alias="audit.nvfp4_gemm")
    label_sass_checked: str | None = Field(None, alias="audit.sass_checked")
    label_unreadable: str | None = Field(None, alias="audit.unreadable")

    def labelled(self, prefix: str) -> list[tuple[str, str]]:
        """The `audit.<prefix>.<name>` labels, in stored order, as (name, value)."""
        return [(k.removeprefix(prefix), v) for k, v in (self.model_extra or {}).items()
                if k.startswith(prefix) and isinstance(v, str)]


_SM = re.compile(r"^SM_(\d+)(\d)$")
# the builder of 2026-12-02 (394a267) stored each verdict as `str(Verdict)`, the dataclass's repr
_QUOTED = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_REPR = re.compile(rf"^Verdict\(target=Target\(name=(?P<target>{_QUOTED}), cc=(?P<cc>{_QUOTED})\), "
                   rf"status=(?P<status>{_QUOTED}), message=(?P<message>{_QUOTED}), checks=")


def _counts(label: str) -> dict[str, int]:
    """`sm_80=27,sm_90a=62` (or `none`) as a mapping."""
    pairs = [p.rsplit("=", 1) for p in label.split(",") if p and label != "none"]
    return {arch: int(n) for arch, n in pairs}


def _by_arch(counts: dict[str, int]) -> dict[str, int]:
    """In arch order, as format 4 writes them (format 3's builder kept the scan's order); a name
    that is no arch leaves the order as it was."""
    try:
        return {a: counts[a] for a in sorted(counts, key=arch_sort_key)}
    except ValueError:
        return counts


def _verdict(target: str, status_message: str, cc: str | None = None) -> dict[str, Any]:
    status, _, message = status_message.partition(": ")
    m = _SM.match(target)
    return {"target": target, "cc": cc or (f"{m[1]}.{m[2]}" if m else None), "status": status, "message": message}


def _problem(status_message: str) -> dict[str, Any]:
    status, _, message = status_message.partition(": ")
    return {"status": status, "message": message}


def lift_audit(stored: dict[str, JsonValue]) -> dict[str, Any]:
    """An audit of any format 1-3 shape as format 4's fields; None where the shape kept nothing."""
    old = _OldAudit.model_validate(stored)
    verdicts: list[dict[str, Any]] = []
    for v in old.verdicts or ():
        if isinstance(v, _OldVerdict):
            verdicts.append(_verdict(v.target, f"{v.status}: {v.message}", v.cc))
        elif m := _REPR.match(v):
            target, cc, status, message = (ast.literal_eval(m[k]) for k in ("target", "cc", "status", "message"))
            verdicts.append(_verdict(target, f"{status}: {message}", cc))
        else:
            target, _, rest = v.partition(": ")
            verdicts.append(_verdict(target, rest))
    if not verdicts:  # the labels keep the target in lower case, and cut the line at 240
        verdicts = [_verdict(name.upper(), line) for name, line in old.labelled("audit.verdict.")]
    problems = [{"status": p.status, "message": p.message} for p in old.problems or ()] or [
        _problem(line) for _, line in old.labelled("audit.problem.")]
    cubins = old.cubins if old.cubins is not None else old.totals
    return {
        "status": old.status or old.label_status,
        "reason": old.reason,
        "cubins": _by_arch(cubins if cubins is not None else _counts(old.label_cubins or "")),
        "ptx": old.ptx if old.ptx is not None else (
            None if old.label_ptx is None else [p for p in old.label_ptx.split(",") if p and old.label_ptx != "none"]),
        "nvfp4_gemm": old.families.nvfp4_gemm if old.families and old.families.nvfp4_gemm is not None else (
            None if old.label_nvfp4_gemm is None else _counts(old.label_nvfp4_gemm)),
        "sass_checked": old.sass_checked if old.sass_checked is not None else (
            None if old.label_sass_checked is None else old.label_sass_checked == "yes"),
        "unreadable": len(old.unreadable) if old.unreadable is not None else (
            None if old.label_unreadable is None else int(old.label_unreadable)),
        "verdicts": verdicts,
        "problems": problems,
    }
