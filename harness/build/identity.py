"""Content-addressed image names: the tag is a hash of everything that decides the image.

Two stacks that would build the same bytes get the same tag, and a stack whose image already
exists is never rebuilt. What goes in: the Dockerfile template, the stack's pins and build
args (canonical JSON), and the bytes of every patch in order.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness.matrix.load import Matrix

IMAGE_REPO = "vllm-bw"
DOCKER_DIR = Path(__file__).resolve().parent.parent.parent / "docker"


def stack_inputs(matrix: Matrix, stack_name: str) -> dict:
    """Everything that decides the image of `stack_name`, as plain JSON-able data."""
    stack = matrix.spec.stacks[stack_name]
    patches = []
    if stack.vllm:
        patches += [("vllm", p) for p in stack.vllm.patches]
    if stack.flashinfer:
        patches += [("flashinfer", pr.patch) for pr in stack.flashinfer.prs]
    return {
        "stack": stack.model_dump(mode="json", exclude={"description", "env", "local"}),
        "patches": [
            {"series": series, "path": rel,
             "sha256": hashlib.sha256(matrix.patch_path(rel).read_bytes()).hexdigest()}
            for series, rel in patches
        ],
    }


def content_hash(inputs: dict, dockerfile_text: str) -> str:
    h = hashlib.sha256()
    h.update(dockerfile_text.encode())
    h.update(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


def image_ref(matrix: Matrix, stack_name: str, dockerfile_text: str | None = None) -> str:
    """`vllm-bw:<stack>-<12 hex>` for docker stacks, `local:<python>` for local ones."""
    stack = matrix.spec.stacks[stack_name]
    if stack.runner == "local":
        return f"local:{stack.local.python}"
    if stack.image:
        return stack.image
    if dockerfile_text is None:
        template = DOCKER_DIR / "Dockerfile.vllm.in"
        dockerfile_text = template.read_text() if template.is_file() else ""
    digest = content_hash(stack_inputs(matrix, stack_name), dockerfile_text)
    return f"{IMAGE_REPO}:{stack_name}-{digest[:12]}"
