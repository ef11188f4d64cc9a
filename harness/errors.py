"""Every error the tool raises on purpose, one class per exit code.

Only `harness.cli.main` turns these into a message and an exit code. Each message says
what went wrong and what to do next.
"""

from __future__ import annotations


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


class EngineError(HarnessError):
    """The Docker engine refused or failed an operation."""

    exit_code = 4


class BuildFailed(HarnessError):
    """An image build failed; the log tail says where."""

    exit_code = 5

    def __init__(self, message: str, *, log_tail: list[str] | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.log_tail = log_tail or []


class PatchError(ConfigError):
    """A patch series does not apply to the pinned source."""


class NotBuiltYet(HarnessError):
    """A pipeline stage that this version of the tool does not implement."""

    exit_code = 6


class CellsFailed(HarnessError):
    """The run finished, and at least one cell did not pass (the results say which)."""

    exit_code = 1


class Regression(HarnessError):
    """`harness compare` found a regression beyond noise."""

    exit_code = 1
