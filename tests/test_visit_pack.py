"""tools/visit-pack.py cuts a visit's inputs into folders of at most a budget each, and
examples/h200-cache/gather.sh, run on the folders one at a time as the host receives them, gives
back every file byte for byte, joining a file only once all its pieces are there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_folders_fit_the_budget_and_gather_joins_every_file_back(tmp_path):
    src = tmp_path / "src"
    (src / "kit").mkdir(parents=True)
    files = {"kit/docker-kit.tar.xz": 2_500_000, "kit/docker-kit.tar.xz.note": 84, "bundle.json": 300_000,
             "part_00": 1_700_000, "small": 10}
    for name, size in files.items():
        (src / name).write_bytes(os.urandom(size))
    out = tmp_path / "packed"
    r = subprocess.run([sys.executable, str(ROOT / "tools/visit-pack.py"), "--budget-mb", "1", str(out),
                        f"kit={src / 'kit'}", f"bundle/bundle.json={src / 'bundle.json'}",
                        f"bundle/part_00={src / 'part_00'}", f"small={src / 'small'}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    folders = sorted(out.glob("c*"), key=lambda p: int(p.name[1:]))
    assert len(folders) >= 5
    for f in folders:
        assert sum(p.stat().st_size for p in f.rglob("*") if p.is_file()) <= 1_000_000 + 200  # + sha256 lines
    joined = tmp_path / "joined"
    for i, f in enumerate(folders):
        g = subprocess.run(["bash", str(ROOT / "examples/h200-cache/gather.sh"), str(f)],
                           env={**os.environ, "INPUTS": str(joined)}, capture_output=True, text=True)
        assert g.returncode == 0, g.stderr
        if i < len(folders) - 1:  # the kit's last piece is not there yet: never joined early
            assert not (joined / "kit/docker-kit.tar.xz").exists() or \
                (joined / "kit/docker-kit.tar.xz").read_bytes() == (src / "kit/docker-kit.tar.xz").read_bytes()
    want = {"kit/docker-kit.tar.xz": "kit/docker-kit.tar.xz", "kit/docker-kit.tar.xz.note": "kit/docker-kit.tar.xz.note",
            "bundle/bundle.json": "bundle.json", "bundle/part_00": "part_00", "small": "small"}
    for there, here in want.items():
        assert (joined / there).read_bytes() == (src / here).read_bytes(), there
    assert not list(joined.rglob("*.part-*"))
