"""`harness bug RUN CELL`: a ready-to-file upstream bug report for one cell of a run.

Everything in it comes from the run directory's typed records (never from the host the command
runs on, which may not be the one that ran the cell): the host and image fingerprints, the build
labels, the exact serve command, the verdicts the run recorded and the log lines that prove
them. It judges nothing: a cell with nothing wrong gets no report unless asked (`--force`).
vLLM's collect_env misses compute capability, archs actually compiled, FlashInfer builds,
patches and image identity: those are what a
maintainer asks for first. Paths are shown relative to the run directory or the current one.
Secrets are masked in every piece, and once more over the whole text.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from harness import labels as label
from harness.errors import ConfigError
from harness.fingerprint.model import Fingerprint
from harness.fingerprint.tables import SignatureTracker, signatures
from harness.fingerprint.verdicts import cause_of
from harness.redact import redact_args, redact_env, redact_text
from harness.results.build import BuildOutcome
from harness.results.model import (
    SELECTION_CHECKS,
    CellResult,
    ImageProbe,
    RunRecord,
    Status,
    VerdictStatus,
)
from harness.results.store import RunStore
from harness.safety.writes import write_text

LOG_TAIL_LINES = 40

# Every TrackerKey has its entry (name, where to file).
TrackerKey = SignatureTracker | Literal["harness"]
TRACKERS: dict[str, tuple[str, str]] = {
    "vllm": ("vLLM", "https://github.com/vllm-project/vllm/issues/new/choose"),
    "flashinfer": ("FlashInfer", "https://github.com/flashinfer-ai/flashinfer/issues/new/choose"),
    "driver": (
        "NVIDIA driver",
        "https://forums.developer.nvidia.com/c/accelerated-computing/dgx-spark-gb10/ "
        "(or the NVIDIA bug portal, https://developer.nvidia.com/bugs)",
    ),
    "triton": ("Triton", "https://github.com/triton-lang/triton/issues/new/choose"),
    "nvidia-container": (
        "NVIDIA Container Toolkit",
        "https://github.com/NVIDIA/nvidia-container-toolkit/issues/new/choose",
    ),
    "harness": ("this harness", "this repository's issue tracker (not upstream)"),
}
# Every status: what the server did, None where the status is not a start-up failure.
_CRASH_VERB: dict[Status, str | None] = dict.fromkeys(Status) | {
    Status.CRASHED: "server crashes at start-up",
    Status.HUNG: "server hangs at start-up",
    Status.TIMEOUT: "server not ready before the start-up timeout",
    Status.BUILD_FAILED: "image build fails",
}
StackKind = Literal["built", "prebuilt", "local"]


@dataclass(frozen=True)
class Tracker:
    key: TrackerKey
    why: str


def nothing_wrong(cell: CellResult) -> bool:
    """Passed (or skipped) with no failed verdict: there is no bug to report."""
    return cell.status in (Status.PASS, Status.SKIPPED) and not any(v.failed for v in cell.verdicts)


def _chip(run: RunRecord) -> str:
    gpu = run.host.first_gpu
    cc = (gpu.cc if gpu else None) or run.matrix.hardware_cc
    name = (gpu.name if gpu else None) or run.matrix.hardware_name or "unknown GPU"
    if cc:
        sm = "SM_" + str(cc).replace(".", "")
        return f"{name} ({sm}, cc {cc})"
    return name


def _fatal(fp: Fingerprint | None) -> list[str]:
    fatal = {s.id for s in signatures() if s.severity == "fatal"}
    return [s for s in (fp.signatures if fp else ()) if s in fatal]


def _flag(check: str) -> str:
    return "--" + check.removeprefix("log:").replace("_", "-")


def symptom(cell: CellResult) -> str:
    """One line naming what went wrong, most specific evidence first: the cause of a death in
    words with the failure's name ("cause not in this excerpt" when the log does not hold it), a
    start-up failure, a tool error, a kernel the cell asked for and did not get, one the log's
    own record of the request did not get, then the first failed verdict."""
    cause = cause_of(cell.fingerprint) if cell.fingerprint else None
    if cause is not None and cell.fingerprint is not None:
        fatal = _fatal(cell.fingerprint)
        name = cell.fingerprint.failure_signature or (fatal[0] if fatal else None)
        shown = f" [{name}]" if name else ""
        return f"{cause.words}{shown}: {_CRASH_VERB[cell.status] or 'server fails'}"
    if verb := _CRASH_VERB[cell.status]:
        return verb
    if cell.status is Status.ERROR and cell.error:
        return f"harness raised inside the cell: {cell.error.type}: {cell.error.message}"
    failed = [v for v in cell.verdicts if v.failed]
    for v in failed:
        if v.check in SELECTION_CHECKS:
            return f"{_flag(v.check)} not honoured: {v.message}"
    for v in failed:
        if v.check.startswith("log:"):
            return f"{_flag(v.check)} not honoured: {v.message} (the log's own record of the request)"
    if failed:
        return f"{failed[0].check}: {failed[0].message}"
    return f"no failure recorded (cell {cell.status.value}; report forced)"


def trackers(cell: CellResult) -> list[Tracker]:
    """Likely upstream homes, best guess first: the signature table's tracker for each known
    failure, vLLM for a kernel request it did not honour, FlashInfer for autotuner skips."""
    by_id = {s.id: s for s in signatures()}
    found: list[Tracker] = []
    sigs = cell.fingerprint.signatures if cell.fingerprint else ()
    for sid in sorted(sigs, key=lambda s: by_id[s].severity != "fatal" if s in by_id else True):
        if sid in by_id:
            sig = by_id[sid]
            found.append(Tracker(sig.tracker, f"signature `{sid}` ({sig.severity}): see {sig.link}"))
    for v in cell.verdicts:
        if v.failed and v.check.removeprefix("log:") in SELECTION_CHECKS:
            # A FlashInfer kernel picked instead of the one asked is still vLLM's oracle choosing.
            found.append(Tracker("vllm", f"{v.check}: {v.message}: vLLM's kernel selection "
                                 "(oracle / --moe-backend / --linear-backend)"))
    for v in cell.verdicts:
        if v.check.startswith("autotuner:") and v.failed:
            found.append(Tracker("flashinfer",
                                 f"{v.message} (FlashInfer cubins or JIT archs for this GPU)"))
    if not found and cell.status is Status.ERROR:
        found.append(Tracker("harness", "the harness itself raised: not a bug of the stack"))
    if not found and cell.status is Status.BUILD_FAILED:
        found.append(Tracker("vllm", "the image build failed (vLLM's CMake / kernels)"))
    if not found:
        found.append(Tracker("vllm", "no signature names another project"))
    first: dict[tuple[str, str], Tracker] = {}  # each (key, why) once, in the order found
    for t in found:
        first.setdefault((t.key, t.why), t)
    return list(first.values())


def _kv(rows: list[tuple[str, object]]) -> list[str]:
    out = ["| | |", "|---|---|"]
    for k, v in rows:
        text = "-" if v in (None, "", [], {}) else str(v)
        out.append(f"| {k} | {text.replace('|', '/')} |")
    return out


def _image(cell: CellResult, build: BuildOutcome | None) -> tuple[str | None, str | None]:
    """(ref, id) of the image the cell ran: the cell's own record, else the build's."""
    if cell.image and (cell.image.ref or cell.image.id):
        return cell.image.ref, cell.image.id
    if build is None:
        return None, None
    return build.image_ref, build.image_id  # v1's {ref, id} is lifted by BuildOutcome.from_json


class HarnessLabels(BaseModel):
    """The image labels a harness build writes (harness.image.render, `harness.*`) that the
    report shows; an image the harness did not build has none. Other labels ignored."""

    vllm_source: str = Field("", alias=label.VLLM_SOURCE)
    torch: str | None = Field(None, alias=label.TORCH)
    torch_cuda_arch_list: str | None = Field(None, alias=label.TORCH_CUDA_ARCH_LIST)
    cuda: str | None = Field(None, alias=label.CUDA)
    python: str | None = Field(None, alias=label.PYTHON)


def _labels(cell: CellResult, build: BuildOutcome | None) -> dict[str, str]:
    labels = dict(build.labels) if build else {}
    if cell.image:
        labels.update(cell.image.labels)
    return {str(k): str(v) for k, v in labels.items()}


def stack_kind(cell: CellResult, build: BuildOutcome | None) -> StackKind:
    """local: a Python environment on the host; prebuilt: an image the harness did not build
    (reused, no harness.* build labels); built: an image the harness builds from the matrix."""
    if cell.runner == "local" or (build is not None and build.status == "local"):
        return "local"
    by_harness = any(label.is_ours(k) and not k.startswith(label.LOCAL)
                     for k in _labels(cell, build))
    ref, _ = _image(cell, build)
    if not by_harness and ref and (build is None or build.status == "reused"):
        return "prebuilt"
    return "built"


def _vllm_version(cell: CellResult, labels: dict[str, str]) -> str | None:
    """Probe first (what the image holds), then the build labels, then the log banner."""
    probe = cell.image_fingerprint.vllm if cell.image_fingerprint else None
    version, commit = (probe.version, probe.git_sha) if probe else (None, None)
    for k, v in labels.items():
        low = k.lower()
        if "vllm" in low and low.endswith("version"):
            version = version or v
        if "vllm" in low and low.endswith(("commit", "sha")):
            commit = commit or v
    source = HarnessLabels.model_validate(labels).vllm_source
    pinned = re.search(r"vllm==([\w.+-]+)", source)
    version = version or (f"{pinned.group(1)} (image label)" if pinned else None)
    version = version or (cell.fingerprint.vllm_version if cell.fingerprint else None)
    if version and commit:
        return f"{version} (commit {commit})"
    return version


def _from_label(label: str | None, what: str = "") -> str | None:
    """A build label, said to be one: the image was built with it, the probe did not confirm it."""
    value = (label or "").strip()
    return f"{value} (image label{': ' + what if what else ''})" if value else None


def _environment(run: RunRecord, cell: CellResult, build: BuildOutcome | None) -> list[str]:
    host = run.host
    gpu = host.first_gpu
    gpu_text = (
        "; ".join(f"{g.name} (cc {g.cc}, {g.memory_gib} GiB)" for g in host.gpus)
        or f"none recorded (matrix hardware: {run.matrix.hardware_name})"
    )
    lines = ["## Environment", "", "### Host", ""]
    lines += _kv(
        [
            ("GPU", gpu_text),
            ("compute capability", gpu.cc if gpu else run.matrix.hardware_cc),
            ("driver", host.driver),
            ("CUDA driver", host.cuda_driver),
            ("kernel", host.kernel),
            ("arch", host.arch),
            ("OS", host.os),
            ("memory", f"{host.mem_total_gib} GiB" if host.mem_total_gib else None),
            ("Docker", host.docker),
            ("NVIDIA Container Toolkit", host.nvidia_container_toolkit),
        ]
    )
    probe = cell.image_fingerprint or ImageProbe()
    torch, dists = probe.torch, probe.distributions
    ref, image_id = _image(cell, build)
    labels = _labels(cell, build)
    built_with = HarnessLabels.model_validate(labels)
    fi_labels = {k: v for k, v in labels.items() if "flashinfer" in k.lower()}
    kind = stack_kind(cell, build)
    lines += ["", "### Image" if kind != "local" else "### Python environment (local stack)", ""]
    lines += _kv(
        [
            ("image" if kind != "local" else "environment",
             f"{ref} ({image_id})" if ref and image_id else ref),
            ("vLLM", _vllm_version(cell, labels)),
            ("torch",
             f"{torch.version} (CUDA {torch.cuda})" if torch.version
             else _from_label(built_with.torch)),
            ("torch arch list", ", ".join(torch.arch_list or ())
             or _from_label(built_with.torch_cuda_arch_list)),
            ("CUDA runtime", probe.cuda_runtime.version
             or _from_label(built_with.cuda, "base image tag")),
            ("FlashInfer",
             ", ".join(f"{k} {v}" for k, v in dists.items() if k.startswith("flashinfer") and v)
             or None),
            ("FlashInfer pins (labels)",
             ", ".join(f"{k}={v}" for k, v in sorted(fi_labels.items())) or None),
            ("Triton", dists.get("triton")),
            ("Python", probe.python or _from_label(built_with.python)),
        ]
    )
    patches = {k: v for k, v in labels.items() if "patch" in k.lower() or "pr." in k.lower()}
    lines += ["", "### Patches (from the image labels, with sha256)", ""]
    lines += [f"- `{k}`: `{v}`" for k, v in sorted(patches.items())] or ["- none recorded"]
    audit = build.audit if build else None  # a cell's audit is its build's
    lines += ["", "### Archs actually compiled (harness audit of the image)", ""]
    shown = dict(audit.labels) if audit else {}
    if audit and audit.reason:
        shown["audit.reason"] = audit.reason
    lines += [f"- `{k}`: {v}" for k, v in sorted(shown.items())] or [
        "- no audit recorded (run `harness audit` on the image)"
    ]
    return lines


def _shown_path(path: str | None, base: Path, what: str) -> tuple[str, str | None]:
    """A path as the report shows it: relative to `base` when under it (or already relative),
    else only its name, with a note. Absolute paths of another machine help nobody."""
    if not path:
        return f"<{what}>", f"the run recorded no {what} path: give yours"
    p = Path(path)
    if not p.is_absolute():
        return path, None
    try:
        return str(p.relative_to(base.resolve())), None
    except ValueError:
        return p.name, (f"the run used `{p.name}` from a directory outside this one "
                        f"(run.json stores it absolute): give its path here")


def _rebuild(cell: CellResult, build: BuildOutcome | None, matrix: str, quoted_id: str) -> list[str]:
    kind = stack_kind(cell, build)
    labels = _labels(cell, build)
    ref, image_id = _image(cell, build)
    if kind == "local":
        probe = cell.image_fingerprint or ImageProbe()
        dists = {k: v for k, v in probe.distributions.items() if v}
        vllm = probe.vllm.git_sha
        lines = ["## The Python environment (local stack: nothing to build)", "",
                 "The cell ran vLLM from a Python environment on the host, not from an image. "
                 "What it held (`pip show`-style, from the harness probe of that Python):", "",
                 "```"]
        lines.append(f"python {probe.python or '?'} ({probe.executable or 'executable not recorded'})")
        lines += [f"{k}=={v}" for k, v in sorted(dists.items())] or ["# no distributions recorded"]
        if vllm:
            lines.append(f"# vllm git sha {vllm}")
        lines += ["```", ""]
        return lines
    if kind == "prebuilt":
        lines = ["## The image (prebuilt: nothing to build)", "",
                 "The stack names an image the harness did not build; get the same one:", "",
                 "```sh", f"docker pull {shlex.quote(ref or '<image>')}"]
        if image_id:
            lines.append(f"docker image inspect --format '{{{{.Id}}}}' {shlex.quote(ref or '<image>')}"
                         f"  # must print {image_id}")
        lines += ["```", ""]
    else:
        lines = ["## Rebuild the exact image", "", "```sh",
                 f"harness build -m {shlex.quote(matrix)} -k {quoted_id}", "```", ""]
    if labels:
        lines += ["Image labels (what the build recorded):", "", "```"]
        lines += [f"{k}={v}" for k, v in sorted(labels.items())]
        lines += ["```", ""]
    return lines


def _serve(cell: CellResult) -> list[str]:
    serve = cell.serve
    cmd = redact_args([str(a) for a in serve.command]) if serve else []
    env = redact_env({str(k): str(v) for k, v in serve.env.items()}) if serve else {}
    lines = ["## Serve command and environment", "", "```sh"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines.append(shlex.join(cmd) if cmd else "# no command recorded")
    lines += ["```", ""]
    if serve is None or serve.state is None:
        lines.append("Start-up: not recorded (the cell never started a server).")
        return lines
    parts = [f"state `{serve.state}`"]
    if serve.exit_code is not None:
        parts.append(f"exit code {serve.exit_code}")
    if serve.startup_s is not None:
        parts.append(f"after {serve.startup_s} s")
    lines.append("Start-up: " + ", ".join(parts) + ".")
    return lines


def _expected_actual(cell: CellResult) -> list[str]:
    req, fp = cell.requested, cell.fingerprint
    rows = [
        ("MoE backend", req.moe_backend, fp.moe_backend if fp else None),
        ("linear backend", req.linear_backend, ", ".join(fp.linear_kernels) if fp else None),
        ("attention backend", req.attention_backend, fp.attention_backend if fp else None),
        ("CUDA-graph mode", req.cudagraph_mode, fp.cudagraph_mode if fp else None),
    ]
    lines = ["## Expected vs actual", "", "| | asked | the log shows |", "|---|---|---|"]
    lines += [f"| {k} | {a or 'auto'} | {g or '-'} |" for k, a, g in rows]
    lines += ["", f"Cell status: **{cell.status.value}**.", ""]
    if cell.error:
        lines += [f"The harness raised inside the cell: `{cell.error.type}: {cell.error.message}`", ""]
        if cell.error.traceback:
            lines += ["```", *cell.error.traceback[-15:], "```", ""]
    bad = [v for v in cell.verdicts if v.status is not VerdictStatus.PASS]
    if bad:
        lines += ["| check | verdict | message |", "|---|---|---|"]
        lines += [f"| {v.check} | {v.status.value} | {v.message.replace('|', '/')} |" for v in bad]
    return lines


def _cause(cell: CellResult) -> list[str]:
    """The cause of a death in words and the log line that shows it; when the log does not hold
    the cause, says so and quotes what it does show (a maintainer then asks for the full log)."""
    cause = cause_of(cell.fingerprint) if cell.fingerprint else None
    if cause is None:
        return []
    lines = ["## Cause", "", f"**{cause.words}** (class `{cause.failure_class.value}`)", ""]
    if cause.line:
        at = f" (log line {cause.line_number})" if cause.line_number else ""
        head = "Evidence" if cause.in_excerpt else "The log shows only the death"
        lines += [f"{head}{at}:", "", "```", cause.line, "```", ""]
    if not cause.in_excerpt:
        lines += ["The line that names the cause is not in the recorded log: attach the whole "
                  "server log (every process's output) to the report.", ""]
    return lines


def _log_tail(store: RunStore, cell: CellResult) -> list[str]:
    tail = cell.serve.log_tail if cell.serve else ()
    if tail:
        return [str(x) for x in tail[-LOG_TAIL_LINES:]]
    text = store.read_log(store.log_path(cell.id).relative_to(store.dir), max_bytes=1 << 20)
    return text.splitlines()[-LOG_TAIL_LINES:] if text is not None else []


def _evidence(store: RunStore, cell: CellResult) -> list[str]:
    fp = cell.fingerprint
    log = cell.serve.log if cell.serve else None
    shown, _ = _shown_path(log, store.dir, "server log") if log else ("", None)
    where = f"the full log is `{shown}` in the run directory" if log else "no server log recorded"
    lines = ["## Evidence from the server log", "",
             f"Quoted lines only; {where} (attach it if asked).", "", "```"]
    opened = len(lines)
    seen: set[str] = set()
    for key, line in (fp.evidence if fp else {}).items():
        if line not in seen:
            lines.append(f"[{key}] {line}")
            seen.add(line)
    for v in cell.verdicts:
        if v.failed:
            for line in v.lines:
                if line and line not in seen:
                    lines.append(f"[{v.check}] {line}")
                    seen.add(line)
    if len(lines) == opened:
        lines.append("(the fingerprint found no evidence lines)")
    lines.append("```")
    if _CRASH_VERB[cell.status] is not None or _fatal(fp):
        tail = _log_tail(store, cell)
        if tail:
            lines += ["", f"Last {len(tail)} log lines:", "", "```", *tail, "```"]
    return lines


def _read(store: RunStore, cell_id: str, force: bool) -> CellResult:
    cell = store.read_cell(cell_id)
    if cell is None:
        known = ", ".join(sorted(store.finished_ids())) or "none"
        raise ConfigError(
            f"{store.dir}: no finished cell {cell_id!r}",
            hint=f"give one of the finished cells: {known}",
        )
    if nothing_wrong(cell) and not force:
        failed = [c.id for c in store.cells() if not nothing_wrong(c)]
        raise ConfigError(
            f"{cell_id} in {store.run_id}: status {cell.status.value} and no failed verdict, "
            "so there is no bug to report",
            hint=(f"pick a cell that went wrong ({', '.join(failed)})" if failed
                  else "no cell of this run went wrong") + ", or pass --force to write it anyway",
        )
    return cell


def bug_report(store: RunStore, cell_id: str, *, force: bool = False) -> str:
    cell = _read(store, cell_id, force)
    run = store.run
    build = store.build_of(cell)
    matrix, matrix_note = _shown_path(run.matrix.path, Path.cwd(), "matrix")
    chip = _chip(run)
    driver = run.host.driver
    labels = _labels(cell, build)
    version = _vllm_version(cell, labels)
    version = version.split(" (")[0] if version else None
    title = f"[{chip}] {symptom(cell)}"
    if version:
        title += f" (vLLM {version}"
        title += f", driver {driver})" if driver else ")"
    elif driver:
        title += f" (driver {driver})"
    found = trackers(cell)
    best = TRACKERS[found[0].key]
    quoted_id = shlex.quote(cell_id) if "'" in cell_id else f"'{cell_id}'"

    lines = [f"# {title}", ""]
    lines += [f"Likely tracker: **{best[0]}** — file at {best[1]}", ""]
    lines += [f"- {TRACKERS[t.key][0]}: {t.why}" for t in found]
    lines += [""]
    lines += _environment(run, cell, build) + [""]
    lines += _rebuild(cell, build, matrix, quoted_id)
    lines += _serve(cell) + [""]
    lines += _expected_actual(cell) + [""]
    lines += _cause(cell)
    lines += _evidence(store, cell) + [""]
    lines += [
        "## Reproduce",
        "",
        "With this tool (builds or reuses the image, serves the cell, "
        "fingerprints the log, benchmarks it):",
        "",
        "```sh",
        f"harness run -m {shlex.quote(matrix)} -k {quoted_id}",
        "```",
        "",
    ]
    if matrix_note:
        lines += [f"Matrix: {matrix_note}.", ""]
    lines += [f"Run `{run.run_id}`, cell `{cell_id}`, started {cell.started_at or 'at an unrecorded time'}.", ""]
    # Every piece above was masked already; this pass catches what a new field might carry.
    return redact_text("\n".join(lines))


def write_report(store: RunStore, cell_id: str, out: Path | None, *, force: bool = False) -> str:

    text = bug_report(store, cell_id, force=force)
    if out is not None:
        try:
            write_text(out, text, flag="--out")
        except OSError as exc:
            raise ConfigError(f"--out {out}: cannot write it ({exc.strerror or exc})",
                              hint="give --out a file path in a folder you can write to") from None
    return text
