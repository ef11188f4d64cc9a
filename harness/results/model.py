"""The typed records of a run: what a cell ended as, and why.

Results format v2 (docs/results-format.md). Everything a stage produces about a cell lands in one
frozen `CellResult`; report, compare and bug only render these records, they judge nothing. The
verdicts are the single source of truth: a cell's `reasons` are derived from its failed verdicts,
never stored beside them. v1 files (the first round's run directories, examples/h200/run) load
through `CellResult.from_json`, which lifts their free-text reasons into verdicts.

The fingerprint and the benchmark are the types their modules produce (`Fingerprint`,
`BenchResult`). Other sub-records (the memory watch, the audit, the image probe) are typed views
that keep unknown keys (`extra="allow"`): a newer writer may add facts, and an older reader must
neither lose them nor refuse the file.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field

# a cell's bench figures are what `harness bench` measured: one type, defined there
from harness.bench.result import BenchResult, LevelResult

# a cell's fingerprint is what `fingerprint(text)` returns: one type, defined there
from harness.fingerprint.model import Fingerprint

# a cell's verdicts are the log's (fingerprint) and the judge's: one type, defined there
from harness.fingerprint.verdicts import SELECTION_CHECKS as SELECTION_CHECKS
from harness.fingerprint.verdicts import Verdict as Verdict
from harness.fingerprint.verdicts import VerdictStatus as VerdictStatus

# The names readers of stored cells use for them: the same classes.
BenchRecord = BenchResult
BenchLevel = LevelResult
FingerprintRecord = Fingerprint

FORMAT = 2
READABLE_FORMATS = (1, 2)


class Status(StrEnum):
    """How a cell ended. Every value is documented in docs/results-format.md."""

    PASS = "pass"  # served, and every verdict passed
    FAIL = "fail"  # served, and a verdict failed
    BUILD_FAILED = "build-failed"  # its image did not build
    CRASHED = "crashed"  # the server exited before it was ready
    HUNG = "hung"  # no new log line for serve.quiet_period_s while not ready
    TIMEOUT = "timeout"  # not ready within serve.startup_timeout_s
    SKIPPED = "skipped"  # not run, on purpose (no GPU on this host, filtered)
    ERROR = "error"  # the tool itself raised inside the cell (the exception is recorded)

    @property
    def ok(self) -> bool:
        """Counts as a success for the exit code."""
        return self in (Status.PASS, Status.SKIPPED)

    @property
    def served(self) -> bool:
        return self in (Status.PASS, Status.FAIL)


# Worse is higher, for `harness compare`; SKIPPED and ERROR say nothing about the stack.
STATUS_RANK = {Status.PASS: 0, Status.FAIL: 1, Status.HUNG: 2, Status.TIMEOUT: 2,
               Status.CRASHED: 3, Status.BUILD_FAILED: 4}
NOT_READY = {"exited": Status.CRASHED, "hung": Status.HUNG, "timeout": Status.TIMEOUT}


class Record(BaseModel):
    """Frozen, and strict about its own keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Open(BaseModel):
    """Frozen, keeps keys it does not know (written by another module, maybe newer)."""

    model_config = ConfigDict(frozen=True, extra="allow")


# --- views of what other modules write -------------------------------------------------------


class MemoryRecord(Open):
    """`harness.results.memwatch.MemWatch.result()`."""

    leak: bool = False
    reason: str | None = None
    host_slope_gib_per_h: float | None = None
    gpu_slope_gib_per_h: float | None = None


# --- what the pipeline writes ----------------------------------------------------------------


class Requested(Record):
    moe_backend: str | None = None
    linear_backend: str | None = None
    attention_backend: str | None = None
    cudagraph_mode: str | None = None


class ModelInfo(Record):
    active_params_b: float | None = None
    bytes_per_param: float | None = None
    checkpoint: str | None = None
    load_format: str | None = None


class ServeInfo(Record):
    command: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    log: str | None = Field(default=None, description="server log, relative to the run directory")
    startup_s: float | None = None
    exit_code: int | None = None
    state: str | None = Field(default=None, description="ready | exited | hung | timeout")
    log_tail: tuple[str, ...] = ()
    url: str | None = None
    served_model: str | None = None


class ImageInfo(Record):
    ref: str | None = None
    id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class BuildInfo(Record):
    log: str | None = None
    log_tail: tuple[str, ...] = ()


class CellError(Record):
    """The tool raised inside this cell: the run went on, this is what it raised."""

    type: str
    message: str
    traceback: tuple[str, ...] = ()


class CrossCheck(Open):
    command: str = ""
    exit_code: int | None = None
    duration_s: float | None = None
    output_tail: tuple[str, ...] = ()
    result: Any = None


class CellResult(Record):
    """Everything known about one cell of one run."""

    format: int = FORMAT
    id: str = Field(description="<stack>/<model>/<config>")
    stack: str
    model: str
    config: str
    quantization: str | None = None
    runner: str | None = Field(default=None, description="docker | local")
    status: Status
    verdicts: tuple[Verdict, ...] = ()
    requested: Requested = Field(default_factory=Requested)
    model_info: ModelInfo = Field(default_factory=ModelInfo)
    fingerprint: Fingerprint | None = None
    bench: BenchRecord | None = None
    image: ImageInfo | None = None
    image_fingerprint: dict[str, Any] | None = None
    audit: dict[str, Any] | None = None
    memory: MemoryRecord | None = None
    serve: ServeInfo | None = None
    build: BuildInfo | None = None
    cross_check: CrossCheck | None = None
    error: CellError | None = None
    durations: dict[str, float] = Field(default_factory=dict)
    started_at: str | None = None
    finished_at: str | None = None
    host: str | None = Field(default=None, description="the engine / host that ran it")

    # mypy refuses a decorator over @property; this is pydantic's documented form
    @computed_field  # type: ignore[prop-decorator]
    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the cell did not pass: the messages of its failed verdicts, in order."""
        return tuple(v.message for v in self.verdicts if v.failed)

    def verdict(self, check: str) -> Verdict | None:
        return next((v for v in self.verdicts if v.check == check), None)

    @property
    def decode_c1(self) -> float | None:
        return self.bench.per_stream(1) if self.bench else None

    @classmethod
    def from_json(cls, data: Any) -> CellResult:
        """A v2 record, or a v1 record lifted to v2. Raises ValueError on anything else."""
        if not isinstance(data, dict):
            raise ValueError(f"a cell record is a JSON object, not {type(data).__name__}")
        fmt = data.get("format", 1)
        if fmt not in READABLE_FORMATS:
            raise ValueError(f"results format {fmt!r}; this tool reads formats {READABLE_FORMATS}")
        if fmt == 1:
            try:
                data = _lift_v1(data)
            except (TypeError, AttributeError, KeyError) as exc:  # a v1 field of the wrong type
                raise ValueError(f"a v1 cell record with a field of the wrong type ({exc})") from None
        else:
            data = {k: v for k, v in data.items() if k != "reasons"}
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ValueError(_first_errors(exc)) from None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _lift_v1(data: dict) -> dict:
    """v1 -> v2: reasons that no failed verdict carries become verdicts; keys renamed."""
    data = dict(data)
    reasons = [str(r) for r in data.pop("reasons", None) or ()]
    verdicts = [dict(v) for v in data.get("verdicts") or () if isinstance(v, dict)]
    said = {v.get("message") for v in verdicts if v.get("status") == "fail"}
    status = data.get("status")
    lifted = []
    for r in reasons:
        if r in said:
            continue
        check = {"build-failed": "build", "crashed": "serve.ready", "hung": "serve.ready",
                 "timeout": "serve.ready"}.get(status or "", "reason")
        lifted.append({"check": check, "status": "fail", "message": r, "lines": []})
    data["verdicts"] = lifted + verdicts
    data["format"] = FORMAT
    if isinstance(data.get("durations"), dict):  # v1 readers took null figures
        data["durations"] = {k: v for k, v in data["durations"].items() if v is not None}
    if isinstance(data.get("image"), dict) and not any(data["image"].values()):
        data["image"] = None
    build = data.get("build")
    if isinstance(build, dict):
        data["build"] = {"log": build.get("log"), "log_tail": build.get("log_tail") or []}
    return data


def _first_errors(exc: ValidationError, n: int = 3) -> str:
    parts = []
    for e in exc.errors()[:n]:
        where = ".".join(str(p) for p in e["loc"]) or "(top)"
        parts.append(f"{where}: {e['msg']}")
    more = f" (and {exc.error_count() - n} more)" if exc.error_count() > n else ""
    return "; ".join(parts) + more


# --- the run ---------------------------------------------------------------------------------


class RunStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"


class Controller(Record):
    """Who is running the run: a run whose controller is gone is reaped, not trusted."""

    host: str
    pid: int
    started: float | None = Field(default=None, description="process start time (ticks), against pid reuse")


class MatrixInfo(Open):
    path: str | None = None
    sha256: str | None = None
    name: str | None = None
    hardware_name: str | None = None
    hardware: dict[str, Any] = Field(default_factory=dict)
    expect: dict[str, Any] = Field(default_factory=dict)
    bench: dict[str, Any] = Field(default_factory=dict)

    @property
    def min_ratio(self) -> float | None:
        value = self.expect.get("nvfp4_over_fp8_min_ratio")
        return float(value) if isinstance(value, int | float) else None

    @property
    def noise_floor(self) -> float | None:
        value = self.bench.get("noise_floor")
        return float(value) if isinstance(value, int | float) else None


class RunRecord(BaseModel):
    """run.json. Mutable on purpose: the store updates status and cells as the run goes."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    format: int = FORMAT
    run_id: str
    tool_version: str | None = None
    argv: list[str] = Field(default_factory=list)
    k: str | None = None
    matrix: MatrixInfo = Field(default_factory=MatrixInfo)
    host: dict[str, Any] = Field(default_factory=dict)
    cells: list[str] = Field(default_factory=list)
    status: RunStatus = RunStatus.RUNNING
    started_at: str | None = None
    finished_at: str | None = None
    controller: Controller | None = None
    note: str | None = Field(default=None, description="why a run stopped early, when it did")

    @classmethod
    def from_json(cls, data: Any) -> RunRecord:
        if not isinstance(data, dict):
            raise ValueError(f"run.json holds a JSON object, not {type(data).__name__}")
        fmt = data.get("format", 1)
        if fmt not in READABLE_FORMATS:
            raise ValueError(f"results format {fmt!r}; this tool reads formats {READABLE_FORMATS}")
        try:
            return cls.model_validate({**data, "format": FORMAT})
        except ValidationError as exc:
            raise ValueError(_first_errors(exc)) from None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class CompileCache(Open):
    """What the compile cache did in one build (harness/build/compile_cache.py)."""

    hits: int = Field(0, description="compiles answered from the cache")
    misses: int = Field(0, description="compiles run and stored")
    uncacheable: int = Field(0, description="compiles ccache declined to cache (they ran)")
    hit_rate: float | None = Field(None, description="hits / (hits + misses + uncacheable)")
    seconds_compiling: float | None = Field(None, description="wall time of the compile steps "
                                            "(configure + compile), from the step itself")
    remote_errors: int = Field(0, description="reads or writes the store did not answer")
    namespace: str | None = Field(None, description="the store folder: machine + toolchain digest")
    off: str | None = Field(None, description="why the build compiled without the cache")


class BuildOutcome(Open):
    """builds/<stack>.json: what the build (or reuse, or local audit) of one stack gave."""

    stack: str
    status: str = Field(description="built | reused | failed | local | skipped")
    image_ref: str | None = None
    image_id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    log_path: str | None = None
    log_tail: tuple[str, ...] = ()
    duration_s: float = 0.0
    audit: dict[str, Any] | None = None
    audit_summary: dict[str, Any] | None = None
    arch_problems: tuple[str, ...] = ()
    reason: str | None = None
    compile_cache: CompileCache | None = None
    rust_frontend: str | None = Field(None, description="vLLM's optional Rust front end: built | not built (why) | "
                                      "none in this release; None: not recorded (a wheel stack, an older image)")

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def audit_status(self) -> str | None:
        """The arch audit's status, from the full report (`status`) or its flat summary
        (`audit.status`; records written before it held that pair have `status`); None when the
        stack was not audited."""
        audit, summary = self.audit or {}, self.audit_summary or {}
        return (audit.get("status") or audit.get("audit.status") or summary.get("audit.status")
                or summary.get("status"))

    @classmethod
    def from_json(cls, data: Any, stack: str | None = None) -> BuildOutcome:
        if not isinstance(data, dict):
            raise ValueError(f"a build record is a JSON object, not {type(data).__name__}")
        data = {k: v for k, v in data.items() if v is not None or k in ("audit",)}
        data.setdefault("stack", stack or "?")
        image = data.get("image")
        if isinstance(image, dict):  # v1 wrote {ref, id} where v2 has image_ref / image_id
            data.setdefault("image_ref", image.get("ref"))
            data.setdefault("image_id", image.get("id"))
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ValueError(_first_errors(exc)) from None
