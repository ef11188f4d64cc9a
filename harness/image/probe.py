"""`harness build --probe`: the stack's real Dockerfile up to CMake configure, then only the
translation units its verdict depends on, then their audit: minutes instead of an hour.

The probe image is the rendered Dockerfile cut at its `--- vLLM build` line (base, FlashInfer,
the vLLM source with its patches and pinned sources: the same layers a full build then reuses)
plus one step, docker/probe_build.py, which configures the stock and the patched
source, compiles the units named for the vLLM release in harness/data/probe/units.toml, and
keeps their objects. The harness copies them out and audits them: the cubin archs and, for the
FP4 GEMM, whether the SASS holds the native block-scaled FP4 MMA.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.archs import ArchList, split
from harness.audit.report import audit_path
from harness.audit.verdict import Target
from harness.errors import ConfigError, EngineError
from harness.image.builder import build_one
from harness.image.buildlog import nvfp4_problems
from harness.image.dockerfile import render
from harness.image.offline_stack import offline_parts
from harness.image.render import DOCKER_DIR, Rendered, content_hash
from harness.image.stackbuild import StackBuild
from harness.labels import CONTENT_HASH, PREFIX, PROBE, ROLE, Role
from harness.record import Open
from harness.results.build import CompileCache
from harness.safety.paths import tail_text, under
from harness.safety.readers import load_json
from harness.safety.roots import Root

UNITS = Path(str(resources.files("harness").joinpath("data", "probe", "units.toml")))
CUT = "# --- vLLM build (`harness build --probe` replaces everything from here on)"
INSTALL = "# --- vLLM install step"
RUNTIME = "# --- runtime"
OUT = "/opt/build/probe"
JIT_ONLY = " && echo 'packaging probe: FlashInfer installed without its AOT kernels' \\"


class Unit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    family: str = Field(description="Kernel family, as printed.")
    source: str = Field(description="The translation unit, relative to the vLLM source root.")
    decision: str = Field(description="The configure-log text that precedes its arch list.")
    fp4: bool = Field(False, description="An FP4 GEMM: its SASS must hold the native FP4 MMA.")


def load_units(vllm_version: str, path: Path = UNITS) -> tuple[Unit, ...] | None:
    data = tomllib.loads(path.read_text())
    if vllm_version not in data:
        return None
    try:
        return tuple(Unit.model_validate(u) for u in data[vllm_version])
    except ValidationError as exc:
        raise ConfigError(f"{path}: {vllm_version}: {exc.errors()[0]['msg']}", hint="fix the units table") from None


def render_probe(rendered: Rendered, build: StackBuild, units: tuple[Unit, ...]) -> Rendered:
    """The probe build of a rendered source stack."""
    text = rendered.dockerfile
    if CUT not in text:
        raise ConfigError(f"stacks.{rendered.stack_name}: the template has no probe cut line",
                          hint=f"a source template needs the line {CUT!r} before the vLLM build step")
    stack = build.stack
    offline_env = " && true \\"
    if stack.offline:

        offline_env = offline_parts(build.matrix, build.name, stack,
                                    [p.data for p in rendered.patches if p.series == "vllm"]).values["OFFLINE_ENV"]
    units_json = json.dumps([u.model_dump() for u in units]).replace("'", "")
    probe = "\n".join([
        CUT.replace("replaces everything from here on", "stops here: the probe step instead"),
        "COPY probe_build.py /opt/build/probe_build.py",
        'RUN eval "$(python /opt/build/compile_cache.py env)" \\',
        offline_env,
        ' && TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" MAX_JOBS="${MAX_JOBS}" NVCC_THREADS="${NVCC_THREADS}" \\',
        f"      python /opt/build/probe_build.py --units '{units_json}' --patched /opt/build/src/vllm \\",
        f'      --stock-source "${{VLLM_SOURCE}}" --sha256 "${{VLLM_SDIST_SHA256}}" --out {OUT} 2>&1 \\',
        "    | tee /opt/build/probe.log \\",
        " && python /opt/build/compile_cache.py stats compile",
        "",
    ])
    head = text[: text.index(CUT)]
    # no FlashInfer stage: the probed kernels are vLLM's, and an AOT FlashInfer build takes an hour
    fi_start, vllm_start = head.find("# --- FlashInfer"), head.find("# --- vLLM")
    if fi_start != -1 and vllm_start > fi_start:
        head = head[:fi_start] + head[vllm_start:].replace("FROM flashinfer AS vllm", "FROM base AS vllm", 1)
    return _as_probe(rendered, stack, head + probe, "probe_build.py", {})


def _as_probe(rendered: Rendered, stack, dockerfile: str, helper: str, labels: dict[str, str]) -> Rendered:
    """`rendered` turned into a probe image: its Dockerfile, the helper script in its context (shipped
    with the tool), its own content hash, and the probe's labels."""
    files = rendered.files + ((helper, (DOCKER_DIR / helper).read_bytes()),)
    digest = content_hash(dockerfile, rendered.buildargs, files, stack, rendered.platform)
    labels = {**rendered.labels, ROLE: Role.PROBE.value, **labels, CONTENT_HASH: digest}
    return replace(rendered, dockerfile=dockerfile, files=files, content_hash=digest, labels=labels)


def render_packaging(rendered: Rendered, build: StackBuild) -> Rendered:
    """The packaging probe of a rendered source stack: its Dockerfile as built (FlashInfer
    installed without AOT kernels: `rendered` comes with FLASHINFER_AOT replaced), the compile
    step left out, the template's own install step run on stand-in extensions
    (docker/packaging_probe.py), then a report of what got installed."""
    text = rendered.dockerfile
    for marker in (CUT, INSTALL, RUNTIME):
        if marker not in text:
            raise ConfigError(f"stacks.{rendered.stack_name}: the template has no {marker!r} line",
                              hint="a source template marks its vLLM build, install step and runtime stage")
    stack = build.stack
    install = text[text.index(INSTALL): text.index(RUNTIME)].rstrip()
    dockerfile = "\n".join([
        text[: text.index(CUT)].rstrip(),
        "# --- packaging probe: the install step below runs on stand-ins for every extension (nothing compiled)",
        "COPY packaging_probe.py /opt/build/packaging_probe.py",
        "RUN python /opt/build/packaging_probe.py stand-in /opt/build/src/vllm",
        install,
        f"RUN python /opt/build/packaging_probe.py report {OUT} /opt/build/src/vllm",
        "",
    ])
    return _as_probe(rendered, stack, dockerfile, "packaging_probe.py", {PROBE: "packaging"})


@dataclass(frozen=True)
class PackagingResult:
    status: str  # "pass", "fail" or "error"
    reason: str
    image_ref: str
    vllm: str | None  # the version pip installed
    flashinfer: str | None
    torch: str | None
    machine: str | None
    python: str | None
    rust_frontend: str | None  # "built", "not built (...)", "none in this release"
    pip_check: tuple[str, ...]
    installed_line: str | None  # pip's `Successfully installed ...` line of the install step
    duration_s: float
    log_path: str
    build_requirements: tuple[str, ...] = ()  # each build requirement as the finished image meets it
    stand_ins: tuple[str, ...] = ()  # the extensions the probe stood in for (nothing compiled)


class StandIns(Open):
    """The extensions the packaging probe stood in for (docker/packaging_probe.py's list)."""

    extensions: list[str] = []
    python_only: list[str] = []


class PackagingReport(Open):
    """packaging.json, written in the image by docker/packaging_probe.py `report`: what got
    installed. Every fact may be absent; unknown keys are kept."""

    machine: str | None = None
    python: str | None = None
    vllm: str | None = None
    flashinfer: str | None = None
    torch: str | None = None
    pip_check_rc: int | None = None
    pip_check: list[str] = []
    rust_frontend: str | None = None
    site_packages: str | None = None
    stand_in: StandIns | None = None
    build_requirements_rc: int | None = None
    build_requirements: list[str] = []


# pip's last line of the vLLM install step (FlashInfer's install before it has one too)
INSTALLED = re.compile(r"^Successfully installed .*\bvllm-\S+.*$", re.MULTILINE)


def judge_packaging(data: PackagingReport, want_vllm: str | None) -> tuple[str, str]:
    if not data.vllm:
        return "fail", "vLLM is not installed after the install step (build log)"
    if want_vllm and data.vllm.split("+")[0] != want_vllm:
        return "fail", f"installed vLLM {data.vllm}, the stack pins {want_vllm}"
    if data.pip_check_rc not in (0, None):
        return "fail", "pip check: " + "; ".join(data.pip_check)[:400]
    if data.build_requirements_rc not in (0, None):
        unmet = [x for x in data.build_requirements if x.startswith("harness:")]
        return "fail", "build requirements not met in the image: " + "; ".join(unmet)[:400]
    return "pass", ""


def packaging_probe(build: StackBuild, *, engine, log_dir: Path, on_event=None,
                    force: bool = False) -> PackagingResult:
    """Build the packaging probe image of one source stack and read what it installed."""
    stack, stack_name = build.stack, build.name
    base = render(build.with_values({"FLASHINFER_AOT": JIT_ONLY}))
    rendered = replace(render_packaging(base, build), stack_name=f"{stack_name}-pkgprobe")
    ref = rendered.image_ref
    outcome = build_one(rendered, engine=engine, log_dir=log_dir, force=force, on_event=on_event, audit=False)
    # the install step's pip line is near the end of the log (only the report step comes after it)
    log_tail = tail_text(outcome.log_path, what="build log") if outcome.log_path else ""
    m = INSTALLED.findall(log_tail)
    if outcome.status not in ("built", "reused"):
        return PackagingResult("fail", outcome.reason or "the packaging probe's build failed", ref, None, None, None,
                               None, None, None, (), m[-1] if m else None, outcome.duration_s or 0.0,
                               outcome.log_path or "")
    with tempfile.TemporaryDirectory(prefix="harness-pkgprobe-") as tmp:
        try:
            out = engine.export_path(ref, f"{OUT}/packaging.json", Path(tmp), labels=rendered.labels)
            doc = load_json(out / "packaging.json", limit=1 << 20, what="packaging probe result")
            # a document that is not an object reports nothing installed (judged below)
            data = PackagingReport.model_validate(doc if isinstance(doc, dict) else {})
        except (EngineError, OSError, ValueError) as exc:  # a ValidationError is a ValueError
            return PackagingResult("error", f"packaging probe output unreadable: {exc}", ref, None, None, None,
                                   None, None, None, (), None, outcome.duration_s or 0.0, outcome.log_path or "")
    status, reason = judge_packaging(data, stack.vllm.pypi if stack.vllm else None)
    s = lambda v: v[:200] if v is not None else None  # noqa: E731 - values from the image, capped
    return PackagingResult(status, reason, ref, s(data.vllm), s(data.flashinfer), s(data.torch), s(data.machine),
                           s(data.python), s(data.rust_frontend), tuple(x[:300] for x in data.pip_check[:40]),
                           m[-1][:32000] if m else None, outcome.duration_s or 0.0, outcome.log_path or "",
                           tuple(x[:300] for x in data.build_requirements[:200]),
                           tuple(x[:200] for x in (data.stand_in.extensions if data.stand_in else [])[:200]))


@dataclass(frozen=True)
class ProbeRow:
    family: str
    source: str
    stock: str | None
    patched: str | None
    archs: str  # cubin archs of the compiled object, e.g. "sm_90a=1,sm_121a=1"
    verdicts: tuple[str, ...]  # per target: "pass: ..." (SASS checked for FP4 units)
    fp4: bool
    step_s: float | None = None  # the unit's compile step, its own time (.ninja_log in the image)


class UnitResult(Open):
    """One probed unit in probe.json (docker/probe_build.py): its units.toml entry, the arch
    decision of the stock and the patched configure, and the object copied out (None: not built)."""

    family: str = ""
    source: str = ""
    stock: str | None = None
    patched: str | None = None
    target: str | None = None
    object: str | None = None
    step_s: float | None = None  # its compile step's own time (.ninja_log)


class PerSource(Open):
    """A figure of the stock and of the patched configure."""

    stock: float | None = None
    patched: float | None = None


class ExitPerSource(Open):
    """The exit code of the stock and of the patched configure."""

    stock: int | None = None
    patched: int | None = None


class ProbeReport(Open):
    """probe.json, written in the probe image by docker/probe_build.py; unknown keys are kept. A
    configure that failed leaves no units and no compile figures."""

    units: list[UnitResult] = []
    configure_s: PerSource = PerSource()
    configure_rc: ExitPerSource = ExitPerSource()
    compile_s: float | None = None
    compile_rc: int | None = None
    toolchain: dict[str, str] = {}  # what compiled the units, read in the image (python, torch, nvcc, cxx, cmake)
    decisions: dict[str, dict[str, str]] = {}  # "stock"/"patched" -> every arch decision the configure printed


class ProbeTimings(Open):
    """How long the units probe took: `timings` of probe-<stack>.json."""

    configure_s: PerSource | None = None
    compile_s: float | None = None
    image_build_s: float | None = None


@dataclass(frozen=True)
class ProbeOutcome:
    stack: str
    image_ref: str
    status: str  # "pass", "fail" or "error"
    reason: str
    rows: tuple[ProbeRow, ...]
    timings: ProbeTimings | None  # None: the units probe did not run to the end
    log_path: str
    packaging: PackagingResult | None = None  # the packaging probe, when asked
    units_status: str = ""  # the units probe's own status ("skipped" when not asked)
    compile_cache: CompileCache | None = None  # of the units probe image's build
    # the probe image's harness.* labels: the pins, the patches, the sources it read (stand-ins
    # named) and, inherited from a stand-in base, how that base differs from the registry's
    labels: tuple[tuple[str, str], ...] = ()
    toolchain: tuple[tuple[str, str], ...] = ()  # read in the image by probe_build.py
    decisions: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # stock/patched: every arch decision

    def as_json(self) -> dict[str, object]:
        """probe-<stack>.json: the fields in order, `timings` {} when there are none."""
        doc = asdict(replace(self, timings=None, compile_cache=None))
        doc["timings"] = self.timings.model_dump(mode="json") if self.timings else {}
        doc["compile_cache"] = self.compile_cache.model_dump(mode="json") if self.compile_cache else None
        doc["labels"] = dict(self.labels)
        doc["toolchain"] = dict(self.toolchain)
        doc["decisions"] = {k: dict(v) for k, v in self.decisions}
        return doc


PARTS = ("packaging", "units")
LABELS = PREFIX + "."  # the image labels a probe record keeps (what the image is, and what its base is)


def collect(engine, ref: str, labels: dict[str, str], units: tuple[Unit, ...], ccs: tuple[str, ...],
            dest: Path, keep_logs: Callable[[str, str], object] | None = None) -> tuple[ProbeReport, list[ProbeRow]]:
    """probe.json and the audit of each object, copied out of the probe image (never started)."""

    out = engine.export_path(ref, OUT, dest, labels=labels) / Path(OUT).name
    data = ProbeReport.model_validate(load_json(out / "probe.json", limit=16 << 20, what="probe result"))
    if keep_logs is not None:  # each configure log whole, beside the record: what decided each arch list
        for side in ("stock", "patched"):
            name = f"{side}-configure.log"
            if Root(out, what="probe output").exists(name):
                keep_logs(side, Root(out, what="probe output").load_text(name, limit=16 << 20))
    rows = []
    for u, row in zip(units, data.units, strict=False):
        archs = "not compiled"
        verdicts: tuple[str, ...] = ()
        # judged for the chips the unit was built for (an SM12x kernel has nothing for a 9.0 chip)
        built_for = {str(c) for c in ArchList.read(row.patched or "").ccs}
        targets = [Target.from_cc(cc) for cc in sorted(built_for & set(ccs)) or ccs]
        if row.object:
            with tempfile.TemporaryDirectory() as one:
                # the name comes out of the probe image: a plain file name inside objects/, nothing else
                obj = under(out / "objects", row.object, what="probe object")
                shutil.copyfile(obj, Path(one) / obj.name)
                report = audit_path(Path(one), targets, jobs=1)
            archs = ",".join(f"{a}={n}" for a, n in sorted(report.totals().items())) or "no cubins"
            verdicts = tuple(f"{v.target.name}: {v.status}: {v.message}" for v in report.verdicts)
        rows.append(ProbeRow(u.family, u.source, row.stock, row.patched, archs, verdicts, u.fp4, row.step_s))
    return data, rows


def judge(rows: list[ProbeRow], data: ProbeReport, asked: ArchList | None = None) -> tuple[str, str]:
    """The units probe's verdict. Besides the configure, the compile and the audit of each
    object's SASS, the arch decision itself: the stack asked `asked`; a configure that silently
    built something else for the SM12x NVFP4 kernels (asked 12.1a, got 12.0f) is THE trap the
    tool exists to catch, and fails as it does in a full build (image/buildlog.py), whatever the
    SASS of the code it built holds: that is reported beside it, for a GPU to weigh."""
    if data.configure_rc.patched != 0:
        return "fail", "the patched source does not configure (probe.log)"
    if data.compile_rc not in (0, None):
        return "fail", "a probed translation unit does not compile (probe.log)"
    nvfp4 = data.decisions.get("patched", {}).get("SM12x NVFP4")
    trap = nvfp4_problems(asked, tuple(split(nvfp4))) if asked is not None and nvfp4 else []
    bad = [r.family for r in rows if any(": fail:" in v for v in r.verdicts)]
    reasons = ([f"the trap: {'; '.join(str(p) for p in trap)}"] if trap else []) + \
        ([f"audit fails for {', '.join(bad)}"] if bad else [])
    return ("fail", "; ".join(reasons)) if reasons else ("pass", "")


def probe_stack(build: StackBuild, *, engine, log_dir: Path, on_event=None, force: bool = False,
                units: tuple[Unit, ...] | None = None, parts: tuple[str, ...] = PARTS) -> ProbeOutcome:
    """The probe of one source stack: `packaging` (the install step on stand-in extensions) and
    `units` (configure stock and patched, compile the verdict's units, audit them), each asked."""
    packaging = (packaging_probe(build, engine=engine, log_dir=log_dir, on_event=on_event, force=force)
                 if "packaging" in parts else None)
    if "units" in parts:
        o = _units_probe(build, engine=engine, log_dir=log_dir, on_event=on_event, force=force, units=units)
    else:
        o = ProbeOutcome(build.name, "", "skipped", "", (), None, "")
    statuses = [o.status] if "units" in parts else []
    statuses += [packaging.status] if packaging else []
    status = next((s for s in ("error", "fail") if s in statuses), "pass")
    reasons = []
    if o.reason:
        reasons.append(f"units: {o.reason}")
    if packaging and packaging.reason:
        reasons.append(f"packaging: {packaging.reason}")
    ref = o.image_ref or (packaging.image_ref if packaging else "")
    labels = (engine.image_labels(ref) or {}) if ref else {}
    kept = tuple(sorted((k[:200], v[:2000]) for k, v in labels.items() if k.startswith(LABELS)))[:400]
    return replace(o, status=status, reason="; ".join(reasons), packaging=packaging, units_status=o.status,
                   labels=kept)


def _units_probe(build: StackBuild, *, engine, log_dir: Path, on_event=None, force: bool = False,
                 units: tuple[Unit, ...] | None = None) -> ProbeOutcome:
    stack, stack_name = build.stack, build.name
    if units is None:
        units = load_units(stack.vllm.pypi or "") if stack.vllm and stack.vllm.pypi else None
    if not units:
        raise ConfigError(f"stacks.{stack_name}: no probe units for this vLLM ({UNITS.name})",
                          hint="add the release's translation units to the units table, or probe only "
                               "the packaging (--probe-parts packaging)")
    # `<stack>-probe` names the image tag and the log file; the labels keep the stack's name
    rendered = replace(render_probe(render(build), build, units), stack_name=f"{stack_name}-probe")
    ref = rendered.image_ref
    outcome = build_one(rendered, engine=engine, log_dir=log_dir, force=force, on_event=on_event, audit=False)
    if outcome.status not in ("built", "reused"):
        return ProbeOutcome(stack_name, ref, "error", outcome.reason or "probe build failed", (), None,
                            outcome.log_path or "")
    ccs = build.audit_ccs
    with tempfile.TemporaryDirectory(prefix="harness-probe-") as tmp:
        try:
            root = Root(log_dir, what="--log-dir", create=True)
            data, rows = collect(engine, ref, rendered.labels, units, ccs, Path(tmp),
                                 keep_logs=lambda side, text: root.save_text(f"{stack_name}.{side}-configure.log",
                                                                             text))
        except (EngineError, OSError, ValueError) as exc:
            return ProbeOutcome(stack_name, ref, "error", f"probe output unreadable: {exc}", (), None,
                                outcome.log_path or "")
    status, reason = judge(rows, data, stack.torch_cuda_arch_list)
    timings = ProbeTimings(configure_s=data.configure_s if "configure_s" in data.model_fields_set else None,
                           compile_s=data.compile_s, image_build_s=outcome.duration_s)
    cap = lambda v: str(v)[:300]  # noqa: E731 - strings from the image, capped
    return ProbeOutcome(stack_name, ref, status, reason, tuple(rows), timings, outcome.log_path or "",
                        compile_cache=outcome.compile_cache,
                        toolchain=tuple((cap(k), cap(v)) for k, v in list(data.toolchain.items())[:20]),
                        decisions=tuple((cap(side), tuple((cap(k), cap(v)) for k, v in list(d.items())[:200]))
                                        for side, d in list(data.decisions.items())[:2]))
