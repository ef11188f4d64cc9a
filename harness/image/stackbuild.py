"""One docker stack's build, resolved once.

`resolve` turns a matrix and the names of the stacks to build into frozen `StackBuild` values: the
stack's pins with the lock applied (harness.lock: the lock's digest and sha256s where the matrix
wrote none; a stale lock is an error), the CPU platform the image is for, the build options (a
template of the user's and its values), and a local base image's ID on the engine. Rendering,
building, probing and `harness build --dry-run` take these values, and never look the stack up
in the matrix again nor apply the lock a second time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness import platforms
from harness.archs import CC
from harness.errors import ConfigError
from harness.lock import locked_matrix
from harness.matrix.load import Matrix
from harness.matrix.model import Stack
from harness.platforms import Platform


@dataclass(frozen=True)
class StackBuild:
    """Everything that decides one docker stack's image."""

    name: str
    stack: Stack  # its pins, the lock's applied
    matrix: Matrix = field(repr=False)  # the locked matrix: where its patches and wheelhouse paths start
    platform: Platform  # the CPU the image is for
    template: Path | None = None  # a template of the user's instead of the stack family's own
    template_values: Mapping[str, str] = field(default_factory=dict)  # its extra @PLACEHOLDER@ values
    base_image_id: str | None = None  # a local base's ID on the engine; None: a registry base, or no engine asked

    @property
    def hardware_cc(self) -> str:
        """The compute capability of the matrix's GPU."""
        return self.matrix.spec.hardware[self.matrix.spec.matrix.hardware].cc

    @property
    def audit_ccs(self) -> tuple[str, ...]:
        """The chips its image is judged for: the matrix's GPU and every chip its arch list builds
        for (a stack built for 12.1a on an H200 is judged for the GB10 it targets too)."""
        arch_list = self.stack.torch_cuda_arch_list
        built_for = arch_list.ccs if arch_list is not None else frozenset()
        return tuple(str(c) for c in sorted({CC.parse(self.hardware_cc)} | built_for))

    @property
    def unpinned(self) -> str | None:
        """Why its base image is not pinned; None when it is (a digest, or a local base, pinned by
        its image ID at build time)."""
        b = self.stack.base_image
        if b is None or b.digest is not None or b.local:
            return None
        return f"stacks.{self.name}.base_image: {b.reference} has no digest" + (
            f" ({b.unpinned_reason})" if b.unpinned_reason else "")

    def with_values(self, values: Mapping[str, str]) -> StackBuild:
        """The same build with more template values (a probe's variant of the stack's image)."""
        return replace(self, template_values={**self.template_values, **values})


def resolve(matrix: Matrix, names: Iterable[str], *, platform: Platform | None = None,
            template: Path | None = None, template_values: Mapping[str, str] | None = None,
            engine=None, base_required: bool = True) -> list[StackBuild]:
    """Each named stack's build, once, in order: the lock applied, for `platform` (default:
    `engine`'s, else this host's). With `engine`, a local base image is looked up there by its
    tag (missing: a ConfigError, or with `base_required` off, as with no engine); without one (a
    plan), its tag stands in and the tag is provisional. A stack with no image to build (a local one, a prebuilt `image`) is refused
    when rendered."""
    wanted = list(dict.fromkeys(names))
    platform = platform or (engine.platform() if engine is not None else platforms.host())
    locked = locked_matrix(matrix, wanted, platform=platform)
    out = []
    for name in wanted:
        stack = locked.spec.stacks[name]
        base_id = local_base_id(name, stack, engine, base_required) if engine is not None else None
        out.append(StackBuild(name, stack, locked, platform, template, dict(template_values or {}), base_id))
    return out


def local_base_id(name: str, stack: Stack, engine, required: bool = True) -> str | None:
    """A local base image's ID on this engine (None for a registry base); missing is a ConfigError
    (`required`), else None."""
    base = stack.base_image
    if base is None or not base.local:
        return None
    found = engine.image_id(f"{base.repository}:{base.tag}")
    if found is None and required:
        raise ConfigError(f"stacks.{name}.base_image: no local image {base.repository}:{base.tag} on the engine",
                          hint="import or build it first (`docker image ls`); a local base is never pulled")
    return found
