"""Results that last: the run directory (store), memory trend (memwatch), `compare`, `bug`."""

from harness.results.memwatch import MemWatch, analyse
from harness.results.store import RunStore, atomic_write_json, atomic_write_text, new_run_id

__all__ = [
    "MemWatch",
    "RunStore",
    "analyse",
    "atomic_write_json",
    "atomic_write_text",
    "new_run_id",
]
