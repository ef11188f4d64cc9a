"""schedule.json: which slot of which host held which cell, and when. Written by the executor
(harness.run.executor) in a run over listed [hosts], rewritten as each cell ends; read back by
the store (`RunStore.schedule`) for the tests and benchmarks/bench_scheduler.py."""

from __future__ import annotations

from pydantic import Field, TypeAdapter

from harness.record import Record


class ScheduleEntry(Record):
    """One cell served: where and when."""

    cell: str = Field(description="the cell id")
    host: str = Field(description="the [hosts] entry; a cell over several nodes: their names joined by +")
    slot: int = Field(description="the slot of that host")
    gpus: tuple[str, ...] | None = Field(description="the slot's GPU ids it was given; None: as the matrix says")
    start: float = Field(description="epoch seconds (time.time()), 3 decimals")
    end: float


SCHEDULE = TypeAdapter(tuple[ScheduleEntry, ...])


def schedule_json(entries: list[ScheduleEntry]) -> list[dict]:
    """The file's content: the entries in order of `start`."""
    return [e.model_dump(mode="json") for e in sorted(entries, key=lambda e: e.start)]
