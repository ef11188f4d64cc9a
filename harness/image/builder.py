"""Build the images the selected stacks need, each once, content-addressed.

A stack whose image (same content hash, so same tag) exists is reused without calling the
engine's build. A failed build is a result (status 'failed', log tail), and the other stacks go
on. After a build the image's site-packages is audited (harness.audit.audit_path) and the arch
lines of the vLLM build log are checked against the stack's TORCH_CUDA_ARCH_LIST.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.archs import ArchList
from harness.audit.report import AuditSummary, audit_path
from harness.audit.verdict import Target
from harness.errors import BuildFailed, ConfigError, EngineError
from harness.image import cache_store, compile_cache, offline
from harness.image.buildlog import check_build_log
from harness.image.dockerfile import render
from harness.image.render import Rendered, context_tar
from harness.image.stackbuild import StackBuild
from harness.labels import Role, role
from harness.redact import redact_text
from harness.results.build import BuildOutcome
from harness.safety.paths import tail_text
from harness.safety.roots import Root
from harness.safety.writes import open_new

SITE_PACKAGES = "/opt/venv/lib"
VLLM_BUILD_LOG = "/opt/build/vllm-build.log"
# the containers created (never started) to copy an image's files out for the audit
AUDIT = role(Role.AUDIT)


@dataclass(frozen=True)
class BuildEvent:
    stack: str
    kind: Literal["start", "step", "line", "done"]
    text: str
    elapsed_s: float


def unpinned(builds: list[StackBuild]) -> list[str]:
    """Base images with no digest; a local base (pinned by its image ID at build time) is pinned.
    A stack with no base image (a prebuilt `image`) builds nothing, so it has nothing to pin."""
    return [why for b in builds if (why := b.unpinned) is not None]


# what an image may say its site-packages is: an absolute path of plain names, nothing climbing
_SITE = re.compile(r"^(/[A-Za-z0-9._+-]+){1,16}$")


def image_note(engine, ref: str, path: str, labels: dict[str, str]) -> str | None:
    """A short note the build wrote into the image (`/opt/build/<name>.txt`, at most 4 KiB),
    copied out without starting it; None when the image has none. It comes from the image: a link
    or a FIFO there is refused, never followed, and callers check what it says."""
    with tempfile.TemporaryDirectory(prefix="harness-note-") as tmp:
        try:
            dest = engine.export_path(ref, path, Path(tmp), labels=labels)
        except EngineError:
            return None
        try:
            return Root(dest, what="exported file").load_text(Path(path).name, limit=4096).strip()
        except (ConfigError, FileNotFoundError):
            return None


def image_site_packages(engine, ref: str, labels: dict[str, str]) -> str | None:
    """Where an image installed vLLM, as its build wrote it (docker/wheels.py for a wheel stack,
    the source template's install step); None when the image has no such file or the file does
    not hold a plain absolute path (it comes from the image, so it is checked, never trusted)."""
    text = image_note(engine, ref, "/opt/build/site-packages.txt", labels)
    return text if text is not None and _SITE.match(text) and ".." not in text.split("/") else None


RUST_FRONTEND = "/opt/build/rust-frontend.txt"


def image_rust_frontend(engine, ref: str, labels: dict[str, str]) -> str | None:
    """What the install step wrote of vLLM's Rust front end (the template's rust-frontend.txt);
    None when the image has no such file. One short line: bounded, printable."""
    text = (image_note(engine, ref, RUST_FRONTEND, labels) or "")[:200].strip()
    return "".join(c for c in text if c.isprintable()) or None


def _step_of(line: str) -> str | None:
    return line.strip() if line.startswith("Step ") else None


def export_packages(engine, ref: str, path: str, dest: Path, labels: dict[str, str],
                    also: tuple[str, ...] = ()) -> Path:
    """Copy `path` (which must exist: EngineError otherwise) and each of `also` the image has out
    of an image into `dest`, never starting it."""
    dest = engine.export_path(ref, path, dest, labels=labels)
    for extra in also:
        with contextlib.suppress(EngineError):  # not installed in this image: nothing to read
            engine.export_path(ref, extra, dest, labels=labels)
    return dest


# FlashInfer's packages that can hold compiled kernels (its AOT/JIT-cache and cubin wheels)
FLASHINFER_PACKAGES = ("flashinfer", "flashinfer_cubin", "flashinfer_jit_cache")


def stack_packages(site: str) -> tuple[str, tuple[str, ...]]:
    """What a stack image's audit reads under its site-packages: vllm, and FlashInfer's packages
    where installed."""
    return f"{site}/vllm", tuple(f"{site}/{name}" for name in FLASHINFER_PACKAGES)


def audit_image(engine, ref: str, labels: dict[str, str], path: str = SITE_PACKAGES,
                ccs: tuple[str, ...] = (), also: tuple[str, ...] = ()) -> AuditSummary | None:
    """The compiled archs of the image's Python packages (copied out, never started), judged
    for the compute capabilities `ccs` (the matrix hardware's): `path`, which must exist, and
    each of `also` the image has (the FlashInfer packages beside vLLM)."""

    with tempfile.TemporaryDirectory(prefix="harness-audit-") as tmp:
        try:
            dest = export_packages(engine, ref, path, Path(tmp), labels, also)
        except EngineError as exc:
            return AuditSummary.not_audited(str(exc))
        return AuditSummary.of(audit_path(dest, [Target.from_cc(cc) for cc in ccs]))


def audit_stack_image(engine, ref: str, labels: dict[str, str], ccs: tuple[str, ...]) -> AuditSummary | None:
    """audit_image on where a stack image keeps vLLM and FlashInfer: those packages under the
    site-packages the build recorded (/opt/build/site-packages.txt: a wheel stack, or a source
    stack, also on a base whose Python is its own, e.g. a root file system with /opt/torch/.venv),
    not the base's torch; an image that recorded none (built before the file existed), the whole
    /opt/venv/lib."""
    site = image_site_packages(engine, ref, AUDIT)
    if site is None:
        return audit_image(engine, ref, AUDIT, SITE_PACKAGES, ccs)
    vllm, also = stack_packages(site)
    return audit_image(engine, ref, AUDIT, vllm, ccs, also=also)


def build_log_problems(engine, ref: str, torch_cuda_arch_list: ArchList, labels: dict[str, str]) -> tuple[str, ...]:
    with tempfile.TemporaryDirectory(prefix="harness-buildlog-") as tmp:
        try:
            dest = engine.export_path(ref, VLLM_BUILD_LOG, Path(tmp), labels=labels)
        except EngineError:
            return ()  # an image without the vLLM build log (a test image): nothing to check
        try:  # from the image: a link or a FIFO there is refused, never followed
            text = Root(dest, what="exported file").load_text(Path(VLLM_BUILD_LOG).name, limit=256 << 20)
        except (ConfigError, FileNotFoundError) as exc:
            return (f"{VLLM_BUILD_LOG} in the image is not a readable regular file: "
                    f"{getattr(exc, 'message', 'missing')}",)
    return tuple(str(p) for p in check_build_log(text, torch_cuda_arch_list))


def build_one(rendered: Rendered, *, engine, log_dir: Path, force: bool = False,
              on_event: Callable[[BuildEvent], None] | None = None, audit: bool = True,
              torch_cuda_arch_list: ArchList | None = None, audit_ccs: tuple[str, ...] = ()) -> BuildOutcome:
    emit = on_event or (lambda _e: None)
    name, ref = rendered.stack_name, rendered.image_ref
    start = time.monotonic()
    existing = engine.image_labels(ref)
    if existing is not None and (got := engine.image_platform(ref)) is not None and got != rendered.platform:
        # the tag holds the platform, so only an image made outside this tool can be here: never
        # serve another CPU's binaries; build this one's over it
        emit(BuildEvent(name, "line", f"{ref} is {got.docker}, not {rendered.platform.docker}: rebuilding", 0.0))
        force = True
    if existing is not None and not force:
        # A reused image is audited again (seconds: its packages are copied out, never run): the
        # run records what every image it serves holds, not only the ones it built this time.
        summary = audit_stack_image(engine, ref, existing, audit_ccs) if audit else None
        rust = image_rust_frontend(engine, ref, AUDIT) if audit else None
        emit(BuildEvent(name, "done", "reused", time.monotonic() - start))
        return BuildOutcome(stack=name, image_ref=ref, image_id=engine.image_id(ref), status="reused",
                            labels=existing, audit=summary, rust_frontend=rust)
    if existing is not None:
        engine.remove_image(ref)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"build-{name}.log"
    tail: list[str] = []
    emit(BuildEvent(name, "start", ref, 0.0))

    with open_new(log_path, flag="--log-dir file") as log:  # never through a planted link
        hidden: list[str] = []  # the compile cache's secret, should a step print it

        def masked(line: str) -> str:
            line = redact_text(line)  # a git URL or a build arg may carry a credential
            for secret in hidden:
                line = line.replace(secret, "***")
            return line

        def on_line(line: str) -> None:
            line = masked(line)
            log.write(line + "\n")
            log.flush()
            tail.append(line)
            del tail[:-40]
            step = _step_of(line)
            emit(BuildEvent(name, "step" if step else "line", step or line, time.monotonic() - start))

        marks: list[str] = []  # the compile steps' `harness-compile-cache:` lines

        def on_build_line(line: str) -> None:
            if compile_cache.MARK in line:
                marks.append(line)
            on_line(line)

        uses_cache = compile_cache.STEP in rendered.dockerfile
        keep = compile_cache.max_bytes() if uses_cache else 0  # a bad setting stops here, not after the build
        with cache_store.serving() if uses_cache else contextlib.nullcontext(None) as served:
            # the store's port and secret reach the RUN steps as an /etc/hosts entry of theirs:
            # not a build argument (the image's history keeps those, and they are part of the
            # layer cache's key), so the image and its content hash are the same with or without
            if served and served.on:
                hidden.append(served.secret)
            try:
                image_id = engine.build(context_tar(rendered), ref, labels=rendered.labels,
                                        buildargs=rendered.buildargs, on_line=on_build_line,
                                        network_mode="host" if served and served.on else None,
                                        extra_hosts=served.extra_hosts() if served else None,
                                        platform=rendered.platform.docker)
            except BuildFailed as exc:
                took = time.monotonic() - start
                emit(BuildEvent(name, "done", "failed", took))
                # the engine's own lines and error (which may quote the build's URL, extra hosts
                # included) are masked as the log is
                return BuildOutcome(stack=name, image_ref=ref, status="failed", log_path=str(log_path),
                                    log_tail=tuple(masked(x) for x in exc.log_tail[-40:]) or tuple(tail),
                                    duration_s=took, labels=rendered.labels, reason=masked(exc.message),
                                    compile_cache=compile_cache.from_build_output(marks, served.why_off)
                                    if served else None)
            finally:
                if served and served.store is not None:
                    compile_cache.prune(keep, served.store)
    took = time.monotonic() - start
    cache_record = compile_cache.from_build_output(marks, served.why_off) if served else None
    labels = engine.image_labels(ref) or rendered.labels
    summary = audit_stack_image(engine, ref, rendered.labels, audit_ccs) if audit else None
    problems = (build_log_problems(engine, ref, torch_cuda_arch_list, AUDIT)
                if torch_cuda_arch_list is not None else ())
    rust = image_rust_frontend(engine, ref, AUDIT) if audit else None
    emit(BuildEvent(name, "done", "built", took))
    return BuildOutcome(stack=name, image_ref=ref, image_id=image_id, status="built",
                        log_path=str(log_path), log_tail=tuple(tail), duration_s=took, labels=labels,
                        audit=summary, arch_problems=tuple(problems), rust_frontend=rust,
                        compile_cache=cache_record)


def build_stacks(builds: list[StackBuild], *, engine, log_dir: Path, force: bool = False,
                 allow_unpinned: bool = False, on_event: Callable[[BuildEvent], None] | None = None,
                 audit: bool = True) -> dict[str, BuildOutcome]:
    """Each stack's image once (harness.image.stackbuild.resolve made `builds`: the lock applied,
    the platform and options fixed), on `engine`."""
    if not allow_unpinned and (problems := unpinned(builds)):
        hint_path = builds[0].matrix.path.name
        raise ConfigError("unpinned base image(s):\n  - " + "\n  - ".join(problems),
                          hint=f"`harness lock -m {hint_path}` pins them (`harness run` does it "
                          "itself), or pass --allow-unpinned for a build you will not compare against")
    out: dict[str, BuildOutcome] = {}
    for build in builds:
        name = build.name
        out[name] = build_one(render(build), engine=engine, log_dir=log_dir, force=force, on_event=on_event,
                              audit=audit, torch_cuda_arch_list=build.stack.torch_cuda_arch_list,
                              audit_ccs=build.audit_ccs)
        if out[name].failed and build.stack.offline:
            out[name] = name_fetch_attempts(build, out[name])
    return out


def name_fetch_attempts(build: StackBuild, outcome: BuildOutcome) -> BuildOutcome:
    """An offline build that failed because CMake still tried to fetch: say which source."""
    stack = build.stack
    table = offline.load_table(stack.vllm.pypi) if stack.vllm and stack.vllm.pypi else None
    if table is None:
        return outcome
    text = "\n".join(outcome.log_tail)
    if outcome.log_path and Path(outcome.log_path).is_file():
        text = tail_text(outcome.log_path, max_bytes=64 << 20, what="build log")
    tried = offline.fetch_attempts(text, table)
    if not tried:
        return outcome
    why = (f"vLLM's CMake tried to fetch {', '.join(tried)} with the network off: pin it in "
           f"{table.path.name} and `harness sources fetch`, or leave it out with a patch (Leaves-out:)")
    return outcome.model_copy(update={"reason": why + (f"; {outcome.reason}" if outcome.reason else "")})
