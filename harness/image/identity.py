"""Content-addressed image names: the tag is a hash of everything that decides the image.

Two stacks that would build the same bytes get the same tag, and a stack whose image already
exists is never rebuilt. What goes in is decided by `render.content_hash`: the RENDERED
Dockerfile (patch COPY/apply lines included), the build args, the bytes of every context file
(each patch, in order) and the stack's pins.
"""

from __future__ import annotations

from pathlib import Path

from harness.image.dockerfile import render
from harness.image.render import DEFAULT_TEMPLATE, DOCKER_DIR, IMAGE_REPO
from harness.matrix.load import Matrix
from harness.platforms import Platform

__all__ = ["DOCKER_DIR", "IMAGE_REPO", "image_ref"]


def image_ref(matrix: Matrix, stack_name: str, dockerfile_text: str | None = None,
              platform: Platform | None = None) -> str:
    """`vllm-bw:<stack>-<12 hex>` for docker stacks, `local:<python>` for local ones, and the
    image itself for a stack that serves a prebuilt `image` (nothing is rendered for it).

    `dockerfile_text` replaces the template's text (tests, experiments); it is rendered the same way.
    `platform`: the CPU the image is for (default: this host's). The tag needs no source read:
    the build requirements follow from the pins, which the hash holds.
    """
    stack = matrix.spec.stacks[stack_name]
    if stack.runner == "local" and stack.local is not None:  # Stack's validator: a local stack has [local]
        return f"local:{stack.local.python}"
    if stack.image is not None:
        return stack.image
    return render(matrix, stack_name, template=Path(DEFAULT_TEMPLATE), template_text=dockerfile_text,
                  platform=platform, requirements=False).image_ref
