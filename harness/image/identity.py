"""Content-addressed image names: the tag is a hash of everything that decides the image.

Two stacks that would build the same bytes get the same tag, and a stack whose image already
exists is never rebuilt. What goes in is decided by `render.content_hash`: the RENDERED
Dockerfile (patch COPY/apply lines included), the build args, the bytes of every context file
(each patch, in order) and the stack's pins.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.image.dockerfile import render
from harness.image.render import DEFAULT_TEMPLATE, DOCKER_DIR, IMAGE_REPO
from harness.image.stackbuild import StackBuild
from harness.matrix.model import Stack

__all__ = ["DOCKER_DIR", "IMAGE_REPO", "image_ref", "served_image"]


def image_ref(build: StackBuild, dockerfile_text: str | None = None) -> str:
    """`vllm-bw:<stack>-<12 hex>` of a docker stack's build, for its platform.

    `dockerfile_text` replaces the template's text (tests, experiments); it is rendered the same
    way. The tag needs no source read: the build requirements follow from the pins, which the
    hash holds.
    """
    return render(replace(build, template=Path(DEFAULT_TEMPLATE)), template_text=dockerfile_text,
                  requirements=False).image_ref


def served_image(stack: Stack) -> str | None:
    """What a stack that builds nothing serves: `local:<python>` for a local one, the prebuilt
    `image` itself; None for a stack whose image is built (image_ref names it)."""
    if stack.runner == "local" and stack.local is not None:  # Stack's validator: a local stack has [local]
        return f"local:{stack.local.python}"
    return stack.image
