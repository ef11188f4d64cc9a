"""The stages of `harness run`, in order: build -> serve (harness/serve/stage.py) -> measure ->
judge -> store.

Each module owns one stage and returns a typed outcome; the build runs once per host before the
cells (harness/run/executor.py), the others per cell in harness/run/cell.py, the only place
that knows their order.
"""
