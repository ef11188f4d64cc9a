"""cells/<key>.partial.json: what a running cell has measured so far, written as it goes by the
cell (harness.run.cell), gone once the cell is written; and how to find its server again, which
the reaper reads when the controller that started it is gone."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_serializer,
)

from harness.bench.result import BenchResult
from harness.record import Open, Record
from harness.results.model import CrossCheck, ImageProbe, ServeState


class ServerRecord(Open):
    """How to find a started server again: `server` in a partial cell. Written by the runner
    that started it (harness.serve: `Server.record()`), read by a later run (or the run's own
    interrupt handler) to stop what a dead controller left."""

    kind: Literal["local", "docker", "ray"] | str = Field(description="the runner that started it")
    pgid: int | None = Field(None, description="local: its process group (the server leads it)")
    started: int | None = Field(None, description="local: the leader's start time (ticks), against pid reuse")
    container: str | None = Field(None, description="docker: the container's name")
    containers: tuple[str, ...] = Field((), description="ray: the containers of the cluster")
    hosts: tuple[str, ...] = Field((), description="ray: the hosts they run on")

    @property
    def local_group(self) -> int | None:
        """The process group of a local server, the one thing a reaper kills by id."""
        return self.pgid if self.kind == "local" else None


class StartUp(Record):
    """How the wait for the server ended, and when."""

    state: ServeState
    startup_s: float


def _or_none(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A part this version cannot read is left out, the others kept: a partial record only ever
    adds to what a failed cell shows, and its server must stay findable."""
    try:
        return handler(value)
    except ValidationError:
        return None


class PartialCell(Open):
    """What a running cell has measured so far. Each part is set as it is measured (`with_part`)
    and written whole each time; fields never set are not written."""

    id: str
    started_at: str | None = None
    server: Annotated[ServerRecord | None, WrapValidator(_or_none)] = None
    readiness: Annotated[StartUp | None, WrapValidator(_or_none)] = None
    image_fingerprint: Annotated[ImageProbe | None, WrapValidator(_or_none)] = None
    bench: Annotated[BenchResult | None, WrapValidator(_or_none)] = None
    cross_check: Annotated[CrossCheck | None, WrapValidator(_or_none)] = None
    host: str | None = Field(None, description="the [hosts] entry it runs on, in a run over several")

    @field_serializer("server")
    def _server(self, server: ServerRecord | None) -> dict[str, Any] | None:
        # only what the runner set: a local server's record says nothing of containers
        return server.model_dump(mode="json", exclude_defaults=True) if server is not None else None

    def with_part(self, **parts: ServerRecord | StartUp | ImageProbe | BenchResult | CrossCheck | None) -> PartialCell:
        """This record with `parts` set (validated, as a reader will read them)."""
        return PartialCell.model_validate({**self.model_dump(exclude_unset=True), **parts})

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)

    def measured(self) -> dict[str, Any]:
        """The measured parts, as CellResult fields of the same names: what a cell the tool
        failed on keeps."""
        return {k: v for k in ("bench", "image_fingerprint", "cross_check") if (v := getattr(self, k)) is not None}
