"""`Fingerprint`: what one vLLM log proves, the one type for it in memory and in a run folder.

`fingerprint(text)` builds it once per log; the judge, the store, report, bug and compare read the
same class back from `cells/*.json`. The stored shape differs from the one the code works with in
two places, kept as it is so run folders written before stay readable and byte-identical:
`autotuner_skipped` is stored as `[{"op": ..., "count": ...}]` (in memory `(op, count)` pairs) and
`requested` as one object holding its `source` (in memory `requested` + `requested_source`). The
validator below takes either shape; the serializer writes the stored one, with the keys the
record was read with (a record read back and written again keeps its bytes).

Unknown keys are kept (`extra="allow"`): a newer writer may add facts, and an older reader must
neither lose them nor refuse the file. Records written before a field existed read as its default.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from harness.fingerprint.causes import FailureClass

# the sub-records are typed where they are produced: the request reader's mismatches, the failure
# reader's signature context
from harness.fingerprint.failure import SignatureContext
from harness.fingerprint.readers import Mismatch
from harness.record import kept


class _StoredSkip(BaseModel):
    """One stored `autotuner_skipped` entry: {"op": ..., "count": ...}, as written."""

    op: str
    count: int

    def pair(self) -> tuple[str, int]:
        return self.op, self.count


class _StoredParts(BaseModel):
    """The keys of a stored fingerprint whose stored shape differs from the in-memory one: the
    skips as stored objects or in-memory (op, count) pairs, `requested` with or without its
    `source`. A value of another type is left to the fields' own validation."""

    autotuner_skipped: Annotated[list[_StoredSkip | tuple[str, int]] | None, kept(list, tuple)] = None
    requested: Annotated[dict[str, JsonValue] | None, kept(dict)] = None


class Fingerprint(BaseModel):
    """What one vLLM log proves. Absent facts are None / empty, never guessed.

    Kernel facts are the main model's; a speculative-decoding drafter's own selections are in
    the `drafter_*` fields. Failure facts are set only when the log shows a death (`fatal`)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    # Field order is the key order of the stored JSON (cells written so far keep their bytes).
    moe_backend: str | None = None
    moe_quant: str | None = None
    linear_kernels: tuple[str, ...] = ()
    attention_backend: str | None = None
    cudagraph_mode: str | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    autotuner_skipped: tuple[tuple[str, int], ...] = Field(default=(), description="(op, count)")
    mismatches: tuple[Mismatch, ...] = ()
    signatures: tuple[str, ...] = ()
    vllm_version: str | None = None
    evidence: dict[str, str] = Field(default_factory=dict)
    # how the engine died, when it did (root cause = first exception that is not a wrapper)
    fatal: bool = False
    failure_class: FailureClass | None = Field(
        default=None, description="the cause class (harness/fingerprint/causes.py)")
    root_cause: str | None = None
    # speculative decoding: the drafter's own kernels and its acceptance
    drafter_moe_backend: str | None = None
    spec_method: str | None = None
    num_speculative_tokens: int | None = None
    spec_acceptance_rate: float | None = None
    spec_acceptance_per_position: tuple[float, ...] = ()
    # what the log says was asked for (non-default args, kernel config, env), and from where
    requested: dict[str, str | None] = Field(default_factory=dict)
    requested_source: str | None = Field(default=None, description="args | env | args+env")
    model_load_gib: float | None = None
    model_load_s: float | None = None
    graph_capture_s: float | None = None
    graph_capture_gib: float | None = None
    capture_started: bool = False
    linear_by_layer: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    drafter_moe_quant: str | None = None
    drafter_linear_kernels: tuple[str, ...] = ()
    drafter_attention_backend: str | None = None
    spec_mean_acceptance_length: float | None = None
    spec_acceptance_rate_all: float | None = None
    spec_metrics_lines: int = 0
    root_cause_line: int | None = None
    failure_phase: str | None = None
    failure_op: str | None = None
    asked: str | None = None
    signature_context: dict[str, SignatureContext] = Field(default_factory=dict)
    # The name every fatal log gets: the signature that explains it, else `exception:<Type>` of an
    # exception line that names a cause, else `traceback-cut` (the log ends inside a traceback and
    # holds no such line), else `exception:<Type>` of a wrapper, else `engine-died` (only a death
    # line shows it). docs/log-catalog.md, "Fatal logs always get a name".
    failure_signature: str | None = None

    @field_validator("failure_class", mode="before")
    @classmethod
    def _class_of_any_release(cls, value: Any) -> FailureClass | None:
        # records written before the cause vocabulary carry its older names ("unclassified")
        return FailureClass.read(value)

    @model_validator(mode="before")
    @classmethod
    def _from_stored(cls, data: Any) -> Any:
        """The stored shape (see the module docstring) lifted to the in-memory one."""
        if not isinstance(data, dict):
            return data
        stored = _StoredParts.model_validate(data)
        skipped, requested = stored.autotuner_skipped, stored.requested
        if skipped is None or not any(isinstance(s, _StoredSkip) for s in skipped):
            skipped = None
        if skipped is None and not (requested is not None and "source" in requested):
            return data
        data = dict(data)
        if skipped is not None:
            data["autotuner_skipped"] = [s.pair() if isinstance(s, _StoredSkip) else s for s in skipped]
        if requested is not None and "source" in requested:
            requested = dict(requested)
            source = requested.pop("source")
            data["requested"] = requested
            data.setdefault("requested_source", source)
        return data

    @model_serializer(mode="wrap")
    def _to_stored(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        # A record read back writes the keys it was read with, not the defaults of fields its
        # writer did not know yet; `fingerprint(text)` sets every field.
        unset = type(self).model_fields.keys() - self.model_fields_set
        if "requested" in self.model_fields_set:
            unset.discard("requested_source")
        for key in unset:
            out.pop(key, None)
        if "autotuner_skipped" in out:
            out["autotuner_skipped"] = [
                {"op": op, "count": n} for op, n in self.autotuner_skipped
            ]
        if "requested" in out:
            asked = dict.fromkeys(("moe_backend", "linear_backend", "attention_backend"))
            out["requested"] = {**asked, **self.requested, "source": self.requested_source}
        out.pop("requested_source", None)
        return out

    def proof(self, *facts: str) -> tuple[str, ...]:
        """The log lines that prove these facts (`evidence` keys: `moe_backend`, `requested`,
        `signature:<id>`, ...), in order; a fact the log gave no line for is left out."""
        return tuple(line for fact in facts if (line := self.evidence.get(fact)))

    def to_json(self) -> dict[str, Any]:
        """The stored shape (`cells/*.json` "fingerprint", `harness fingerprint --json`)."""
        return self.model_dump(mode="json")
