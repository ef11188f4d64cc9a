"""What a test session must not leave behind: images and containers the tests made (they carry
`harness.*` labels), and temporary files. Read before and after the session; what is new at the
end is a leak. Things that existed before (the base images tools/base-images.sh makes, a run's
image a user kept) are never counted.

Temporary files: the session gives every process it starts (the harness, the fake vLLM, its
server) a temporary folder of its own through TMPDIR, so what they leave is theirs alone, even
on a machine where other test sessions write to /tmp at the same time."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

TEST_LABELS = ("harness.test", "harness.role", "harness.run-id")


def private_tmp() -> str:
    """A temporary folder for the processes this session starts (this process keeps the system
    one: pytest's tmp_path lives there and is pytest's to clean)."""
    # resolved now, before TMPDIR changes; a pytest-xdist worker inherits the controller's
    # TMPDIR (its private folder) and takes the system one from here instead
    system = os.environ.setdefault("HARNESS_TESTS_SYSTEM_TMP", tempfile.gettempdir())
    tempfile.tempdir = system
    path = tempfile.mkdtemp(prefix="harness-tests-tmp-", dir=system)
    os.environ["TMPDIR"] = path
    return path


def snapshot(tmp_dir: str | None = None, *, engine: bool = True) -> dict[str, set[str]]:
    tmp = {str(p) for p in Path(tmp_dir).rglob("*")} if tmp_dir else set()
    images: set[str] = set()
    containers: set[str] = set()
    if not engine:
        return {"temporary files": tmp, "images": images, "containers": containers}
    try:
        from harness.engine import connect

        api = connect(timeout=5).client.api
        for label in TEST_LABELS:
            # all=True lists the untagged layers too: a failed build's steps leave them dangling
            images |= {f"{i['Id'][7:19]} {','.join(i.get('RepoTags') or ['<none>'])}"
                       for i in api.images(all=True, filters={"label": label})}
            containers |= {f"{c['Id'][:12]} {','.join(n.lstrip('/') for n in c.get('Names') or [])}"
                           for c in api.containers(all=True, filters={"label": label})}
    except Exception:  # noqa: BLE001 - no engine here: the Docker tests skip, nothing to count
        pass
    return {"temporary files": tmp, "images": images, "containers": containers}


def new_since(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, list[str]]:
    return {k: sorted(after[k] - before.get(k, set())) for k in after if after[k] - before.get(k, set())}
