"""The two kinds of record model every room types its stored records with.

`Record` is frozen and strict about its keys: what this version writes and reads whole. `Open` is
frozen and keeps the keys it does not know: a record another module, or a newer version, may have
written more into, which an older reader must neither lose nor refuse. They sit on the bottom
floor so that a producer on any floor types its record without importing a run's records.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Frozen, and strict about its own keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Open(BaseModel):
    """Frozen, keeps keys it does not know (written by another module, maybe newer)."""

    model_config = ConfigDict(frozen=True, extra="allow")
