"""The build stage: one image per docker stack the cells need, built once or reused.

A prebuilt `image = "..."` stack is looked up, not built; a local stack gets the arch audit of
its installed vllm package instead of an image. Every outcome is stored (builds/<stack>.json) as
soon as it is known, and a `--resume` reads it back instead of building again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import proc
from harness.audit.report import IMAGE_PATHS, AuditState, AuditSummary, audit_path
from harness.audit.verdict import Target
from harness.image.builder import audit_image, build_stacks
from harness.image.stackbuild import resolve
from harness.labels import LOCAL_VLLM_DIR, Role, role
from harness.matrix.load import Matrix
from harness.matrix.plan import Cell, group_by_stack
from harness.results.build import BuildOutcome
from harness.results.store import RunStore


def audit_local_stack(matrix: Matrix, stack_name: str) -> BuildOutcome:
    """What a local install really holds: run the arch audit on its vllm package directory."""
    local = matrix.spec.stacks[stack_name].local
    assert local is not None, "the loader gives every local stack its [local] table"
    env = {**os.environ, **local.env}
    r = proc.run([local.python, "-c", "import os, vllm; print(os.path.dirname(vllm.__file__))"],
                 timeout=300, env=env)
    base: dict[str, Any] = {"stack": stack_name, "image_ref": f"local:{local.python}", "status": "local"}
    if not r.ok:
        return BuildOutcome(**base, log_tail=tuple((r.stderr or r.stdout).strip().splitlines()[-5:]),
                            reason="the local python cannot import vllm")
    vllm_dir = r.stdout.strip().splitlines()[-1]
    hw = matrix.spec.hardware[matrix.spec.matrix.hardware]
    t0 = time.monotonic()
    report = audit_path(Path(vllm_dir), [Target.from_cc(hw.cc)])
    # the per-file detail stays out of the run: `harness audit` of the folder the labels name has it
    return BuildOutcome(**base, labels={LOCAL_VLLM_DIR: vllm_dir}, audit=AuditSummary.of(report),
                        duration_s=round(time.monotonic() - t0, 1))


def _prebuilt(engine, stack: str, image: str, ccs: tuple[str, ...] = ()) -> BuildOutcome:
    labels = engine.image_labels(image)
    if labels is None:
        return BuildOutcome(stack=stack, image_ref=image, status="failed",
                            reason=f"image {image} does not exist on this engine (build or load it first)")
    return BuildOutcome(stack=stack, image_ref=image, image_id=engine.image_id(image),
                        status="reused", labels=labels, audit=_audit_prebuilt(engine, image, ccs))


def _audit_prebuilt(engine, image: str, ccs: tuple[str, ...]) -> AuditSummary:
    """An image the harness did not build keeps vLLM where its maker put it: the audit tries the
    usual package folders, as `harness audit IMAGE` does, and says so when none holds CUDA code."""
    tried = []
    for path in IMAGE_PATHS:
        summary = audit_image(engine, image, role(Role.AUDIT), path, ccs)
        if summary and summary.status is not AuditState.NOT_AUDITED and summary.cubins:
            return summary
        tried.append(path)
    return AuditSummary.not_audited(f"no CUDA code under {', '.join(tried)} in {image}")


def build_stage(matrix: Matrix, cells: list[Cell], store: RunStore, *, engine: Callable[[], object],
                force: bool = False, allow_unpinned: bool = False,
                template: Path | None = None, template_values: dict | None = None,
                on_event: Callable | None = None, host: str | None = None) -> dict[str, BuildOutcome]:
    """Build (or reuse, or audit) what the cells need; outcomes by stack, each stored (as built on
    `host`, when a run has several)."""
    needed = list(group_by_stack(cells))
    known = store.builds_on(host)

    def record(outcome: BuildOutcome) -> None:
        outcome = outcome.model_copy(update={"host": host})  # the cells' pointer names where it was built
        if outcome.log_path and Path(outcome.log_path).is_absolute():
            try:  # paths in a run directory are relative to it: the directory travels
                outcome = outcome.model_copy(
                    update={"log_path": str(Path(outcome.log_path).relative_to(store.dir))})
            except ValueError:
                pass
        store.write_build(outcome)
        known[outcome.stack] = outcome

    for s in needed:
        stack = matrix.spec.stacks[s]
        if s in known:
            continue
        if stack.runner == "local":
            record(audit_local_stack(matrix, s))
        elif stack.image:
            record(_prebuilt(engine(), s, stack.image,
                             (matrix.spec.hardware[matrix.spec.matrix.hardware].cc,)))
    todo = [s for s in needed if s not in known and matrix.spec.stacks[s].runner == "docker"]
    if todo:
        builder = engine()
        builds = resolve(matrix, todo, engine=builder, template=template,
                         template_values=template_values if template else None)
        outcomes = build_stacks(builds, engine=builder, log_dir=store.dir / "logs", force=force,
                                allow_unpinned=allow_unpinned, on_event=on_event)
        for outcome in outcomes.values():
            record(outcome)
    return {s: known[s] for s in needed if s in known}
