"""The two kinds of record model every room types its stored records with.

`Record` is frozen and strict about its keys: what this version writes and reads whole. `Open` is
frozen and keeps the keys it does not know: a record another module, or a newer version, may have
written more into, which an older reader must neither lose nor refuse. They sit on the bottom
floor so that a producer on any floor types its record without importing a run's records.
`kept` types the fields of a view over data written elsewhere: the value when it has the type
the reader uses, else nothing.
"""

from __future__ import annotations

from pydantic import BaseModel, BeforeValidator, ConfigDict


class Record(BaseModel):
    """Frozen, and strict about its own keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Open(BaseModel):
    """Frozen, keeps keys it does not know (written by another module, maybe newer)."""

    model_config = ConfigDict(frozen=True, extra="allow")


def kept(*types: type) -> BeforeValidator:
    """A field of a view over data written elsewhere (a log, a record of an older version): its
    value when it is one of `types`, else None, never a refusal of the whole record. A bool is
    kept only where `bool` is named (JSON's true is no count)."""

    def keep(value: object) -> object:
        if isinstance(value, bool) and bool not in types:
            return None
        return value if isinstance(value, types) else None

    return BeforeValidator(keep)


# what a person or another program may write as one value: text, a number, a flag
Scalar = str | int | float | bool
