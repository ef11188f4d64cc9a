"""`fingerprint(text)`: what vLLM really did, read from its own log.

A pure function of the text: no files, no clock, no environment. Every fact it reports keeps the
log line that proved it (`evidence`), so a verdict or a bug report can quote it.

The log is walked once; each line that carries one of the readers' words goes to every line
reader of readers.py (kernels, drafter, CUDA graphs, KV cache, load, autotuner, request, spec
decode), each filling its own sub-model. The failure reader (failure.py `read_failure`) reads the
whole log at the end (signatures, death, root cause: harness/data/failures.toml, signatures.toml).
The `Fingerprint` is the union of the sub-models' fields.
"""

from __future__ import annotations

import re
from functools import cache

from harness.fingerprint.failure import read_failure
from harness.fingerprint.lines import split_lines
from harness.fingerprint.model import Fingerprint
from harness.fingerprint.readers import (
    AutotunerReader,
    Context,
    DrafterReader,
    GraphReader,
    KernelReader,
    KVCacheReader,
    LoadReader,
    Reader,
    RequestReader,
    SpecDecodeReader,
)
from harness.fingerprint.tables import kernel_names

# DrafterReader first: it tells the others whether the line belongs to a drafter.
_LINE_READERS: tuple[type[Reader], ...] = (
    DrafterReader, KernelReader, GraphReader, KVCacheReader, LoadReader, AutotunerReader,
    RequestReader, SpecDecodeReader,
)


@cache
def _words() -> tuple[re.Pattern[str], tuple[str, ...]]:
    """The word filter: a line no reader has a word for is skipped (most of a long log is
    request and progress lines). Plain literals only: a branch that starts with a class makes
    `re` try it at every position, and this runs once per line."""
    words = dict.fromkeys(w for r in _LINE_READERS for w in r.words.split("|"))
    starts = tuple(dict.fromkeys(s for r in _LINE_READERS for s in r.raw_starts))
    return re.compile("|".join(words)), starts


def fingerprint(text: str, *, process_ended: bool = True, hung: bool = False) -> Fingerprint:
    """Read a vLLM log. `process_ended=False` when the server may still be running: then a log
    that stops during CUDA-graph capture says nothing yet. `hung=True` when the run's own
    quiet-period timer expired while the server was not ready: only then does a log that stops
    during capture read as a capture hang (a file alone reads as `ends-during-capture`)."""
    cx = Context(kernel_names())
    lines = split_lines(text)
    drafter, kernels, graphs, kv = DrafterReader(), KernelReader(), GraphReader(), KVCacheReader()
    load, autotuner, request, spec = LoadReader(), AutotunerReader(), RequestReader(), SpecDecodeReader()
    readers: tuple[Reader, ...] = (drafter, kernels, graphs, kv, load, autotuner, request, spec)  # _LINE_READERS
    interesting, raw_starts = _words()
    for ln in lines:
        msg = ln.message
        if not interesting.search(msg) and not ln.raw.startswith(raw_starts):
            continue
        for reader in readers:
            reader.read(ln, msg, cx)
    main = kernels.facts()
    asked = request.facts_for(main, cx.names)
    failure = read_failure(lines, asked.requested, cx, process_ended, hung)
    return Fingerprint(
        **dict(main), **dict(drafter.facts()), **dict(graphs.facts()), **dict(kv.facts()),
        **dict(load.facts()), **dict(autotuner.facts()), **dict(asked), **dict(spec.facts()),
        **dict(failure), evidence=cx.evidence,
    )
