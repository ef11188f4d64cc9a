"""`harness run`: a session (open the store, build, hand the cells to the executor, finish), an
executor (hosts and slots), the cell (the stages in order), the schedule and the options.
Imports point one way: session -> executor / cell -> schedule / options -> stages and below."""
