"""Render the Dockerfile of one stack: a pure function from (matrix, stack, template) to text,
build args, labels and the build-context files, plus the content hash that names the image.

The template keeps pins out of its text: every pin is a build ARG (so the same template serves
every stack) and also an image label (so `docker inspect` answers "what is in this image"
without the matrix file). Only structure is rendered into the text: one COPY + `git apply` per
patch, in series order. No `# syntax=` line and no `RUN --mount`: the same text builds on the
legacy builder and on BuildKit, which would pull a frontend image for a syntax line (an
air-gapped host cannot); the compile cache reaches the steps over the host's network.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TypeVar

from harness import labels as label
from harness import platforms
from harness.archs import split
from harness.errors import ConfigError
from harness.image.offline_stack import offline_parts, online
from harness.image.requirements import REQUIREMENTS_FILE, StackRequirements, for_stack
from harness.image.stackbuild import StackBuild
from harness.matrix.load import Matrix
from harness.matrix.model import Stack
from harness.platforms import Platform
from harness.safety.paths import read_bytes

_T = TypeVar("_T")


def _part(key: str, value: _T | None) -> _T:
    """A source-build pin that Stack's validator requires of a docker stack with no `image`
    and no `wheels` (the only stacks rendered from this template); None means a caller
    rendered another kind of stack, which is bad input, not a crash further down."""
    if value is None:
        raise ConfigError(f"stacks: a stack built from source needs `{key}`",
                          hint=f"set `{key}` in the stack, or give it `image` or `wheels` instead")
    return value

IMAGE_REPO = "vllm-bw"


def _docker_dir() -> Path:
    """The Dockerfile templates and their helpers. They live in the repository's top-level
    docker/; a wheel carries them inside the package (setup.py copies them to harness/data/docker,
    read through importlib.resources), so an installed harness builds without its checkout."""
    packaged = Path(str(resources.files("harness").joinpath("data", "docker")))
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "docker"


DOCKER_DIR = _docker_dir()
DEFAULT_TEMPLATE = DOCKER_DIR / "Dockerfile.vllm.in"
WHEELS_TEMPLATE = DOCKER_DIR / "Dockerfile.wheels.in"  # the wheel-stack sibling

PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")
ARG_LINE = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
COPY_LINE = re.compile(r"^\s*COPY\s+(?:--\S+\s+)*(\S+)\s+\S+\s*$", re.MULTILINE)

NO_SYNTAX = "# no syntax line: BuildKit would pull its frontend image for one"

# FlashInfer's AOT step (python -m flashinfer.aot, its default module set) and, after it, the
# modules moved to where FlashInfer loads AOT modules from and proven to resolve and load there
# (docker/flashinfer_aot_check.py: why, and how). Its build folder holds every object file: gone
# in the same step. `cd /`: the check must import the installed package, not the source tree.
FLASHINFER_AOT_OUT = "/opt/build/flashinfer-aot"
FLASHINFER_AOT_PLACE_AND_CHECK = (
    f'cd / && python /opt/build/flashinfer_aot_check.py place {FLASHINFER_AOT_OUT} \\\n'
    ' && python /opt/build/flashinfer_aot_check.py check 2>&1 | tee -a /opt/build/flashinfer-build.log')
FLASHINFER_AOT_STEP = (
    ' && export FLASHINFER_CUDA_ARCH_LIST="${FLASHINFER_CUDA_ARCH_LIST}" \\\n'
    f' && MAX_JOBS="${{MAX_JOBS}}" python -m flashinfer.aot --out-dir {FLASHINFER_AOT_OUT} '
    f'--build-dir {FLASHINFER_AOT_OUT}-build 2>&1 | tee -a /opt/build/flashinfer-build.log \\\n'
    f' && rm -rf {FLASHINFER_AOT_OUT}-build \\\n'
    f' && {FLASHINFER_AOT_PLACE_AND_CHECK} \\')


@dataclass(frozen=True)
class PatchFile:
    series: str  # "vllm" or "flashinfer"
    rel: str  # path under patches/ as the matrix names it
    context_path: str  # where it sits in the build context, order-prefixed
    sha256: str
    data: bytes = field(repr=False)
    pr_number: int | None = None
    head_sha: str | None = None


@dataclass(frozen=True)
class Rendered:
    stack_name: str
    dockerfile: str
    buildargs: dict[str, str]
    labels: dict[str, str]
    files: tuple[tuple[str, bytes], ...]  # (context path, bytes), Dockerfile excluded
    patches: tuple[PatchFile, ...]
    content_hash: str
    platform: Platform = platforms.AMD64  # the CPU the image is built for
    # read from the pinned sources (None: not read, as for `harness plan`, which needs only the tag)
    requirements: StackRequirements | None = None

    @property
    def image_ref(self) -> str:
        """`vllm-bw:<stack>-<amd64|arm64>-<12 hex>`: the platform is in the tag (and in the hash),
        so an image built for one CPU is never taken for another's."""
        return f"{IMAGE_REPO}:{self.stack_name}-{self.platform.short}-{self.content_hash[:12]}"


def patch_files(matrix: Matrix, stack: Stack) -> list[PatchFile]:
    """The stack's two patch series, in apply order, with their bytes."""
    out: list[PatchFile] = []
    if stack.vllm:
        for i, entry in enumerate(stack.vllm.patches):
            rel = entry.path
            data = read_bytes(matrix.patch_path(rel), limit=64 << 20, what="patch")
            out.append(PatchFile("vllm", rel, f"patches/vllm/{i:02d}-{Path(rel).name}",
                                 hashlib.sha256(data).hexdigest(), data))
    if stack.flashinfer:
        for i, pr in enumerate(stack.flashinfer.prs):
            data = read_bytes(matrix.patch_path(pr.patch), limit=64 << 20, what="patch")
            out.append(PatchFile("flashinfer", pr.patch, f"patches/flashinfer/{i:02d}-{Path(pr.patch).name}",
                                 hashlib.sha256(data).hexdigest(), data, pr.number, pr.head_sha))
    return out


def _apply_lines(series: str, patches: list[PatchFile], src_dir: str) -> str:
    mine = [p for p in patches if p.series == series]
    if not mine:
        return f"# no {series} patches in this stack"
    lines = [f"COPY {p.context_path} /opt/build/{p.context_path}" for p in mine]
    applies = " \\\n && ".join(f"git apply --verbose /opt/build/{p.context_path}" for p in mine)
    lines.append(f"RUN cd {src_dir} \\\n && {applies}")
    return "\n".join(lines)


def vllm_source(stack: Stack) -> tuple[str, str]:
    """(fetch_source.py arguments, label value) for the vLLM pin."""
    v = _part("vllm", stack.vllm)
    if v.pypi:
        return f"pypi vllm {v.pypi}", f"pypi:vllm=={v.pypi} sdist_sha256:{v.sdist_sha256 or 'unchecked'}"
    return f"git {v.git} {v.commit}", f"git:{v.git}@{v.commit}"


def flashinfer_source(stack: Stack) -> tuple[str, str]:
    f = _part("flashinfer", stack.flashinfer)
    if f.version:
        return (f"pypi flashinfer-python {f.version}",
                f"pypi:flashinfer-python=={f.version} sdist_sha256:{f.sdist_sha256 or 'unchecked'}")
    return f"git {f.git} {f.commit}", f"git:{f.git}@{f.commit}"


def buildargs_for(stack: Stack) -> dict[str, str]:
    fi_args, _ = flashinfer_source(stack)
    vllm_args, _ = vllm_source(stack)
    fi = _part("flashinfer", stack.flashinfer)
    torch = _part("torch", stack.torch)
    archs = str(_part("torch_cuda_arch_list", stack.torch_cuda_arch_list))
    return {
        "BASE_IMAGE": _part("base_image", stack.base_image).reference,
        "PYTHON_VERSION": stack.python,
        "TORCH_VERSION": torch.version,
        "TORCH_INDEX_URL": torch.index_url,
        "FLASHINFER_SOURCE": fi_args,
        "FLASHINFER_SDIST_SHA256": fi.sdist_sha256 or "",
        "FLASHINFER_CUDA_ARCH_LIST": " ".join(split(str(stack.flashinfer_cuda_arch_list or archs))),
        "FLASHINFER_CUBIN_SPEC": f"flashinfer-cubin=={fi.version}" if fi.cubin and fi.version else "",
        "VLLM_SOURCE": vllm_args,
        "VLLM_SDIST_SHA256": _part("vllm", stack.vllm).sdist_sha256 or "",
        "TORCH_CUDA_ARCH_LIST": archs,
        "MAX_JOBS": str(stack.max_jobs),
        "NVCC_THREADS": str(stack.nvcc_threads),
    }


def labels_for(stack_name: str, stack: Stack, patches: list[PatchFile], content_hash: str,
               platform: Platform = platforms.AMD64) -> dict[str, str]:
    _, vllm_label = vllm_source(stack)
    _, fi_label = flashinfer_source(stack)
    base = _part("base_image", stack.base_image)
    torch = _part("torch", stack.torch)
    fi = _part("flashinfer", stack.flashinfer)
    archs = str(_part("torch_cuda_arch_list", stack.torch_cuda_arch_list))
    # a local base brings its own torch (the base stage checks its version); no index is used
    torch_from = "from the base image" if base.brings_python else torch.index_url
    labels = {
        label.ROLE: label.Role.IMAGE.value,
        label.STACK: stack_name,
        label.CONTENT_HASH: content_hash,
        label.PLATFORM: platform.docker,
        label.BASE_IMAGE: base.reference,
        label.CUDA: base.tag,
        label.PYTHON: stack.python,
        label.TORCH: f"{torch.version} {torch_from}",
        label.TORCH_CUDA_ARCH_LIST: archs,
        label.FLASHINFER_CUDA_ARCH_LIST: str(stack.flashinfer_cuda_arch_list or archs),
        label.MAX_JOBS: str(stack.max_jobs),
        label.NVCC_THREADS: str(stack.nvcc_threads),
        label.VLLM_SOURCE: vllm_label,
        label.VLLM_PATCHES: ",".join(Path(p.rel).name for p in patches if p.series == "vllm"),
        label.FLASHINFER_SOURCE: fi_label,
        label.FLASHINFER_VERSION: fi.version or "",
        label.FLASHINFER_COMMIT: fi.commit or "",
        label.FLASHINFER_PRS: ",".join(f"#{p.pr_number}@{p.head_sha}" for p in patches
                                       if p.series == "flashinfer"),
    }
    for p in patches:
        labels[label.patch_sha256(p.series, Path(p.rel).name)] = p.sha256
    return labels


def _context_support_files(template_dir: Path, text: str) -> list[tuple[str, bytes]]:
    """Files the template COPYs from its own folder (not patches, not other stages)."""
    out = []
    for src in COPY_LINE.findall(text):
        if src.startswith("patches/") or src.startswith("--"):
            continue
        path = template_dir / src
        if path.is_file():
            out.append((src, path.read_bytes()))
    return sorted(set(out))


def fill(template_text: str, values: dict[str, str], where: str) -> str:
    unknown = sorted(set(PLACEHOLDER.findall(template_text)) - set(values))
    if unknown:
        raise ConfigError(f"{where}: unknown placeholder(s) {', '.join('@' + u + '@' for u in unknown)}",
                          hint=f"use only {', '.join('@' + k + '@' for k in sorted(values))}")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template_text)


def render_source(build: StackBuild, *, template_text: str | None = None, requirements: bool = True) -> Rendered:
    """The Dockerfile, build args, labels and context of a docker stack built from source
    (harness.image.dockerfile.render chooses between this and a wheel stack), for its platform;
    touches no engine.

    `requirements`: read the build requirements from the pinned sources (the sdist is fetched
    into the cache if missing); False leaves them out of the context: the tag is the same (they
    follow from the pins and the platform, which the hash holds), but such a rendering cannot be
    built.
    """
    stack, stack_name, platform, extra = build.stack, build.name, build.platform, build.template_values
    template = build.template or DEFAULT_TEMPLATE
    text = template_text if template_text is not None else template.read_text()
    patches = patch_files(build.matrix, stack)
    parts = (offline_parts(build.matrix, stack_name, stack, [p.data for p in patches if p.series == "vllm"])
             if stack.offline else online(stack))
    fi_aot = stack.flashinfer is None or stack.flashinfer.aot
    dockerfile = fill(text, {
        "SYNTAX": NO_SYNTAX,
        "VLLM_PATCHES": _apply_lines("vllm", patches, "/opt/build/src/vllm"),
        "FLASHINFER_PATCHES": _apply_lines("flashinfer", patches, "/opt/build/src/flashinfer"),
        "FLASHINFER_AOT": FLASHINFER_AOT_STEP if fi_aot
                          else " && echo 'FlashInfer: no AOT kernels (aot = false): JIT on first use' \\",
        **parts.values,
        **extra,
    }, str(template))
    buildargs = {**buildargs_for(stack), **parts.buildargs}
    files = tuple(_context_support_files(template.parent, dockerfile)
                  + [(p.context_path, p.data) for p in patches] + list(parts.files))
    digest = content_hash(dockerfile, buildargs, files, stack, platform)
    labels = {**labels_for(stack_name, stack, patches, digest, platform), **parts.labels}
    if not fi_aot:
        labels[label.FLASHINFER_AOT] = "false"
    reqs = None
    if requirements and REQUIREMENTS_FILE in dockerfile:  # a template that installs none needs none read
        reqs = for_stack(stack_name, stack, platform)
        # derived from the pins (in the hash): added after hashing, so `plan` can name the tag offline
        files = (*files, (REQUIREMENTS_FILE, reqs.file_text().encode()))
    return Rendered(stack_name, dockerfile, buildargs, labels, files, tuple(patches), digest, platform, reqs)


def content_hash(dockerfile: str, buildargs: dict[str, str], files: tuple[tuple[str, bytes], ...],
                 stack: Stack, platform: Platform = platforms.AMD64) -> str:
    """sha256 of everything that decides the image, the CPU platform included; descriptions and
    serve-time env are left out."""
    h = hashlib.sha256()
    h.update(f"platform={platform.docker}\0".encode())
    h.update(dockerfile.encode())
    h.update(json.dumps(buildargs, sort_keys=True).encode())
    for path, data in sorted(files):
        h.update(f"\0{path}\0{hashlib.sha256(data).hexdigest()}".encode())
    # fields added for wheel stacks enter the hash only when set: source stacks keep their tags
    left_out: dict[str, bool | set[str]] = {k: True for k in ("description", "env", "local", "kernel_selection")}
    if stack.wheels is None:
        left_out["wheels"] = True
    if (base := stack.base_image) is not None:
        unset = {"local"} if not base.local else set()
        unset |= {k for k, v in (("image_id", base.image_id), ("python", base.python)) if v is None}
        if unset:
            left_out["base_image"] = unset
    pins = stack.model_dump(mode="json", exclude=left_out)
    h.update(json.dumps(pins, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


def context_tar(rendered: Rendered) -> bytes:
    """The build context as an uncompressed tar: Dockerfile first, then the files, fixed mtimes."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in [("Dockerfile", rendered.dockerfile.encode()), *rendered.files]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
