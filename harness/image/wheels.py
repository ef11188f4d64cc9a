"""Wheel stacks: vLLM from a pinned wheel onto a base image that already holds torch.

The sibling of the source-stack rendering in render.py, with the same outputs (a `Rendered`:
Dockerfile text, build args, labels, context files, content hash, hence the same
`vllm-bw:<stack>-<12 hex>` tag) from docker/Dockerfile.wheels.in. The wheels come from a local
wheelhouse (`harness bundle install --dest`), each checked against its wheels.lock, or the vLLM
wheel from PyPI with its sha256. A wheelhouse made for another CPU than the image's platform, or
holding a wheel tagged for one, is refused before the build. Python-file patches apply to the
installed package. A base image given as a local tag (`base_image.local = true`) is pinned by its image ID: the ID is the FROM,
a label, and part of the hash.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from harness import labels as label
from harness.bundle import LOCK, WheelLock, refuse_other_cpu, wheelhouse_files
from harness.bundle import read_lock as read_bundle_lock
from harness.errors import ConfigError
from harness.image.render import (
    NO_SYNTAX,
    WHEELS_TEMPLATE,
    PatchFile,
    Rendered,
    _context_support_files,
    _part,
    content_hash,
    fill,
)
from harness.image.stackbuild import StackBuild
from harness.safety.paths import read_bytes

PATCH_TARGET = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)


def wheelhouse_dir(build: StackBuild) -> Path | None:
    w = build.stack.wheels
    if w is None or w.wheelhouse is None:
        return None
    path = Path(w.wheelhouse)
    return path if path.is_absolute() else (build.matrix.path.parent / path).resolve()


def read_lock(build: StackBuild) -> tuple[Path, WheelLock] | None:
    where = wheelhouse_dir(build)
    if where is None:
        return None

    if not (where / LOCK).exists():
        raise ConfigError(f"stacks.{build.name}.wheels.wheelhouse: no {where / LOCK}",
                          hint=f"unpack the bundle there first: `harness bundle install DIR --dest {where}`")
    return where, read_bundle_lock(where)  # checked: types, wheel file names, bounded size and depth


def wheel_patches(build: StackBuild) -> list[PatchFile]:
    """The stack's Python-file patches, in order; a patch touching anything but .py files is refused."""
    out = []
    for i, rel in enumerate(build.stack.wheels.patches if build.stack.wheels else ()):
        path = build.matrix.patch_path(rel)
        where = f"stacks.{build.name}.wheels.patches[{i}]"
        if not path.is_file():
            raise ConfigError(f"{where}: patch file not found: {path}", hint="add it under patches/, or fix the path")
        data = read_bytes(path, limit=64 << 20, what=f"{where}: patch")
        targets = PATCH_TARGET.findall(data.decode("utf-8", "replace"))
        if not targets:
            raise ConfigError(f"{where}: {rel} is not a unified diff (no '+++ ' line)")
        if bad := [t for t in targets if not t.endswith(".py")]:
            raise ConfigError(f"{where}: a wheel stack patches installed Python files only; {rel} touches "
                              f"{', '.join(bad)}", hint="build a source stack for C++/CUDA changes")
        out.append(PatchFile("vllm", rel, f"patches/wheel/{i:02d}-{Path(rel).name}",
                             hashlib.sha256(data).hexdigest(), data))
    return out


def _patch_lines(patches: list[PatchFile]) -> str:
    if not patches:
        return "# no Python-file patches in this stack"
    lines = [f"COPY {p.context_path} /opt/build/{p.context_path}" for p in patches]
    lines.append('RUN ${PYTHON} /opt/build/wheels.py patch --python "${PYTHON}" '
                 + " ".join(f"/opt/build/{p.context_path}" for p in patches))
    return "\n".join(lines)


def render_wheels(build: StackBuild, *, template_text: str | None = None) -> Rendered:
    """The image of a wheel stack, for the build's platform (the wheelhouse must match it)."""
    stack, stack_name, platform = build.stack, build.name, build.platform
    base_image_id, extra = build.base_image_id, build.template_values
    assert stack.wheels is not None, "dockerfile.render hands wheel stacks only"
    w = stack.wheels
    base = _part("base_image", stack.base_image)  # Stack's validator gives a wheel stack one
    if base.local and base.image_id and base_image_id != base.image_id:
        raise ConfigError(f"stacks.{stack_name}.base_image: {base.repository}:{base.tag} is {base_image_id}, "
                          f"the matrix pins {base.image_id}",
                          hint="the local tag moved: import the pinned image again, or record the new image_id")
    # a local base not resolved yet (a plan with no engine) renders with its tag: that tag's hash
    # is not the built image's, which `harness build` resolves to the ID first
    from_ref = (base_image_id or f"{base.repository}:{base.tag}") if base.local else base.reference
    template = build.template or WHEELS_TEMPLATE
    text = template_text if template_text is not None else template.read_text()
    patches = wheel_patches(build)
    files: list[tuple[str, bytes]] = []
    lock_info = read_lock(build)
    repacked_note = ""
    if lock_info is not None:
        where, lock = lock_info
        refuse_other_cpu(f"stacks.{stack_name}.wheels.wheelhouse {where / LOCK}", lock, platform)
        vllm = [e for e in lock.wheels if e.name == "vllm"]
        if len(vllm) != 1 or vllm[0].version != w.vllm.version:
            raise ConfigError(f"stacks.{stack_name}.wheels: {where / LOCK} has no vllm {w.vllm.version} wheel",
                              hint="install the bundle that carries it, or fix wheels.vllm.version")
        if w.vllm.sha256 and vllm[0].sha256 != w.vllm.sha256:
            raise ConfigError(f"stacks.{stack_name}.wheels.vllm.sha256 is {w.vllm.sha256}, the wheelhouse's "
                              f"vllm wheel is {vllm[0].sha256}"
                              + (" (a re-packed wheel: its own sha256 is in wheels.lock)" if vllm[0].repacked else ""),
                              hint="pin the wheel you build from")
        if vllm[0].repacked:
            repacked_note = (f" re-packed from upstream sha256:{vllm[0].upstream_sha256}: "
                             f"{vllm[0].strip_reason}")
        files += wheelhouse_files(where, lock)
    dockerfile = fill(text, {
        "SYNTAX": NO_SYNTAX,
        "WHEELHOUSE": "COPY wheelhouse/ /opt/build/wheelhouse/" if lock_info else "# the vLLM wheel comes from PyPI",
        "WHEELHOUSE_ARG": "--wheelhouse /opt/build/wheelhouse" if lock_info else "",
        "VLLM_PATCHES": _patch_lines(patches),
        **(extra or {}),
    }, str(template))
    buildargs = {
        "BASE_IMAGE": from_ref,
        "PYTHON": w.python,
        "VLLM_VERSION": w.vllm.version,
        "VLLM_WHEEL_SHA256": w.vllm.sha256 or "",
        "TORCH_VERSION": stack.torch.version if stack.torch else "",
        "TORCH_INDEX_URL": stack.torch.index_url if stack.torch else "",
        "FLASHINFER_VERSION": (stack.flashinfer.version or "") if stack.flashinfer else "",
    }
    all_files = tuple(_context_support_files(template.parent, dockerfile)  # wheels.py
                      + files + [(p.context_path, p.data) for p in patches])
    digest = content_hash(dockerfile, buildargs, all_files, stack, platform)
    source = (f"wheel:vllm=={w.vllm.version} sha256:{w.vllm.sha256 or 'unchecked'}"
              + (f" wheelhouse:{LOCK} sha256:{hashlib.sha256(files[0][1]).hexdigest()}" if lock_info else " pypi")
              + repacked_note)
    labels = {
        label.ROLE: label.Role.IMAGE.value,
        label.STACK: stack_name,
        label.STACK_KIND: "wheels",
        label.CONTENT_HASH: digest,
        label.BASE_IMAGE: base.reference + (f" local id {base_image_id}" if base.local else ""),
        label.BASE_IMAGE_ID: base_image_id or "",
        label.CUDA: "from the base image" if base.local else base.tag,
        label.PYTHON: w.python,
        label.TORCH: f"{stack.torch.version} (from the base image)" if stack.torch else "",
        label.VLLM_SOURCE: source,
        label.VLLM_PATCHES: ",".join(Path(p.rel).name for p in patches),
        label.FLASHINFER_SOURCE: (f"pypi:flashinfer-python=={stack.flashinfer.version}"
                                  if stack.flashinfer and stack.flashinfer.version else "none"),
        label.FLASHINFER_VERSION: (stack.flashinfer.version or "") if stack.flashinfer else "",
    }
    for p in patches:
        labels[label.patch_sha256("vllm", Path(p.rel).name)] = p.sha256
    labels[label.PLATFORM] = platform.docker
    return Rendered(stack_name, dockerfile, buildargs, labels, all_files, tuple(patches), digest, platform)
