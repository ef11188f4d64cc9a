"""One stack's build resolved as `harness build` and `harness run` resolve it
(harness.image.stackbuild.resolve: the lock applied, the platform and options fixed), for tests
that render, build or probe a single stack."""

from __future__ import annotations

from dataclasses import replace

from harness.image.stackbuild import StackBuild, resolve


def one(matrix, name: str, *, base_image_id: str | None = None, **options) -> StackBuild:
    """The build of stack `name`; `base_image_id` stands in for a local base's ID on an engine."""
    build = resolve(matrix, [name], **options)[0]
    return replace(build, base_image_id=base_image_id) if base_image_id is not None else build
