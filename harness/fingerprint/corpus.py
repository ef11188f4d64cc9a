"""Score the fingerprint against a corpus of real logs with hand-written expectations.

    python -m harness.fingerprint.corpus [DIR]     (default: tests/fixtures/logs/corpus)

Each `NNN-slug.log` has a sidecar `NNN-slug.toml` whose `[expect]` table holds the facts a
person checked by reading the log (schema: tests/fixtures/logs/corpus/README.md). Every key is
one asserted fact (each id of `signatures_absent` is one fact). Prints a per-log and a per-key
table, the total score (facts right / facts asserted) and every miss; exit 1 on any miss, 2 on
a bad corpus (a missing sidecar, an unknown key).
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rich.text import Text

from harness.console import out
from harness.errors import ConfigError
from harness.fingerprint.causes import LEGACY, FailureClass
from harness.fingerprint.model import Fingerprint
from harness.fingerprint.parse import fingerprint
from harness.fingerprint.tables import load_signatures
from harness.fingerprint.verdicts import cause_of
from harness.tables import Col, show

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "logs" / "corpus"
# `SpecDecoding metrics` print the rate with one decimal of a percent.
_RATE_TOLERANCE = 0.0006


class Expect(BaseModel):
    """Facts checked by hand; an absent key is not asserted."""

    model_config = ConfigDict(extra="forbid")
    vllm_version: str | None = Field(default=None, description="as the log prints it")
    moe_backend: str | None = Field(default=None, description="main model's MoE backend")
    linear_kernels: list[str] | None = Field(default=None, description="all main linear kernels")
    attention_backend: str | None = Field(default=None, description="upper-case enum name")
    cudagraph_mode: str | None = Field(default=None, description="final mode")
    kv_cache_tokens: int | None = Field(default=None, description="GPU KV cache size")
    max_concurrency: float | None = Field(default=None, description="Maximum concurrency (x)")
    graph_capture_s: float | None = Field(default=None, description="Graph capturing finished in")
    model_load_gib: float | None = Field(default=None, description="Model loading took (GiB)")
    moe_quant: str | None = Field(default=None, description="main model's MoE quantization")
    autotuner_skipped: dict[str, int] | None = Field(
        default=None, description="op -> count (0: the log gives that op no count)")
    drafter_moe_backend: str | None = Field(default=None, description="drafter's MoE backend")
    spec_method: str | None = Field(default=None, description="speculative method")
    num_speculative_tokens: int | None = Field(default=None, description="draft length")
    spec_acceptance_rate: float | None = Field(default=None, description="last metrics line")
    fatal: bool | None = Field(default=None, description="the engine died in this log")
    failure_class: FailureClass | None = Field(
        default=None, description="the cause class (docs/log-catalog.md, Causes)")
    root_cause: str | None = Field(default=None, description="substring of the root-cause line")
    asked: str | None = Field(default=None, description="refused request, lower-case")
    signatures_absent: list[str] | None = Field(default=None, description="ids that must not fire")
    failure_signature: str | None = Field(default=None, description="the failure's one name")
    signatures_present: list[str] | None = Field(default=None, description="ids that must fire")
    cause_in_excerpt: bool | None = Field(
        default=None, description="the log holds a line that names the cause of the death")
    cause_line: str | None = Field(
        default=None, description="substring of the evidence line the cause is shown with")
    fatal_ids: list[str] | None = Field(
        default=None,
        description="every fatal signature id this log supports: one that fires and is not "
        "listed contradicts the log (one fact)",
    )

    @field_validator("failure_class", mode="before")
    @classmethod
    def _older_class_names(cls, value: Any) -> Any:
        # a sidecar written before the cause vocabulary ("unclassified", "device-assert") is
        # scored against the class that name became; any other unknown value is a typo (exit 2)
        return LEGACY.get(value, value) if isinstance(value, str) else value


class Sidecar(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str = Field(description="where the log was read")
    title: str = Field(description="one line: what this log is")
    vllm_version: str = Field(default="", description="as far as the thread says")
    hardware: str = Field(default="", description="free text")
    format: str = Field(
        description="plain | json | compose | journald | nested | ray | library | k8s"
    )
    excerpt: bool = Field(default=False, description="a cut of a longer log")
    notes: str = Field(default="", description="what a reader should know")
    cause: str = Field(
        default="",
        description="the cause of a fatal log in words, written by hand after reading the log "
        "and before running the fingerprint ('not in this excerpt' when the log lacks it)",
    )
    expect: Expect = Field(default_factory=Expect, description="facts checked by hand")


@dataclass(frozen=True)
class Fact:
    log: str
    key: str
    expected: Any
    got: Any
    ok: bool


def _got(fp: Fingerprint, key: str) -> Any:
    if key == "autotuner_skipped":
        return dict(fp.autotuner_skipped)
    return getattr(fp, key)


def check(name: str, expect: Expect, fp: Fingerprint) -> list[Fact]:
    """One Fact per asserted key (one per id for `signatures_absent`)."""
    facts: list[Fact] = []
    known = load_signatures()
    for key, want in expect.model_dump(mode="json", exclude_none=True).items():
        if key == "signatures_absent":
            for sig in want:
                # An id the table does not have can never fire: that is a corpus mistake.
                ok = sig in known and sig not in fp.signatures
                state = "unknown id" if sig not in known else ("fired" if not ok else "absent")
                facts.append(Fact(name, f"signatures_absent:{sig}", "absent", state, ok))
            continue
        if key == "signatures_present":
            for sig in want:
                ok = sig in known and sig in fp.signatures
                state = "unknown id" if sig not in known else ("fired" if ok else "absent")
                facts.append(Fact(name, f"signatures_present:{sig}", "fired", state, ok))
            continue
        if key == "fatal_ids":
            fired = [s for s in fp.signatures if s in known and known[s].severity == "fatal"]
            extra = [s for s in fired if s not in want]
            ok = not extra and all(s in known for s in want)
            state = f"contradicting: {', '.join(extra)}" if extra else (
                "unknown id" if not ok else "consistent")
            facts.append(Fact(name, "fatal_ids", want, state, ok))
            continue
        if key in ("cause_in_excerpt", "cause_line"):
            facts.append(_cause_fact(name, key, want, fp))
            continue
        got = _got(fp, key)
        if key == "autotuner_skipped":
            # only the ops the expectation names are asserted (0: the log gives it no count)
            got = {op: dict(got).get(op, 0) for op in want}
            ok = all(got[op] == n for op, n in want.items())
        elif key == "linear_kernels":
            ok = sorted(want) == sorted(got)
            got = list(got)
        elif key == "root_cause":
            ok = got is not None and want in got
        elif key == "spec_acceptance_rate":
            ok = got is not None and abs(got - want) <= _RATE_TOLERANCE
        elif key == "asked":
            ok = got is not None and got.lower() == want.lower()
        else:
            ok = got == want
        if isinstance(got, FailureClass):  # shown as stored, like the sidecar's value
            got = got.value
        facts.append(Fact(name, key, want, got, ok))
    return facts


def _cause_fact(name: str, key: str, want: Any, fp: Fingerprint) -> Fact:
    """`cause_in_excerpt` (does the log hold the cause) or `cause_line` (a substring of the line
    the cause is shown with), as report, bug and `harness fingerprint` show them."""
    cause = cause_of(fp)
    if key == "cause_in_excerpt":
        shown = None if cause is None else cause.in_excerpt
        return Fact(name, key, want, shown, shown == want)
    line = None if cause is None else cause.line
    return Fact(name, key, want, line, line is not None and want in line)


def load(directory: Path) -> list[tuple[str, Sidecar, Path]]:
    logs = sorted(directory.glob("*.log"))
    if not logs:
        raise ConfigError(
            f"{directory}: no .log files", hint="pass the corpus folder (NNN-slug.log + .toml)"
        )
    out = []
    for log in logs:
        side = log.with_suffix(".toml")
        if not side.is_file():
            raise ConfigError(f"{side}: missing sidecar", hint="write the .toml next to the log")
        try:
            sidecar = Sidecar.model_validate(tomllib.loads(side.read_text(encoding="utf-8")))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{side}: not valid TOML ({exc})", hint="fix the syntax") from exc
        except ValidationError as exc:
            where = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(
                f"{side}: {where}", hint="keep to the keys of the corpus schema"
            ) from exc
        out.append((log.stem, sidecar, log))
    return out


def score(directory: Path) -> list[Fact]:
    facts: list[Fact] = []
    for name, sidecar, log in load(directory):
        text = log.read_text(encoding="utf-8", errors="replace")
        facts.extend(check(name, sidecar.expect, fingerprint(text)))
    return facts


def _render(facts: list[Fact], directory: Path) -> None:

    per_log: dict[str, list[Fact]] = {}
    per_key: dict[str, list[Fact]] = {}
    for f in facts:
        per_log.setdefault(f.log, []).append(f)
        per_key.setdefault(f.key.split(":")[0], []).append(f)


    rows = []
    for name, fs in per_log.items():
        missed = ", ".join(f.key for f in fs if not f.ok)
        rows.append([Text(name), Text(str(sum(f.ok for f in fs))), Text(str(len(fs))),
                     Text(missed or "-", style="red" if missed else "")])
    show(out, f"fingerprint corpus {directory}",
         [Col("log", whole=True), Col("right"), Col("asserted"), Col("missed")], rows)
    show(out, "per key", [Col("key", whole=True), Col("right"), Col("asserted")],
         [[Text(key), Text(str(sum(f.ok for f in fs))), Text(str(len(fs)))]
          for key, fs in sorted(per_key.items())])

    misses = [f for f in facts if not f.ok]
    for f in misses:
        out.print(
            Text(f"MISS {f.log} {f.key}: expected {f.expected!r}, got {f.got!r}", style="red")
        )
    right = sum(f.ok for f in facts)
    pct = 100 * right / len(facts) if facts else 0.0
    out.print(f"score: {right}/{len(facts)} facts right ({pct:.1f} %), {len(per_log)} logs")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: python -m harness.fingerprint.corpus [CORPUS_DIR]", file=sys.stderr)
        return 2
    directory = Path(args[0]) if args else DEFAULT_DIR
    try:
        facts = score(directory)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    _render(facts, directory)
    return 0 if all(f.ok for f in facts) else 1


if __name__ == "__main__":
    sys.exit(main())
