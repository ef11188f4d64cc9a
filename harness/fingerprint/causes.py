"""The cause vocabulary of a failure (`Fingerprint.failure_class`) and the rules that name it.

One fixed list of classes, each with the words a report shows (docs/log-catalog.md, "Causes").
A fatal log gets the most specific class its lines support: the class of the table signature that
explains the death (harness/data/signatures.toml), else the first `[[cause]]` rule of
harness/data/failures.toml whose pattern the root-cause line matches, else `secondary` when only a
secondary message shows the death (EngineDeadError, "See root cause above", "died unexpectedly",
a wrapper exception), else `other`.

Records written before this vocabulary carry its older names; `FailureClass.read` maps them.
"""

from __future__ import annotations

from enum import StrEnum


class FailureClass(StrEnum):
    """Why the engine died, as a class. The value is what a record stores."""

    OOM = "oom"
    KV_CACHE = "kv-cache-too-small"
    ILLEGAL_MEMORY_ACCESS = "illegal-memory-access"
    ILLEGAL_INSTRUCTION = "illegal-instruction"
    UNSUPPORTED_ARCH = "unsupported-arch"
    CUDA_GRAPH = "cuda-graph-capture"
    JIT_COMPILE = "jit-compile"
    KERNEL_CONFIG = "kernel-config-unsupported"
    BACKEND = "backend-refused"
    DISTRIBUTED = "distributed"
    TIMEOUT = "timeout"
    CONFIG = "config"
    IMPORT = "import-error"
    MODEL_LOAD = "model-load"
    SECONDARY = "secondary"
    OTHER = "other"

    @property
    def words(self) -> str:
        return WORDS[self]

    @classmethod
    def read(cls, value: object) -> FailureClass | None:
        """A stored class: a current value, an older name (records written before this list),
        or None. A value no release wrote reads as OTHER rather than making the record
        unreadable."""
        if value is None or isinstance(value, cls):
            return value
        text = str(value)
        if text in cls._value2member_map_:
            return cls(text)
        return LEGACY.get(text, cls.OTHER)


# What a report, `harness bug` and `harness fingerprint` say for each class.
WORDS: dict[FailureClass, str] = {
    FailureClass.OOM: "out of memory",
    FailureClass.KV_CACHE: "KV cache too small",
    FailureClass.ILLEGAL_MEMORY_ACCESS: "illegal memory access",
    FailureClass.ILLEGAL_INSTRUCTION: "illegal instruction",
    FailureClass.UNSUPPORTED_ARCH: "no kernel image / arch",
    FailureClass.CUDA_GRAPH: "CUDA-graph capture",
    FailureClass.JIT_COMPILE: "JIT compile failed",
    FailureClass.KERNEL_CONFIG: "kernel config unsupported",
    FailureClass.BACKEND: "backend unsupported",
    FailureClass.DISTRIBUTED: "distributed / NCCL",
    FailureClass.TIMEOUT: "timeout / stall",
    FailureClass.CONFIG: "config or argument",
    FailureClass.IMPORT: "import / install",
    FailureClass.MODEL_LOAD: "model load",
    FailureClass.SECONDARY: "secondary engine death",
    FailureClass.OTHER: "other",
}

# The names records carried before this vocabulary (results written by earlier harness releases).
# `device-assert` has no class of its own: a device-side assert is named by its signature
# (`cuda-device-assert`), its class is `other`.
LEGACY: dict[str, FailureClass] = {
    "unclassified": FailureClass.OTHER,
    "cuda-graph-hang": FailureClass.CUDA_GRAPH,
    "driver-tma": FailureClass.ILLEGAL_MEMORY_ACCESS,
    "device-assert": FailureClass.OTHER,
}

# The classes that say the cause is not in the log: only the death shows.
NOT_IN_EXCERPT = frozenset({FailureClass.SECONDARY})
