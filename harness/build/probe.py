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
import shutil
import tempfile
import tomllib
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.audit import Target, audit_path
from harness.build.builder import build_one, local_base_id
from harness.build.dockerfile import render
from harness.build.offline_stack import offline_parts
from harness.build.render import DOCKER_DIR, Rendered, content_hash
from harness.errors import ConfigError, EngineError
from harness.safety.paths import under
from harness.safety.readers import load_json

UNITS = Path(str(resources.files("harness").joinpath("data", "probe", "units.toml")))
CUT = "# --- vLLM build (`harness build --probe` replaces everything from here on)"
OUT = "/opt/build/probe"


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


def render_probe(rendered: Rendered, matrix, units: tuple[Unit, ...]) -> Rendered:
    """The probe build of a rendered source stack."""
    text = rendered.dockerfile
    if CUT not in text:
        raise ConfigError(f"stacks.{rendered.stack_name}: the template has no probe cut line",
                          hint=f"a source template needs the line {CUT!r} before the vLLM build step")
    stack = matrix.spec.stacks[rendered.stack_name]
    offline_env = " && true \\"
    if stack.offline:

        offline_env = offline_parts(matrix, rendered.stack_name, stack,
                                    [p.data for p in rendered.patches if p.series == "vllm"]).values["OFFLINE_ENV"]
    units_json = json.dumps([u.model_dump() for u in units]).replace("'", "")
    probe = "\n".join([
        CUT.replace("replaces everything from here on", "stops here: the probe step instead"),
        "COPY probe_build.py /opt/build/probe_build.py",
        "COPY compile_cache.py /opt/build/compile_cache.py",  # the units compile through the cache
        "ARG COMPILE_CACHE_URL",
        'RUN eval "$(python /opt/build/compile_cache.py env "${COMPILE_CACHE_URL}")" \\',
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
    dockerfile = head + probe
    files = tuple(f for f in rendered.files if f[0] != "compile_cache.py") + tuple(
        (name, (DOCKER_DIR / name).read_bytes()) for name in ("probe_build.py", "compile_cache.py"))
    digest = content_hash(dockerfile, rendered.buildargs, files, stack)
    labels = {**rendered.labels, "harness.role": "probe", "harness.content-hash": digest}
    return replace(rendered, dockerfile=dockerfile, files=files, content_hash=digest, labels=labels)


@dataclass(frozen=True)
class ProbeRow:
    family: str
    source: str
    stock: str | None
    patched: str | None
    archs: str  # cubin archs of the compiled object, e.g. "sm_90a=1,sm_121a=1"
    verdicts: tuple[str, ...]  # per target: "pass: ..." (SASS checked for FP4 units)
    fp4: bool


@dataclass(frozen=True)
class ProbeOutcome:
    stack: str
    image_ref: str
    status: str  # "pass", "fail" or "error"
    reason: str
    rows: tuple[ProbeRow, ...]
    timings: dict
    log_path: str
    compile_cache: dict | None = None  # CompileCache of the probe image's build, as JSON


def collect(engine, ref: str, labels: dict[str, str], units: tuple[Unit, ...], ccs: tuple[str, ...],
            dest: Path) -> tuple[dict, list[ProbeRow]]:
    """probe.json and the audit of each object, copied out of the probe image (never started)."""

    out = engine.export_path(ref, OUT, dest, labels=labels) / Path(OUT).name
    data = load_json(out / "probe.json", limit=16 << 20, what="probe result")
    rows = []
    for u, row in zip(units, data["units"], strict=False):
        archs = "not compiled"
        verdicts: tuple[str, ...] = ()
        # judged for the chips the unit was built for (an SM12x kernel has nothing for a 9.0 chip)
        targets = [Target.from_cc(cc) for cc in sorted(_ccs_of(row.get("patched") or "") & set(ccs)) or ccs]
        if row.get("object"):
            with tempfile.TemporaryDirectory() as one:
                # the name comes out of the probe image: a plain file name inside objects/, nothing else
                obj = under(out / "objects", str(row["object"]), what="probe object")
                shutil.copyfile(obj, Path(one) / obj.name)
                report = audit_path(Path(one), targets, jobs=1)
            archs = ",".join(f"{a}={n}" for a, n in sorted(report.totals().items())) or "no cubins"
            verdicts = tuple(f"{v.target.name}: {v.status}: {v.message}" for v in report.verdicts)
        rows.append(ProbeRow(u.family, u.source, row.get("stock"), row.get("patched"), archs, verdicts, u.fp4))
    return data, rows


def judge(rows: list[ProbeRow], data: dict) -> tuple[str, str]:
    if data.get("configure_rc", {}).get("patched") != 0:
        return "fail", "the patched source does not configure (probe.log)"
    if data.get("compile_rc") not in (0, None):
        return "fail", "a probed translation unit does not compile (probe.log)"
    bad = [r.family for r in rows if any(": fail:" in v for v in r.verdicts)]
    if bad:
        return "fail", f"audit fails for {', '.join(bad)}"
    return "pass", ""


def probe_stack(matrix, stack_name: str, *, engine, log_dir: Path, on_event=None, force: bool = False,
                units: tuple[Unit, ...] | None = None) -> ProbeOutcome:

    stack = matrix.spec.stacks[stack_name]
    if units is None:
        units = load_units(stack.vllm.pypi or "") if stack.vllm and stack.vllm.pypi else None
    if not units:
        raise ConfigError(f"stacks.{stack_name}: no probe units for this vLLM ({UNITS.name})",
                          hint="add the release's translation units to the units table")
    # `<stack>-probe` names the image tag and the log file; the labels keep the stack's name
    rendered = replace(render_probe(render(matrix, stack_name, base_image_id=local_base_id(matrix, stack_name, engine)),
                                     matrix, units), stack_name=f"{stack_name}-probe")
    ref = rendered.image_ref
    outcome = build_one(rendered, engine=engine, log_dir=log_dir, force=force, on_event=on_event, audit=False)
    if outcome.status not in ("built", "reused"):
        return ProbeOutcome(stack_name, ref, "error", outcome.reason or "probe build failed", (), {},
                            outcome.log_path or "")
    ccs = tuple(sorted({matrix.spec.hardware[matrix.spec.matrix.hardware].cc}
                       | _ccs_of(stack.torch_cuda_arch_list or "")))
    with tempfile.TemporaryDirectory(prefix="harness-probe-") as tmp:
        try:
            data, rows = collect(engine, ref, rendered.labels, units, ccs, Path(tmp))
        except (EngineError, OSError, ValueError) as exc:
            return ProbeOutcome(stack_name, ref, "error", f"probe output unreadable: {exc}", (), {},
                                outcome.log_path or "")
    status, reason = judge(rows, data)
    timings = {"configure_s": data.get("configure_s"), "compile_s": data.get("compile_s"),
               "image_build_s": outcome.duration_s}
    cache = outcome.compile_cache.model_dump(mode="json") if outcome.compile_cache else None
    return ProbeOutcome(stack_name, ref, status, reason, tuple(rows), timings, outcome.log_path or "", cache)


def _ccs_of(arch_list: str) -> set[str]:
    out = set()
    for item in arch_list.replace(",", ";").replace(" ", ";").split(";"):
        item = item.strip().removesuffix("+PTX")
        if item:
            out.add(item.rstrip("af"))
    return out
