"""The Dockerfile of one docker stack, rendered: from source (harness/image/render.py) or, for a
stack that installs prebuilt wheels, from its sibling template (harness/image/wheels.py).
Touches no engine."""

from __future__ import annotations

from pathlib import Path

from harness.errors import ConfigError
from harness.image.render import DEFAULT_TEMPLATE, Rendered, render_source
from harness.image.wheels import render_wheels
from harness.matrix.load import Matrix
from harness.platforms import Platform


def render(matrix: Matrix, stack_name: str, *, template: Path | None = None,
           template_text: str | None = None,
           extra: dict[str, str] | None = None, base_image_id: str | None = None,
           platform: Platform | None = None, requirements: bool = True) -> Rendered:
    """The Dockerfile, build args, labels and context of one docker stack, for `platform` (the
    CPU the image runs on: the engine's; default this host's).

    `base_image_id`: a local base image's ID as the engine reports it (wheel stacks pin a local
    base by it: it becomes the FROM, a label and part of the content hash).
    """
    stack = matrix.spec.stacks[stack_name]
    if stack.runner != "docker":
        raise ConfigError(f"stacks.{stack_name}: a '{stack.runner}' stack has no image to build",
                          hint="leave it out of `harness build` (-k), it runs an existing install")
    if stack.image is not None:
        raise ConfigError(f"stacks.{stack_name}: serves the prebuilt image {stack.image}: nothing to build",
                          hint="leave it out of `harness build` (-k); `harness run` records its labels")
    if stack.wheels is not None:
        same = template is None or Path(template) == DEFAULT_TEMPLATE  # the family's default: its sibling
        return render_wheels(matrix, stack_name, template=None if same else template,
                             template_text=None if same else template_text,
                             extra=extra, base_image_id=base_image_id, platform=platform)
    return render_source(matrix, stack_name, template=template, template_text=template_text,
                         extra=extra, platform=platform, requirements=requirements)
