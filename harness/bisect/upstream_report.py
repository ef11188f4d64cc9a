"""`harness bug --bisect DIR` and `harness bug --configure RECORD`: an upstream report about
what a vLLM build decides, from a bisect's folder or from configure records, not from a cell.

The facts come from the files the tools wrote (a bisect's bisect.json and result.json; a
configure record of tools/configure-targets.sh with its configure.log); what only a person can
say comes from a notes file (TOML, `Notes` below): the title, what was asked, the upstream
threads already found and whether they cover it, the suggested fix. The report is a pure
function of those files, so a committed report regenerates byte for byte from its evidence.
Paths are shown relative to the current directory (run it from the repository root).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.bisect.history import PYPI_JSON, HistorySpec
from harness.bisect.probes import Decision
from harness.bisect.report import markdown as bisect_markdown
from harness.bisect.store import BisectFile, BisectResult, BisectSpec
from harness.errors import ConfigError
from harness.record import Open
from harness.redact import redact_text
from harness.results.bug import TRACKERS
from harness.safety.paths import MiB
from harness.safety.paths import read_bytes as _read_bytes
from harness.safety.readers import load_json, load_toml
from harness.safety.roots import Root


class UpstreamRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    ref: str = Field(pattern=r"^[\w.-]+/[\w.-]+#[0-9]+$", description="owner/repo#number, as GitHub writes it")
    kind: Literal["issue", "pull request"] = Field(description="An issue or a pull request.")
    state: Literal["open", "closed", "merged"] = Field(description="Its state when it was read.")
    title: str = Field(description="Its title, as upstream wrote it.")
    says: str = Field(description="What it has to do with this report, in one or two sentences.")


class Notes(BaseModel):
    """What a person adds to the evidence: the parts of a report no file can say."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    title: str = Field(description="The report's title (one line).")
    tracker: str = Field(description=f"Where to file it: one of {', '.join(TRACKERS)}.")
    asked: str = Field(description="What was asked of the build (Markdown).")
    cost: str = Field("", description="What it costs, measured (Markdown); empty: not said.")
    known: Literal["yes", "partly", "no"] = Field(description="Whether upstream already knows this.")
    known_why: str = Field(description="Why that answer: what the references cover and what not.")
    references: tuple[UpstreamRef, ...] = Field((), description="Upstream issues and pull requests that mention it.")
    evidence: tuple[str, ...] = Field((), description="Further evidence files, relative to the current directory.")
    suggested_fix: str = Field(description="The fix suggested upstream (Markdown).")
    patch: str = Field("", description="A patch of this repository that applies the fix (path), if any.")
    reproduce_setup: str = Field("", description="How to get what the reproduction commands need (Markdown).")


def load_notes(path: Path) -> Notes:
    data = load_toml(path, what="notes file")
    try:
        notes = Notes.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        valid = ", ".join(Notes.model_fields)
        raise ConfigError(f"notes file {path}: {key}: {e['msg']}",
                          hint=f"fix that key (the keys are: {valid})") from None
    if notes.tracker not in TRACKERS:
        raise ConfigError(f"notes file {path}: tracker: {notes.tracker!r} is not a known tracker",
                          hint=f"use one of {', '.join(TRACKERS)}")
    for p in (*notes.evidence, *((notes.patch,) if notes.patch else ())):
        if not Path(p).is_file():
            raise ConfigError(f"notes file {path}: {p!r} is not a file (paths are relative to the current "
                              "directory)", hint="run from the repository root, or fix the path")
    return notes


def read_bytes(path: Path, *, what: str) -> bytes:
    return _read_bytes(path, limit=64 * MiB, what=what)


def _sha256(path: Path) -> str:
    return hashlib.sha256(read_bytes(path, what="evidence file")).hexdigest()


def _head(notes: Notes) -> list[str]:
    name, where = TRACKERS[notes.tracker]
    return [f"# {notes.title}", "", f"File at: **{name}**, {where}", ""]


def _known(notes: Notes) -> list[str]:
    word = {"yes": "Known upstream", "partly": "Partly known upstream", "no": "Not found upstream"}[notes.known]
    lines = ["## Known upstream", "", f"**{word}.** {notes.known_why.strip()}", ""]
    for r in notes.references:
        lines.append(f"- {r.ref} ({r.kind}, {r.state}): \"{r.title}\". {r.says}")
    return lines + ([""] if notes.references else [])


def _fix(notes: Notes, applied_to: Sequence[str] = ()) -> list[str]:
    lines = ["## Suggested fix", "", notes.suggested_fix.strip(), ""]
    if notes.patch:
        where = f"; it applies to {', '.join(applied_to)}" if applied_to else ""
        lines += [f"The patch, ready to apply with `git apply`: `{notes.patch}` "
                  f"(sha256 {_sha256(Path(notes.patch))[:16]}…{where}).", ""]
    return lines


def _evidence_files(paths: list[Path]) -> list[str]:
    return [f"- `{p}` (sha256 {_sha256(p)[:16]}…)" for p in paths]


# --- from a bisect -------------------------------------------------------------------------------

def bisect_command(spec: BisectSpec) -> str:
    """The `harness bisect` command that runs this bisect again from nothing."""
    h, probe = spec.history, spec.probe
    if h.kind == "releases":
        argv = ["harness", "bisect", f"pypi:{h.project}", "--good", h.good, "--bad", h.bad]
        if h.index and h.index != PYPI_JSON:
            argv += ["--index", h.index]
        if not h.minor_first:
            argv.append("--all-releases")
    else:
        argv = ["harness", "bisect", h.repo or "REPO", "--good", h.good, "--bad", h.bad]
    tail: list[str] = []
    kind = probe.probe
    if kind == "configure":
        argv += ["--probe", "configure", "--arch-list", str(probe.torch_cuda_arch_list), "--python", "$VENV/bin/python"]
        if probe.cutlass_dir:
            argv += ["--cutlass", "$CUTLASS"]
    elif kind == "build":
        argv += ["--probe", "build", "-m", str(probe.matrix), "--stack", str(probe.stack)]
    elif kind == "cell":
        argv += ["--probe", "cell", str(probe.cell), "-m", str(probe.matrix), "--stack", str(probe.stack)]
    elif kind == "command":
        tail = ["--", *(probe.command or [])]
    for _name, path in spec.setup.patches:
        argv += ["--patch", Path(path).name]
    text = " ".join(a if a.startswith("$") else shlex.quote(a) for a in argv)
    return text + ((" " + shlex.join(tail)) if tail else "")


R = TypeVar("R", bound=BaseModel)


def _read(model: type[R], path: Path, what: str) -> R:
    """A file of a bisect's folder, read into its record (store.py); another shape is bad input."""
    doc = load_json(path, what=what)
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        e = exc.errors()[0]
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        raise ConfigError(f"{path}: not a {what} this version reads ({key}: {e['msg']})",
                          hint="give the folder of a finished `harness bisect`") from None


def bisect_report(folder: Path, notes: Notes) -> str:
    spec = _read(BisectFile, folder / "bisect.json", "bisect file")
    result = _read(BisectResult, folder / "result.json", "bisect result")
    bad = result.first_bad
    if not result.done or not bad:
        raise ConfigError(f"{folder}: the bisect has no single first bad point",
                          hint=f"finish it first (`harness bisect --resume {folder}`) or narrow the range")
    probe = spec.probe
    good = result.last_good
    patches = ", ".join(name for name, _path in spec.setup.patches)
    lines = _head(notes)
    lines += ["## Environment", "", "The decision below is vLLM's own CMake configure (no GPU, nothing compiled), "
              "for each release of the range:", "",
              "| | |", "|---|---|",
              f"| probe | `{probe.probe}` |",
              f"| TORCH_CUDA_ARCH_LIST | `{probe.torch_cuda_arch_list or '-'}` |",
              f"| kernel families compared | {', '.join(probe.families or []) or '-'} |",
              f"| history | {_history(spec.history)} |",
              f"| patches applied to every point | {patches or 'none'} |",
              ""]
    logs = [folder / "logs" / n for n in Root(folder, what="bisect folder").files("logs", suffix=".log")]  # no links
    first_log = next((p for p in logs if p.name.endswith(f"-{bad.id}.log")), None)
    toolchain = _toolchain_lines(first_log) if first_log else []
    if toolchain:
        lines += ["From the first bad point's configure log:", "", "```", *toolchain, "```", ""]
    lines += ["## What was asked", "", notes.asked.strip(), ""]
    lines += ["## What was built", "",
              f"Last good: **{good.id}** ({good.date}): {_decision(good.decision)}.",
              f"First bad: **{bad.id}** ({bad.date}): {_decision(bad.decision)}.", ""]
    if notes.cost:
        lines += [notes.cost.strip(), ""]
    lines += ["## Evidence", ""]
    if first_log:
        quoted = [ln for ln in read_bytes(first_log, what="bisect log").decode("utf-8", "replace").splitlines()
                  if re.match(r"^-- (CUDA (supported )?target architectures|Building .* for archs|Not building)", ln)]
        lines += [f"From `{first_log}` (vLLM {bad.id}, the first bad release):", "", "```", *quoted[:25], "```", ""]
    files = [folder / "result.md", folder / "result.json", folder / "bisect.json"]
    files += [folder / "cmake.diff"] if (folder / "cmake.diff").is_file() else []
    files += [Path(p) for p in notes.evidence]
    lines += ["Files:", "", *_evidence_files(files), ""]
    answer = result.model_copy(update={"points": len(spec.points)})
    lines += bisect_markdown(answer, max_diff_lines=32).replace("## Bisect", "### Bisect", 1).splitlines()
    lines += ["", "## Reproduce", ""]
    if notes.reproduce_setup:
        lines += [notes.reproduce_setup.strip(), ""]
    lines += ["```sh", bisect_command(spec.spec), "```", ""]
    lines += _known(notes) + _fix(notes)
    return redact_text("\n".join(lines).rstrip() + "\n")


def _history(h: HistorySpec) -> str:
    if h.kind == "releases":
        return f"the releases of `{h.project}` from {h.good} to {h.bad} (PyPI sdists, sha256-checked)"
    return f"the commits of `{h.repo}` from {h.good[:12]} to {h.bad[:12]}"


def _decision(d: Decision | None) -> str:
    if not d:
        return "-"
    return "; ".join(f"`{k}` {', '.join(v) if v else 'not built'}" for k, v in d.items())


# what the log says of the toolchain, without the paths of the machine that ran it
_TOOL_LINE = re.compile(r"^-- (The (CXX|CUDA) compiler identification is .*|CUDA (supported )?target architectures: .*)$")


def _toolchain_lines(log: Path) -> list[str]:
    text = read_bytes(log, what="bisect log").decode("utf-8", "replace")
    seen: list[str] = []
    for ln in text.splitlines():
        if _TOOL_LINE.match(ln) and ln not in seen:
            seen.append(ln)
    return seen


# --- from configure records ----------------------------------------------------------------------

class Sdist(Open):
    file: str
    sha256: str | None = None


class SourcePin(Open):
    env: str | None = None  # the variable vLLM's CMake reads the tree from
    pin: str  # "<commit or tag> ...", or "(empty folder)" when none was given


class SourcePins(Open):
    """The source trees handed to the configure (the ones a reproduction names)."""

    cutlass: SourcePin | None = None
    flash_attention: SourcePin | None = Field(None, alias="flash-attention")
    qutlass: SourcePin | None = None
    flashmla: SourcePin | None = None
    deepgemm: SourcePin | None = None


class RecordPatch(Open):
    file: str
    sha256: str | None = None
    applied: bool = False


class ConfigureToolchain(Open):
    image: str | None = None
    nvcc: str | None = None
    nvcc_default_arch: str | None = None
    cmake: str | None = None
    gcc: str | None = None
    torch: str | None = None
    python: str | None = None


class Decisions(Open):
    """Every arch decision the configure printed (name -> archs); the report reads FA3's."""

    fa3_archs: str | None = Field(None, alias="FA3_ARCHS")  # None: the configure never got there


class Fa3(Open):
    cuda_objects: int | None = None
    cxx_objects: int | None = None
    arch_flags_of_one_object: list[str] = Field(default_factory=list)
    asked_by_setup_py: bool
    why: str | None = None


class TimedBuild(Open):
    """A configure that also compiled and timed targets."""

    targets: list[str]
    jobs: int
    cpus: int
    returncode: int
    wall_s: int | float
    steps: int
    step_minutes: int | float
    cpu_minutes: int | float | None = None  # user + system of the compilers (records before it: none)


class ConfigureRecord(Open):
    """record.json of tools/configure-targets.sh (a shell tool: its record is typed here, where
    the harness reads it)."""

    kind: Literal["configure"]
    vllm: str
    sdist: Sdist
    arch_list: str
    patches: list[RecordPatch] = Field(default_factory=list)
    sources: SourcePins = Field(default_factory=SourcePins)
    toolchain: ConfigureToolchain
    returncode: int
    seconds: int | float
    stopped_at: str | None = None
    decisions: Decisions
    targets: dict[str, object]  # CMake target -> its object counts; empty when the configure stopped
    cuda_objects_total: int | None = None
    fa3: Fa3
    cuda_objects_setup_py_builds: int | None = None
    build: TimedBuild | None = None


def _timed(path: Path, r: ConfigureRecord, b: TimedBuild) -> str:
    """What a record's timed compile says: the command (its targets listed in the record when
    many), wall, steps, step-minutes and, where recorded, CPU minutes; for a sample of the FA3
    objects, what all of them cost at that rate."""
    what = (" ".join(b.targets) if len(b.targets) <= 2
            else f"<{len(b.targets)} targets, listed in {path}>")
    text = (f"Compiled and timed (vLLM {r.vllm}): `ninja -j{b.jobs} {what}` on {b.cpus} CPUs: "
            f"{b.wall_s} s wall, {b.steps} step{'' if b.steps == 1 else 's'}, {b.step_minutes} step-minutes")
    if b.cpu_minutes is not None:
        text += f", {b.cpu_minutes} CPU-minutes (user + system of the compilers)"
    text += f" (exit {b.returncode})."
    fa3 = r.fa3.cuda_objects
    if (b.cpu_minutes is not None and b.returncode == 0 and b.steps and fa3
            and all("/_vllm_fa3_C.dir/" in t for t in b.targets)):
        each = b.cpu_minutes / b.steps
        text += (f" At {each:.2f} CPU-minutes an object, the {fa3} `_vllm_fa3_C` CUDA objects cost about "
                 f"{each * fa3:.0f} CPU-minutes: about {each * fa3 / 16:.1f} minutes of wall time on 16 busy "
                 f"cores, {each * fa3 / 20:.1f} on 20.")
    return text


def _record(path: Path) -> ConfigureRecord:
    try:
        return ConfigureRecord.model_validate(load_json(path, what="configure record"))
    except ValidationError as exc:
        errors = exc.errors()
    if any(e["loc"] in ((), ("kind",)) for e in errors):
        raise ConfigError(f"{path}: not a configure record (no \"kind\": \"configure\")",
                          hint="give the record.json that tools/configure-targets.sh wrote")
    hint = "write it again with tools/configure-targets.sh"
    for e in errors:
        if e["type"] == "missing" and len(e["loc"]) == 1:
            raise ConfigError(f"{path}: configure record without {e['loc'][0]!r}", hint=hint)
    key = ".".join(str(p) for p in errors[0]["loc"])
    raise ConfigError(f"{path}: configure record: {key}: {errors[0]['msg']}", hint=hint)


def configure_command(rec: ConfigureRecord, out: Path) -> str:
    src = rec.sources
    env = [f"{pre}_SRC=<{name} tree> {pre}_PIN={shlex.quote(s.pin.split(' ')[0])}"
           for name, pre, s in (("cutlass", "CUTLASS", src.cutlass), ("flash-attention", "FA", src.flash_attention),
                                ("qutlass", "QUTLASS", src.qutlass), ("flashmla", "FLASHMLA", src.flashmla),
                                ("deepgemm", "DEEPGEMM", src.deepgemm))
           if s and not s.pin.startswith("(")]
    b = rec.build
    if b:  # the record of a configure that also compiled and timed targets
        env.append(f"BUILD_TARGET={shlex.quote(' '.join(b.targets))} JOBS={b.jobs}")
    patches = [f"patches/vllm/{p.file}" for p in rec.patches]
    argv = ["tools/configure-targets.sh", rec.sdist.file, rec.arch_list, str(out), *patches]
    return " \\\n  ".join([*env, shlex.join(argv)])


def _flags(rec: ConfigureRecord) -> str:
    flags = rec.fa3.arch_flags_of_one_object
    if flags:
        return ", ".join(f"`{f}`" for f in flags)
    if rec.fa3.cuda_objects:
        return f"none: nvcc's default ({rec.toolchain.nvcc_default_arch or '?'})"
    return "-"


def configure_report(paths: list[Path], notes: Notes) -> str:
    recs = [(p, _record(p)) for p in paths]
    first = recs[0][1]
    tc = first.toolchain
    lines = _head(notes)
    lines += ["## Environment", "", "A CMake configure of each PyPI sdist as setup.py runs it (Ninja, Release), "
              "offline, in a container; no GPU:", "", "| | |", "|---|---|"]
    for label, value in (("image", tc.image), ("nvcc", tc.nvcc), ("nvcc default arch", tc.nvcc_default_arch),
                         ("cmake", tc.cmake), ("gcc", tc.gcc), ("torch", tc.torch), ("python", tc.python)):
        lines.append(f"| {label} | {value or '-'} |")
    lines += ["", "## What was asked", "", notes.asked.strip(), ""]
    lines += ["## What was built", "",
              "| vLLM | patches | TORCH_CUDA_ARCH_LIST | configure | FA3_ARCHS | CUDA objects in the build graph "
              "| of them `_vllm_fa3_C` | FA3 objects' arch flags | setup.py asks for `_vllm_fa3_C` "
              "| CUDA objects setup.py builds |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in recs:
        patches = ", ".join(f"`{p.file}`" for p in r.patches) or "none"
        conf = "ok" if r.returncode == 0 else f"stopped at {r.stopped_at}"
        fa3_archs = r.decisions.fa3_archs
        fa3_archs = "(empty)" if fa3_archs == "" else (f"`{fa3_archs}`" if fa3_archs else "not reached")
        graph = r.cuda_objects_total if r.targets else "-"
        fa3 = r.fa3.cuda_objects if r.targets else "-"
        builds = r.cuda_objects_setup_py_builds
        lines.append(f"| {r.vllm} | {patches} | `{r.arch_list}` | {conf} | {fa3_archs} | {graph} | {fa3} | "
                     f"{_flags(r) if r.targets else '-'} | {'yes' if r.fa3.asked_by_setup_py else 'no'} | "
                     f"{builds if builds is not None else '-'} |")
    lines += [""]
    for p, r in recs:
        b = r.build
        if b:
            lines += [_timed(p, r, b), ""]
    if notes.cost:
        lines += [notes.cost.strip(), ""]
    lines += ["## Evidence", ""]
    for p, r in recs:
        folder = p.parent
        log = folder / "configure.log"
        text = read_bytes(log, what="configure log").decode("utf-8", "replace") if log.is_file() else ""
        quoted = [ln for ln in text.splitlines()
                  if re.match(r"^-- (CUDA (supported )?target architectures|FA[23]_ARCHS|vllm-flash-attn is)", ln)
                  or ln.startswith("CMake Error at") or "is required to build vLLM" in ln
                  or "expected for CUDA build" in ln]
        lines += [f"vLLM {r.vllm}, `{r.arch_list}`, patches: "
                  f"{', '.join(p.file for p in r.patches) or 'none'} ({r.seconds} s); "
                  f"`{log}`:", "", "```", *quoted, "```", ""]
        targets = folder / "fa3-targets.txt"
        if targets.is_file():
            listed = read_bytes(targets, what="target list").decode("utf-8", "replace").splitlines()
            lines += [f"`ninja -t targets all`, the `_vllm_fa3_C` entries ({len(listed)} lines, all in "
                      f"`{targets}`), first three:", "", "```", *listed[:3], "```", ""]
        why = r.fa3.why
        if why:
            lines += [f"`_vllm_fa3_C` asked of `cmake --build` by setup.py: "
                      f"{'yes' if r.fa3.asked_by_setup_py else 'no'} ({why}).", ""]
    files = [f for p, _ in recs for f in (p, p.parent / "configure.log", p.parent / "fa3-targets.txt") if f.is_file()]
    files += [Path(p) for p in notes.evidence]
    lines += ["Files:", "", *_evidence_files(files), ""]
    lines += ["## Reproduce", ""]
    if notes.reproduce_setup:
        lines += [notes.reproduce_setup.strip(), ""]
    lines += ["```sh"]
    for p, r in recs:
        lines += [configure_command(r, p.parent), ""]
    lines[-1:] = ["```", ""]
    applied = sorted({f"vLLM {r.vllm}" for _, r in recs
                      if any(x.applied and notes.patch.endswith(x.file) for x in r.patches)})
    lines += _known(notes) + _fix(notes, applied)
    return redact_text("\n".join(lines).rstrip() + "\n")
