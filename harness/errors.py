"""Every error the tool raises on purpose, and the exit code of each.

Only `harness.cli.main` turns these into a message and an exit code. Each message says what
went wrong and what to do next. The exit codes, the same for every command, are EXIT_CODES
below: `harness --help` prints them from it, and tests/test_docs_truth.py holds README's table
to it.
"""

from __future__ import annotations

# code -> what it means; every HarnessError's exit_code is one of these
EXIT_CODES: dict[int, str] = {
    0: "done, every verdict passed",
    1: "a verdict, build or comparison failed: the results say which",
    2: "bad input (matrix, flag, file, run directory): nothing was started",
    3: "this host cannot do it: no Docker engine, no GPU runtime, no disk space",
    130: "interrupted (Ctrl-C or SIGTERM): what finished is on disk",
}


class HarnessError(Exception):
    """Base class: a failure the user can act on."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"


class ConfigError(HarnessError):
    """Bad input: a matrix file, a flag, a path. Nothing was started."""

    exit_code = 2


class MatrixError(ConfigError):
    """One or more problems in a matrix file, each naming file, key path and fix."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{path}: {len(problems)} problem(s) in the matrix file:\n{lines}")


class EnvironmentProblem(HarnessError):
    """This host cannot do what was asked (no Docker engine, no GPU, no cuobjdump)."""

    exit_code = 3


class EngineError(EnvironmentProblem):
    """The Docker engine refused or failed an operation."""


class StorageError(EnvironmentProblem):
    """The results could not be written (disk full, read-only, removed under the run)."""

    def __init__(self, path, exc: OSError) -> None:
        why = exc.strerror or str(exc)
        super().__init__(
            f"{path}: cannot write the results ({why})",
            hint="free space or give --results another folder, then `harness run --resume "
            "<run dir>`: every cell written before this one is kept",
        )


class BuildFailed(HarnessError):
    """An image build failed; the log tail says where."""

    exit_code = 1

    def __init__(self, message: str, *, log_tail: list[str] | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.log_tail = log_tail or []


class PatchError(ConfigError):
    """A patch series does not apply to the pinned source."""


class CellsFailed(HarnessError):
    """The run finished, and at least one cell did not pass (the results say which)."""

    exit_code = 1


class Regression(HarnessError):
    """`harness compare` found a regression beyond noise."""

    exit_code = 1
