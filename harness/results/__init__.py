"""Results that last: the run directory (store), memory trend (memwatch), `compare`, `bug`."""
