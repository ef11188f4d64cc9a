"""The fingerprint against every message the C++ / CUDA side of vLLM and FlashInfer can put in a
log: tests/fixtures/upstream/cpp/<project>.json, read from the csrc/ (and FlashInfer include/)
trees of every release's sdist by tools/vllm_log_catalog.py (harness/fingerprint/upstream_cpp.py).

A raised message (TORCH_CHECK*, FLASHINFER_CHECK/ERROR, TLLM_*, TVM_FFI_*, `throw`) reaches the
log as a Python exception: rendered with sample values as a bare `Type: message` line (a C++
error as it reaches the log, no traceback around it) and as the last line of a traceback behind
the prefixes of several eras, it must make the log fatal with a name, or be listed in
cpp/ignored.toml with the reason. A printed message (printf/fprintf) is a line of its own: inside
a healthy start-up it must not make the log fatal unless it names an error a fatal signature knows.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from support.upstream_render import VARIANTS, eras, render

from harness.fingerprint.parse import fingerprint
from harness.fingerprint.tables import signatures

CPP = Path(__file__).parent / "fixtures" / "upstream" / "cpp"
PY = Path(__file__).parent / "fixtures" / "upstream"


@dataclass(frozen=True)
class Entry:
    project: str
    kind: str
    exception: str
    template: str
    fields: tuple[str, ...]
    at: str


@cache
def doc(project: str) -> dict:
    return json.loads((CPP / f"{project}.json").read_text(encoding="utf-8"))


@cache
def catalog() -> tuple[Entry, ...]:
    return tuple(
        Entry(project, m["kind"], m["exception"], m["template"], tuple(m["fields"]), m["at"])
        for project in ("vllm", "flashinfer-python") for m in doc(project)["messages"]
    )


@cache
def ignored() -> tuple[dict, ...]:
    rows = []
    for row in tomllib.loads((CPP / "ignored.toml").read_text(encoding="utf-8")).get("ignore", []):
        assert set(row) <= {"match", "kind", "reason"}, row
        assert row.get("reason", "").strip(), f"ignore entry without a reason: {row}"
        rows.append({**row, "rx": re.compile(row["match"])})
    return tuple(rows)


def ignore_row(e: Entry) -> dict | None:
    return next((r for r in ignored() if r.get("kind") in (None, e.kind) and r["rx"].search(e.template)), None)


def _named(text: str) -> bool:
    fp = fingerprint(text)
    return fp.fatal and fp.failure_signature is not None and bool(fp.signatures)


@cache
def raised_is_named(e: Entry) -> bool:
    for variant in range(VARIANTS):
        message = render(e.template, list(e.fields), variant)
        forms = [text for _, text in eras(message, "RAISE", e.at.split()[-1])]
        forms = [f.replace("RuntimeError", e.exception or "RuntimeError") for f in forms]
        if "\n" not in message:  # no traceback around it, as a C++ error reaches the log
            forms.append(f"{e.exception or 'RuntimeError'}: {message}")
            forms.append(f"(EngineCore_DP0 pid=12) {e.exception or 'RuntimeError'}: {message}")
        if all(_named(f) for f in forms):
            return True
    return False


HEALTHY = (
    "(APIServer pid=1) INFO 12-01 10:00:00 [api_server.py:1] vLLM API server version 0.33.0\n"
    "(EngineCore_DP0 pid=7) INFO 12-01 10:00:01 [gpu_model_runner.py:1] Starting to load model /m...\n"
    "{line}\n"
    "(EngineCore_DP0 pid=7) INFO 12-01 10:00:09 [gpu_model_runner.py:2] Model loading took 1.5 GiB memory and 8.0 seconds\n"
    "(APIServer pid=1) INFO 12-01 10:00:20 [launcher.py:1] Application startup complete.\n"
)


@cache
def fatal_patterns() -> tuple[re.Pattern[str], ...]:
    return tuple(s.pattern for s in signatures() if s.severity == "fatal" and s.on == "line")


def printed_is_harmless(e: Entry) -> bool:
    message = render(e.template, list(e.fields), 0)
    for proc in ("", "(EngineCore_DP0 pid=7) "):
        text = HEALTHY.format(line="\n".join(proc + x for x in message.split("\n")))
        if fingerprint(text).fatal and not any(p.search(message) for p in fatal_patterns()):
            return False
    return True


def test_the_cpp_catalog_covers_every_release_of_the_python_catalog():
    for project in ("vllm", "flashinfer-python"):
        python = {p.stem.removeprefix(f"{project}-") for p in PY.glob(f"{project}-*.json")}
        assert python <= set(doc(project)["releases"]), project
    assert len([e for e in catalog() if e.project == "vllm"]) > 800
    assert len([e for e in catalog() if e.project == "flashinfer-python"]) > 3000
    calls = {c.split(":", 1)[1] for p in ("vllm", "flashinfer-python")
             for r in doc(p)["releases"].values() for c in r["counts"] if c.startswith("call:")}
    assert {"TORCH_CHECK", "TORCH_CHECK_NOT_IMPLEMENTED", "FLASHINFER_CHECK", "TLLM_CHECK_WITH_INFO",
            "printf", "fprintf"} <= calls
    assert any(c.startswith("throw ") for c in calls)


# About 80,000 fingerprints (every raised message, in every era's form): in shards, which
# pytest-xdist hands to several workers (tests/support/workers.py SPREAD)
SHARDS = 4


@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_raised_cpp_message_is_a_named_failure_or_ignored_with_a_reason(shard):
    mine = catalog()[shard::SHARDS]
    missing = [e for e in mine if e.kind == "raise" and ignore_row(e) is None and not raised_is_named(e)]
    assert not missing, "\n".join(f"{e.exception} {e.template!r} ({e.at})" for e in missing[:40]) + \
        f"\n... {len(missing)} in all"


def test_no_printed_cpp_message_makes_a_healthy_log_fatal():
    bad = [e for e in catalog() if e.kind == "print" and ignore_row(e) is None and not printed_is_harmless(e)]
    assert not bad, "\n".join(f"{e.template!r} ({e.at})" for e in bad[:40]) + f"\n... {len(bad)} in all"


def test_no_cpp_ignore_entry_is_stale():
    # only an entry an ignore row matches can use it: the others are not judged again here
    used = {id(row) for e in catalog() if (row := ignore_row(e)) is not None
            and ((e.kind == "raise" and not raised_is_named(e)) or (e.kind == "print" and not printed_is_harmless(e)))}
    stale = [r["match"] for r in ignored() if id(r) not in used]
    assert not stale, stale
