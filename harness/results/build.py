"""builds/<stack>.json: what the build (or reuse, or local audit) of one stack on one host gave,
and what the compile cache did in it. Written by the build stage (harness.stages.build, through
harness.image.builder), read back by the store, the report and `harness bug`."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from harness.audit.report import AuditSummary
from harness.record import Open
from harness.results.model import first_errors


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


class _V1ImageRef(Open):
    """A v1 build's image: {ref, id}."""

    ref: Any = None
    id: Any = None


class _V1BuildImage(Open):
    """A build record read for its v1 `image` key (v2 and later write none)."""

    image: Any = None


class BuildOutcome(Open):
    """builds/<stack>.json (builds/<stack>@<host>.json in a run over several hosts): what the
    build (or reuse, or local audit) of one stack on one host gave."""

    stack: str
    host: str | None = Field(default=None, description="the [hosts] entry it was built on, in a run of several")
    status: str = Field(description="built | reused | failed | local | skipped")
    image_ref: str | None = None
    image_id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    log_path: str | None = None
    log_tail: tuple[str, ...] = ()
    duration_s: float = 0.0
    audit: AuditSummary | None = Field(None, description="the full report (a local stack)")
    audit_summary: AuditSummary | None = None
    arch_problems: tuple[str, ...] = ()
    reason: str | None = None
    compile_cache: CompileCache | None = None
    rust_frontend: str | None = Field(None, description="vLLM's optional Rust front end: built | not built (why) | "
                                      "none in this release; None: not recorded (a wheel stack, an older image)")

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def key(self) -> BuildKey:
        return (self.stack, self.host)

    @property
    def audit_record(self) -> AuditSummary | None:
        """The audit's full report where one was kept (a local stack), else its summary."""
        return self.audit or self.audit_summary

    @property
    def audit_status(self) -> str | None:
        """The arch audit's status; None when the stack was not audited."""
        return self.audit.status if self.audit and self.audit.status else (
            self.audit_summary.status if self.audit_summary else None)

    @classmethod
    def from_json(cls, data: Any, stack: str | None = None) -> BuildOutcome:
        if not isinstance(data, dict):
            raise ValueError(f"a build record is a JSON object, not {type(data).__name__}")
        data = {k: v for k, v in data.items() if v is not None or k in ("audit",)}
        data.setdefault("stack", stack or "?")
        if "host" not in data and isinstance(data["stack"], str) and "@" in data["stack"]:
            # v2 kept a multi-host build as stack "<stack>@<host>"
            data["stack"], data["host"] = data["stack"].split("@", 1)
        if isinstance(image := _V1BuildImage.model_validate(data).image, dict):
            # v1 wrote {ref, id} where v2 has image_ref / image_id
            ref = _V1ImageRef.model_validate(image)
            data.setdefault("image_ref", ref.ref)
            data.setdefault("image_id", ref.id)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ValueError(first_errors(exc)) from None
