"""`harness patches add-pr`: take an upstream PR as a pinned patch (harness/image/addpr.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.console import out
from harness.image.addpr import API, PATCHES_DIR, REPOS, add_pr, snippet
from harness.safety import numbers


def _cmd(args: argparse.Namespace) -> int:
    added = add_pr(args.project, args.number, base_url=args.base_url, patches_dir=Path(args.patches_dir))
    rel = added.path.relative_to(Path(args.patches_dir)).as_posix()
    out.print(f"wrote {added.path} (head {added.head_sha})", markup=False)
    out.print(f"add to the matrix (merge with the stack's existing {added.project} table):", markup=False)
    out.print(snippet(added, rel, args.stack), markup=False)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("patches", help="manage the patch series under patches/")
    sub = p.add_subparsers(dest="patches_command", metavar="ACTION")
    sub.required = True
    a = sub.add_parser("add-pr", help="download an upstream PR's patch with its head SHA")
    a.add_argument("project", choices=sorted(REPOS))
    a.add_argument("number", type=numbers.arg("pull request NUMBER", int, lo=1, hi=10**9))
    a.add_argument("--base-url", default=API, help=f"the forge's API base URL, https only (default {API})")
    a.add_argument("--stack", default="STACK", help="stack name for the printed TOML snippet")
    a.add_argument("--patches-dir", default=str(PATCHES_DIR), help="where patches/<project>/ lives")
    a.set_defaults(func=_cmd)
