"""The Dockerfile of one docker stack, rendered: from source (harness/image/render.py) or, for a
stack that installs prebuilt wheels, from its sibling template (harness/image/wheels.py).
Touches no engine."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.errors import ConfigError
from harness.image.render import DEFAULT_TEMPLATE, Rendered, render_source
from harness.image.stackbuild import StackBuild
from harness.image.wheels import render_wheels


def render(build: StackBuild, *, template_text: str | None = None, requirements: bool = True) -> Rendered:
    """The Dockerfile, build args, labels and context of one docker stack's build (its platform,
    template and values, a local base's ID: harness.image.stackbuild)."""
    stack, name = build.stack, build.name
    if stack.runner != "docker":
        raise ConfigError(f"stacks.{name}: a '{stack.runner}' stack has no image to build",
                          hint="leave it out of `harness build` (-k), it runs an existing install")
    if stack.image is not None:
        raise ConfigError(f"stacks.{name}: serves the prebuilt image {stack.image}: nothing to build",
                          hint="leave it out of `harness build` (-k); `harness run` records its labels")
    if stack.wheels is not None:
        same = build.template is None or Path(build.template) == DEFAULT_TEMPLATE  # the family's default: its sibling
        return render_wheels(build if not same else replace(build, template=None),
                             template_text=None if same else template_text)
    return render_source(build, template_text=template_text, requirements=requirements)
