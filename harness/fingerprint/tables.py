"""The two data files the fingerprint reads: known failure signatures and kernel names.

Both live in harness/data/ so that a new vLLM release means editing data, not code. They are
validated with pydantic when loaded (a typo names the file and the key) and then frozen.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.errors import ConfigError
from harness.fingerprint.causes import FailureClass

Severity = Literal["fatal", "warn"]
Phase = Literal[
    "load",
    "drafter-load",
    "compile",
    "profile",
    "autotune",
    "post-autotune",
    "cuda-graph-capture",
    "post-capture",
    "serving",
]
Op = Literal["fused-moe", "attention", "gemm", "sampler", "all-reduce"]
RequestKey = Literal["moe_backend", "linear_backend", "attention_backend"]
SignatureTracker = Literal["vllm", "flashinfer", "driver", "triton", "nvidia-container"]
_DATA = Path(__file__).resolve().parent.parent / "data"


class _SignatureSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Stable id, quoted in verdicts and allowed_signatures.")
    pattern: str = Field(description="Regex searched in each message line.")
    requires: list[str] = Field(
        default_factory=list, description="Regexes that must also match some line."
    )
    unless_after: str | None = Field(
        default=None, description="Regex that voids the hit when seen after it."
    )
    unless_any: str | None = Field(
        default=None, description="Regex that voids the hit when it matches any line of the log."
    )
    severity: Severity = Field(description="fatal fails a cell; warn only reports.")
    tracker: SignatureTracker = Field(
        description="Where the bug is tracked."
    )
    link: str = Field(description="Issue, release note or doc to read first.")
    meaning: str = Field(description="What it means and what to try.")
    failure_class: FailureClass | None = Field(
        default=None, description="The cause class a death explained by this signature gets."
    )
    refine: bool = Field(
        default=False,
        description="The signature names a shape, not a cause: the [[cause]] rules of "
        "failures.toml name the class from the root-cause line when one matches.",
    )
    min_hits: int = Field(
        default=1, ge=1, description="The pattern must match at least this many lines."
    )
    last_only: bool = Field(
        default=False, description="Only the last line the pattern matches counts."
    )
    on: Literal["line", "root-cause", "unclassified-death", "traceback-cut", "engine-died"] = Field(
        default="line",
        description="Where `pattern` is searched: every line, only the root-cause line, or "
        "nowhere: unclassified-death fires when the engine died of an exception no other fatal "
        "signature explains, traceback-cut when the log ends inside a traceback, engine-died "
        "when only a death line (no exception) shows the death.",
    )
    raised_only: bool = Field(
        default=False,
        description="Ignore lines logged at DEBUG/INFO/WARNING (a backend the auto-selection "
        "skipped is logged with the same words as a refused request).",
    )
    hung_only: bool = Field(
        default=False,
        description="Fires only when the run's quiet-period timer called the start hung: a log "
        "file alone cannot show a hang.",
    )
    unless_hung: bool = Field(
        default=False, description="Void when the run's quiet-period timer called the start hung."
    )
    phases: list[Phase] = Field(
        default_factory=list, description="The hit counts only in these phases (empty: any)."
    )
    not_phases: list[Phase] = Field(
        default_factory=list, description="The hit never counts in these phases."
    )
    ops: list[Op] = Field(
        default_factory=list,
        description="The operation around the hit (failures.toml [[op]]) must be one of these.",
    )
    not_ops: list[Op] = Field(
        default_factory=list, description="The operation around the hit must not be one of these."
    )
    asked_from: RequestKey | None = Field(
        default=None,
        description="For a refused request: the request key that names what was asked "
        "(a `(?P<asked>...)` group in the pattern is used when the log has no request).",
    )

    @field_validator("pattern", "unless_after", "unless_any")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            re.compile(value)
        return value

    @model_validator(mode="after")
    def _fatal_names_a_class(self) -> _SignatureSpec:
        # every death gets a cause class (docs/log-catalog.md, "Causes")
        if self.severity == "fatal" and self.failure_class is None:
            raise ValueError(f"{self.id}: a fatal signature needs a failure_class")
        return self


class _SignatureFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    signature: list[_SignatureSpec] = Field(
        description="Known failure signatures, in display order."
    )


class _MoeTables(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nvfp4: dict[str, list[str]] = Field(description="--moe-backend value -> NvFp4 oracle names.")
    fp8: dict[str, list[str]] = Field(description="--moe-backend value -> Fp8 oracle names.")
    env_backend: dict[str, str] = Field(
        description="VLLM_FLASHINFER_MOE_BACKEND value -> flag value."
    )
    aliases: dict[str, list[str]] = Field(description="Request names that accept several backends.")
    display_names: dict[str, str] = Field(
        default_factory=dict,
        description="Name a refusal prints (not the enum) -> the --moe-backend value.",
    )
    legacy_messages: dict[str, str] = Field(
        default_factory=dict,
        description="Regex of an older MoE selection message -> the backend name it means.",
    )

    @field_validator("legacy_messages")
    @classmethod
    def _legacy_compiles(cls, value: dict[str, str]) -> dict[str, str]:
        for rx in value:
            re.compile(rx)
        return value


class _LinearTables(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kernels: dict[str, list[str]] = Field(
        description="--linear-backend value -> kernel class names."
    )
    env_backend: dict[str, str] = Field(description="VLLM_NVFP4_GEMM_BACKEND value -> flag value.")


class _AttentionTables(BaseModel):
    model_config = ConfigDict(extra="forbid")
    legacy_names: dict[str, str] = Field(description="0.11-era prose name -> enum name.")


class _AutotunerTables(BaseModel):
    model_config = ConfigDict(extra="forbid")
    runner_ops: dict[str, str] = Field(
        default_factory=dict,
        description="Regex of a FlashInfer runner as a per-tactic line prints it -> the op it tunes.",
    )

    @field_validator("runner_ops")
    @classmethod
    def _runner_compiles(cls, value: dict[str, str]) -> dict[str, str]:
        for rx in value:
            re.compile(rx)
        return value


class _KernelNameFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    moe: _MoeTables
    linear: _LinearTables
    attention: _AttentionTables
    autotuner: _AutotunerTables = Field(default_factory=_AutotunerTables)


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: re.Pattern[str]
    requires: tuple[re.Pattern[str], ...]
    unless_after: re.Pattern[str] | None
    severity: Severity
    tracker: SignatureTracker
    link: str
    meaning: str
    failure_class: FailureClass | None = None
    on: str = "line"
    raised_only: bool = False
    phases: frozenset[str] = frozenset()
    not_phases: frozenset[str] = frozenset()
    ops: frozenset[str] = frozenset()
    not_ops: frozenset[str] = frozenset()
    asked_from: str | None = None
    unless_any: re.Pattern[str] | None = None
    hung_only: bool = False
    unless_hung: bool = False
    refine: bool = False
    min_hits: int = 1
    last_only: bool = False


@dataclass(frozen=True)
class KernelNames:
    """Requested backend -> names the log prints when that backend really ran."""

    moe_nvfp4: dict[str, frozenset[str]]
    moe_fp8: dict[str, frozenset[str]]
    moe_env_backend: dict[str, str]
    moe_aliases: dict[str, frozenset[str]]
    linear: dict[str, frozenset[str]]
    linear_env_backend: dict[str, str]
    attention_legacy: dict[str, str]
    moe_legacy: tuple[tuple[re.Pattern[str], str], ...] = ()
    moe_display: tuple[tuple[str, str], ...] = ()
    autotuner_runner_ops: tuple[tuple[re.Pattern[str], str], ...] = ()

    def runner_op(self, runner: str) -> str | None:
        """The op a FlashInfer runner (as a per-tactic autotuner line prints it) tunes."""
        return next((op for rx, op in self.autotuner_runner_ops if rx.search(runner)), None)

    def moe_flag(self, backend: str) -> str | None:
        """The `--moe-backend` value whose table lists `backend` (reverse lookup)."""
        for table in (self.moe_nvfp4, self.moe_fp8):
            for flag, names in table.items():
                if backend in names:
                    return flag
        return None

    def moe_expected(self, requested: str, quant: str | None) -> frozenset[str] | None:
        """Log names that honour `--moe-backend requested`; None when the table lacks it."""
        key = requested.lower().replace("-", "_")
        if key in self.moe_aliases:
            return self.moe_aliases[key]
        match quant:  # the quantization the MoE line names; any other: either table
            case "nvfp4":
                tables = [self.moe_nvfp4]
            case "fp8":
                tables = [self.moe_fp8]
            case _:
                tables = [self.moe_nvfp4, self.moe_fp8]
        found = [t[key] for t in tables if key in t]
        return frozenset().union(*found) if found else None

    def linear_expected(self, requested: str) -> frozenset[str] | None:
        return self.linear.get(requested.lower().replace("-", "_"))


def _read(name: str) -> dict:
    path = _DATA / name
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"harness/data/{name}: cannot read it ({exc})",
            hint="restore it from git (`git checkout -- harness/data/" + name + "`)",
        ) from exc


def _invalid(name: str, exc: ValidationError) -> ConfigError:
    where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    return ConfigError(
        f"harness/data/{name}: {where}",
        hint="fix that key; see the comments at the top of the file",
    )


@cache
def signatures() -> tuple[Signature, ...]:
    try:
        spec = _SignatureFile.model_validate(_read("signatures.toml"))
    except ValidationError as exc:
        raise _invalid("signatures.toml", exc) from exc
    return tuple(
        Signature(
            id=s.id,
            pattern=re.compile(s.pattern),
            requires=tuple(re.compile(r) for r in s.requires),
            unless_after=re.compile(s.unless_after) if s.unless_after else None,
            severity=s.severity,
            tracker=s.tracker,
            link=s.link,
            meaning=" ".join(s.meaning.split()),
            failure_class=s.failure_class,
            on=s.on,
            raised_only=s.raised_only,
            phases=frozenset(s.phases),
            not_phases=frozenset(s.not_phases),
            ops=frozenset(s.ops),
            not_ops=frozenset(s.not_ops),
            asked_from=s.asked_from,
            unless_any=re.compile(s.unless_any) if s.unless_any else None,
            hung_only=s.hung_only,
            unless_hung=s.unless_hung,
            refine=s.refine,
            min_hits=s.min_hits,
            last_only=s.last_only,
        )
        for s in spec.signature
    )


def load_signatures() -> dict[str, Signature]:
    """The signature table by id, in file order (bug reports look up tracker, link, meaning)."""
    return {s.id: s for s in signatures()}


@cache
def kernel_names() -> KernelNames:
    try:
        spec = _KernelNameFile.model_validate(_read("kernel_names.toml"))
    except ValidationError as exc:
        raise _invalid("kernel_names.toml", exc) from exc

    def freeze(table: dict[str, list[str]]) -> dict[str, frozenset[str]]:
        return {k: frozenset(v) for k, v in table.items()}

    return KernelNames(
        moe_nvfp4=freeze(spec.moe.nvfp4),
        moe_fp8=freeze(spec.moe.fp8),
        moe_env_backend=dict(spec.moe.env_backend),
        moe_aliases=freeze(spec.moe.aliases),
        linear=freeze(spec.linear.kernels),
        linear_env_backend=dict(spec.linear.env_backend),
        attention_legacy=dict(spec.attention.legacy_names),
        moe_legacy=tuple((re.compile(rx), b) for rx, b in spec.moe.legacy_messages.items()),
        moe_display=tuple(spec.moe.display_names.items()),
        autotuner_runner_ops=tuple((re.compile(rx), op) for rx, op in spec.autotuner.runner_ops.items()),
    )
