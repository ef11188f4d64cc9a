"""cells/<key>.partial.json: what a running cell has measured so far."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from harness.record import Open


class PartialCell(Open):
    """cells/<key>.partial.json: what a running cell has measured so far, written as it goes
    (harness.run.cell), gone once the cell is written. Each part is kept as it was written and
    validated where it is used (`measured()` into the error cell, `server` by the reaper)."""

    id: str | None = None
    started_at: str | None = None
    host: str | None = None
    server: dict[str, Any] | None = Field(None, description="how to find the started server (serve.base.ServerRecord)")
    readiness: dict[str, Any] | None = None
    image_fingerprint: dict[str, Any] | None = None
    bench: dict[str, Any] | None = None
    cross_check: dict[str, Any] | None = None

    def measured(self) -> dict[str, Any]:
        """The measured parts, as CellResult fields of the same names: what a cell the tool
        failed on keeps."""
        return self.model_dump(mode="json", include={"bench", "image_fingerprint", "cross_check"}, exclude_none=True)

