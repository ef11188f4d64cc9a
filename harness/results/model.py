"""The typed records of a run: what a cell ended as, and why (cells/<key>.json), and the run
itself (run.json).

Results format v4 (FORMAT below; docs/results-format.md). Everything a stage produces about a
cell lands in one frozen `CellResult`; report, compare and bug only render these records, they
judge nothing. The verdicts are the single source of truth: a cell's `reasons` are derived from
its failed verdicts, never stored beside them, and the image's audit is its build's
(`build_record`), never copied into the cell. Older files load through `CellResult.from_json`:
v1's free-text reasons (the first round's run directories, examples/h200/run) become verdicts, a
v1 or v2 NVFP4 cell, which stored no pairing, is read as compared with the cell of its stack and
config whose model name says fp8 where its says nvfp4, and the audit a v1-v3 cell copied from
its build is left to the build.

The fingerprint and the benchmark are the types their modules produce (`Fingerprint`,
`BenchResult`). Other sub-records (the memory watch, the image probe) are typed views that keep
unknown keys (`extra="allow"`): a newer writer may add facts, and an older reader must neither
lose them nor refuse the file.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictInt,
    ValidationError,
    computed_field,
)

# a cell's bench figures are what `harness bench` measured: one type, defined there
from harness.bench.result import BenchResult, LevelResult

# a cell's fingerprint is what `fingerprint(text)` returns: one type, defined there
from harness.fingerprint.model import Fingerprint

# a cell's verdicts are the log's (fingerprint) and the judge's: one type, defined there
from harness.fingerprint.verdicts import SELECTION_CHECKS as SELECTION_CHECKS
from harness.fingerprint.verdicts import Verdict as Verdict
from harness.fingerprint.verdicts import VerdictStatus as VerdictStatus

# the host's fingerprint is what `harness env` reads: defined there
from harness.hostenv import HostFingerprint
from harness.record import Open, Record, kept

# The names readers of stored cells use for them: the same classes.
BenchRecord = BenchResult
BenchLevel = LevelResult
FingerprintRecord = Fingerprint

FORMAT = 4
READABLE_FORMATS = (1, 2, 3, 4)
FORMAT_CHECK = "expect.nvfp4_over_fp8"  # the judge's NVFP4-vs-FP8 verdict (harness.stages.judge)


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


class ServeState(StrEnum):
    """How the wait for a server ended (harness.serve.readiness)."""

    READY = "ready"  # /health answered and /v1/models listed the cell's own name
    EXITED = "exited"  # the process ended, or its log said it could not bind its port
    HUNG = "hung"  # no new log line for serve.quiet_period_s while not ready
    TIMEOUT = "timeout"  # not ready within serve.startup_timeout_s

    @property
    def ready(self) -> bool:
        return self is ServeState.READY


NOT_READY = {ServeState.EXITED: Status.CRASHED, ServeState.HUNG: Status.HUNG, ServeState.TIMEOUT: Status.TIMEOUT}


# --- views of what other modules write -------------------------------------------------------


class MemoryRecord(Open):
    """`harness.results.memwatch.MemWatch.result()`."""

    leak: bool = False
    reason: str | None = None
    host_slope_gib_per_h: float | None = None
    gpu_slope_gib_per_h: float | None = None


class VersionProbe(Open):
    version: str | None = None
    git_sha: str | None = None
    error: str | None = None


class TorchProbe(Open):
    version: str | None = None
    cuda: str | None = None
    arch_list: tuple[str, ...] | None = None
    error: str | None = None


class ImageProbe(Open):
    """What harness/probe_image.py prints from inside an image (or a local Python). That script
    runs with the image's own interpreter and the standard library only, so its record is typed
    here, where the harness reads it."""

    python: str | None = None
    executable: str | None = None
    distributions: dict[str, str | None] = Field(default_factory=dict)
    vllm: VersionProbe = Field(default_factory=VersionProbe)
    torch: TorchProbe = Field(default_factory=TorchProbe)
    cuda_runtime: VersionProbe = Field(default_factory=VersionProbe)
    env: dict[str, str] = Field(default_factory=dict)


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
    state: ServeState | None = None
    log_tail: tuple[str, ...] = ()
    url: str | None = None
    served_model: str | None = None


class ImageInfo(Record):
    ref: str | None = None
    id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class BuildInfo(Record):
    """A cell whose image did not build: the build's log, and its last lines."""

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
    result: JsonValue = Field(None, description="what the command left in HARNESS_OUT (logs/<cell-key>.cross-check."
                              "json), as it wrote it: its own shape; None when it left no JSON there")


class LevelRatio(Record):
    """NVFP4 against FP8 at one concurrency level both cells measured."""

    concurrency: int
    metric: Literal["per_stream", "aggregate"] = Field(description="per-stream decode at c=1, aggregate above")
    nvfp4_tok_s: float = Field(description="median of the NVFP4 cell's repeats")
    fp8_tok_s: float = Field(description="median of the FP8 cell's repeats")
    ratio: float = Field(description="nvfp4_tok_s / fp8_tok_s")
    band: float = Field(description="the noise band the difference had to clear: the floor, or either "
                        "side's spread over its repeats if larger")
    kind: Literal["gain", "loss", "noise"] = Field(
        description="against min_ratio x FP8: loss (below it beyond the band), noise, or gain")


class FormatComparison(Record):
    """The judge's NVFP4-vs-FP8 comparison of one pair of cells, as figures: what report and
    compare show, so that none of them parses the verdict's message."""

    nvfp4: str = Field(description="the NVFP4 cell id")
    fp8: str = Field(description="the FP8 cell id it was judged against")
    min_ratio: float
    noise_floor: float
    levels: tuple[LevelRatio, ...]
    deciding: int = Field(description="the concurrency that decided: the first loss, else the lowest ratio")

    @property
    def deciding_level(self) -> LevelRatio:
        return next(lv for lv in self.levels if lv.concurrency == self.deciding)

    @property
    def lost(self) -> bool:
        return any(lv.kind == "loss" for lv in self.levels)

    def level(self, concurrency: int) -> LevelRatio | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)


class FormatVerdict(Verdict):
    """The `expect.nvfp4_over_fp8` verdict, with the comparison it rests on."""

    comparison: FormatComparison


# A stored verdict with a `comparison` is the judge's format verdict; every other one a Verdict.
AnyVerdict = FormatVerdict | Verdict


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
    verdicts: tuple[AnyVerdict, ...] = ()
    compare_with: str | None = Field(default=None, description="NVFP4 cells: the FP8 cell id it is "
                                     "judged against (the matrix's family / compare_with), or none")
    requested: Requested = Field(default_factory=Requested)
    model_info: ModelInfo = Field(default_factory=ModelInfo)
    fingerprint: Fingerprint | None = None
    bench: BenchRecord | None = None
    image: ImageInfo | None = None
    image_fingerprint: ImageProbe | None = None
    build_record: str | None = Field(default=None, description="the build it served from: its file under the "
                                     "run folder (builds/<stack>.json, builds/<stack>@<host>.json), which holds "
                                     "the image's audit; None: it had no build, or was written before format 4")
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
    def format_comparison(self) -> FormatComparison | None:
        """The judge's NVFP4-vs-FP8 comparison on this cell, when it made one."""
        v = self.verdict(FORMAT_CHECK)
        return v.comparison if isinstance(v, FormatVerdict) else None

    @property
    def decode_c1(self) -> float | None:
        return self.bench.per_stream(1) if self.bench else None

    @classmethod
    def from_json(cls, data: Any) -> CellResult:
        """A v4 record, or an older one lifted to v4. Raises ValueError on anything else."""
        if not isinstance(data, dict):
            raise ValueError(f"a cell record is a JSON object, not {type(data).__name__}")
        fmt = Stored.model_validate(data).format
        if fmt not in READABLE_FORMATS:
            raise ValueError(f"results format {fmt!r}; this tool reads formats {READABLE_FORMATS}")
        if fmt == 1:
            try:
                data = _lift_v1(data)
            except (TypeError, AttributeError, KeyError) as exc:  # a v1 field of the wrong type
                raise ValueError(f"a v1 cell record with a field of the wrong type ({exc})") from None
        else:
            data = {k: v for k, v in data.items() if k != "reasons"}
        if fmt < 3:
            data = _lift_v2(data)
        if fmt < 4:
            data = _lift_v3(data)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ValueError(first_errors(exc)) from None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Stored(Open):
    """Any stored record, read only for the format it says it is in (1 when it says none)."""

    format: StrictInt = 1


class _V1Verdict(Open):
    """The parts of a v1 verdict the v1 lift reads."""

    status: Annotated[str | None, kept(str)] = None
    message: Annotated[str | None, kept(str)] = None


class _V1Build(Open):
    """The parts of a v1 cell's build entry that v2 kept."""

    log: Annotated[str | None, kept(str)] = None
    log_tail: Annotated[list[JsonValue] | None, kept(list)] = None


class _V1Cell(Open):
    """The parts of a v1 cell record the v1 lift reads, each kept when v1 wrote it with the type
    the lift uses."""

    reasons: Annotated[list[JsonValue] | None, kept(list)] = None
    verdicts: Annotated[list[JsonValue] | None, kept(list)] = None
    status: Annotated[str | None, kept(str)] = None
    durations: Annotated[dict[str, JsonValue] | None, kept(dict)] = None
    image: Annotated[dict[str, JsonValue] | None, kept(dict)] = None
    build: Annotated[dict[str, JsonValue] | None, kept(dict)] = None


def _v1_reason_check(status: str | None) -> str:
    """The check a v1 reason that no verdict carried becomes, by the cell's v1 status."""
    match status:
        case "build-failed":
            return "build"
        case "crashed" | "hung" | "timeout":
            return "serve.ready"
        case _:
            return "reason"


def _lift_v1(data: dict) -> dict:
    """v1 -> v2: reasons that no failed verdict carries become verdicts; keys renamed."""
    old = _V1Cell.model_validate(data)
    data = dict(data)
    data.pop("reasons", None)
    reasons = [str(r) for r in old.reasons or ()]
    verdicts = [dict(v) for v in old.verdicts or () if isinstance(v, dict)]
    said = {v.message for v in map(_V1Verdict.model_validate, verdicts) if v.status == "fail"}
    lifted = []
    for r in reasons:
        if r in said:
            continue
        lifted.append({"check": _v1_reason_check(old.status), "status": "fail", "message": r, "lines": []})
    data["verdicts"] = lifted + verdicts
    data["format"] = FORMAT
    if old.durations is not None:  # v1 readers took null figures
        data["durations"] = {k: v for k, v in old.durations.items() if v is not None}
    if old.image is not None and not any(old.image.values()):
        data["image"] = None
    if old.build is not None:
        build = _V1Build.model_validate(old.build)
        data["build"] = {"log": build.log, "log_tail": build.log_tail or []}
    return data


_NVFP4_IN_NAME = re.compile(r"(?<![A-Za-z0-9])nvfp4(?![A-Za-z0-9])", re.IGNORECASE)


class _V2Cell(Open):
    """The parts of a v1/v2 cell record the v2 lift reads, each kept when it is text."""

    model: Annotated[str | None, kept(str)] = None
    quantization: Annotated[str | None, kept(str)] = None
    stack: Annotated[str | None, kept(str)] = None
    config: Annotated[str | None, kept(str)] = None


def _lift_v2(data: dict) -> dict:
    """v1/v2 -> v3. v2 had no pairing in the record: its judge paired NVFP4 with FP8 by stack and
    config, its report by model name. A v2 NVFP4 cell is read as compared with the same name in
    FP8 (qwen3moe-nvfp4 with qwen3moe-fp8), the pairing every shipped v2 run meant; a name with
    no "nvfp4" in it is compared with nothing."""
    old = _V2Cell.model_validate(data)
    data = {**data, "format": FORMAT}
    model = old.model
    if old.quantization == "nvfp4" and model is not None and _NVFP4_IN_NAME.search(model):
        data["compare_with"] = f"{old.stack}/{_NVFP4_IN_NAME.sub('fp8', model)}/{old.config}"
    return data


def _lift_v3(data: dict) -> dict:
    """v1-v3 -> v4: a cell kept a copy of its build's audit; the build's record holds it now
    (every shipped cell's copy is its build's, tests/test_results_v3.py), so the copy is left."""
    return {**{k: v for k, v in data.items() if k != "audit"}, "format": FORMAT}


def first_errors(exc: ValidationError, n: int = 3) -> str:
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


class HardwareInfo(Open):
    """The matrix's [hardware] profile the run used (harness.matrix.model.Hardware, stored)."""

    cc: str | None = None
    bandwidth_gbs: float | None = None
    memory_gib: float | None = None
    unified_memory: bool | None = None
    description: str | None = None


class ExpectInfo(Open):
    """The matrix's [expect] table (harness.matrix.model.Expect); the judge validates it whole."""

    nvfp4_over_fp8_min_ratio: float | None = Field(None, description="absent: the run predates the rule")


class BenchInfo(Open):
    """The matrix's [bench] table (harness.matrix.model.Bench)."""

    noise_floor: float | None = None
    prefill: bool | None = None


class MatrixModelInfo(Open):
    """A [models] entry (harness.matrix.model.Model) as run.json keeps it (v1 runs wrote them;
    cells now carry model_info)."""

    active_params_b: float | None = None
    bytes_per_param: float | None = None


class MatrixInfo(Open):
    path: str | None = None
    sha256: str | None = None
    name: str | None = None
    hardware_name: str | None = None
    hardware: HardwareInfo = Field(default_factory=HardwareInfo)
    expect: ExpectInfo = Field(default_factory=ExpectInfo)
    bench: BenchInfo = Field(default_factory=BenchInfo)
    models: dict[str, MatrixModelInfo] = Field(default_factory=dict)

    @property
    def hardware_cc(self) -> str | None:
        return self.hardware.cc

    @property
    def min_ratio(self) -> float | None:
        return self.expect.nvfp4_over_fp8_min_ratio

    @property
    def ratio_recorded(self) -> bool:
        """False: run.json predates the rule, or dropped it."""
        return "nvfp4_over_fp8_min_ratio" in self.expect.model_fields_set

    @property
    def noise_floor(self) -> float | None:
        return self.bench.noise_floor


class EngineRecord(Open):
    """One [hosts] entry of a run over several, as the run found its engine (harness.run.executor)."""

    engine: str | None = Field(None, description="the engine's address, as it answered")
    version: str | None = None
    os: str | None = None
    runtimes: tuple[str, ...] = ()
    gpu_capable: bool | None = None
    hardware: str | None = Field(None, description="its [hardware] profile")
    gpus: tuple[str, ...] | Literal["all"] | None = None
    slots: int | None = None
    unreachable: str | None = Field(None, description="why it could not be used, when it could not")


class RunRecord(BaseModel):
    """run.json. Mutable on purpose: the store updates status and cells as the run goes."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    format: int = FORMAT
    run_id: str
    tool_version: str | None = None
    argv: list[str] = Field(default_factory=list)
    k: str | None = None
    matrix: MatrixInfo = Field(default_factory=MatrixInfo)
    host: HostFingerprint = Field(default_factory=HostFingerprint)
    cells: list[str] = Field(default_factory=list)
    status: RunStatus = RunStatus.RUNNING
    started_at: str | None = None
    finished_at: str | None = None
    controller: Controller | None = None
    note: str | None = Field(default=None, description="why a run stopped early, when it did")
    hosts: dict[str, EngineRecord] = Field(default_factory=dict, description="a run over several [hosts]: each engine")

    @classmethod
    def from_json(cls, data: Any) -> RunRecord:
        if not isinstance(data, dict):
            raise ValueError(f"run.json holds a JSON object, not {type(data).__name__}")
        fmt = Stored.model_validate(data).format
        if fmt not in READABLE_FORMATS:
            raise ValueError(f"results format {fmt!r}; this tool reads formats {READABLE_FORMATS}")
        try:
            return cls.model_validate({**data, "format": FORMAT})
        except ValidationError as exc:
            raise ValueError(first_errors(exc)) from None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
