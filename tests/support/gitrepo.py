"""Small git repositories made in a test: a source tree at a commit, as an upstream would have it."""

from __future__ import annotations

import subprocess
from pathlib import Path


def run_git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, files: dict[str, str]) -> str:
    """A repository at `path` with `files` committed; its commit id."""
    path.mkdir(parents=True)
    run_git("init", "-q", cwd=path)
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    run_git("add", "-A", cwd=path)
    run_git("commit", "-qm", "x", cwd=path)
    return run_git("rev-parse", "HEAD", cwd=path)
