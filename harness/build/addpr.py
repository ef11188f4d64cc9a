"""`harness patches add-pr`: take an upstream PR's patch, pinned to its head SHA, into patches/.

GitHub's shapes: GET {api}/repos/{owner}/{repo}/pulls/{n} -> {"head": {"sha"}, "title",
"patch_url"}, and the patch_url (https://github.com/{owner}/{repo}/pull/{n}.patch). The file
starts with a provenance header (git apply skips text before the first diff), so a reader knows
which head it was and when it was taken; refresh by running the command again.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from harness.console import out
from harness.errors import ConfigError, EnvironmentProblem

REPOS = {"vllm": "vllm-project/vllm", "flashinfer": "flashinfer-ai/flashinfer"}
# patches/<project>/ of the repository the command runs in (the matrix's repository)
PATCHES_DIR = Path("patches")
SLUG = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class AddedPr:
    project: str
    number: int
    title: str
    head_sha: str
    path: Path
    source_url: str


def _get(url: str, accept: str) -> bytes:
    req = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "harness"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.read()
    except (urllib.error.URLError, TimeoutError) as exc:
        raise EnvironmentProblem(f"GET {url}: {exc}",
                                 hint="check the network (or --base-url); GitHub rate-limits anonymous calls") from None


def slug(title: str, limit: int = 48) -> str:
    return SLUG.sub("-", title.lower()).strip("-")[:limit].rstrip("-") or "pr"


def add_pr(project: str, number: int, *, base_url: str = "https://api.github.com",
           patches_dir: Path = PATCHES_DIR, now: dt.datetime | None = None) -> AddedPr:
    repo = REPOS[project]
    meta = json.loads(_get(f"{base_url.rstrip('/')}/repos/{repo}/pulls/{number}", "application/vnd.github+json"))
    try:
        head_sha, title = meta["head"]["sha"], meta.get("title", "")
    except (KeyError, TypeError):
        raise ConfigError(f"{repo}#{number}: the PR answer has no head.sha", hint="is it a pull request number?") from None
    patch_url = meta.get("patch_url") or f"https://github.com/{repo}/pull/{number}.patch"
    body = _get(patch_url, "text/x-patch")
    if b"diff --git" not in body:
        raise ConfigError(f"{patch_url}: no 'diff --git' in the answer", hint="the PR may be empty or closed")
    when = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    header = (f"Provenance: {repo} PR #{number}: {title}\n"
              f"Head-SHA: {head_sha}\n"
              f"Taken-from: {patch_url}\n"
              f"Taken-on: {when}\n"
              f"Taken-by: harness patches add-pr {project} {number}\n\n")
    dest = patches_dir / project / f"pr{number}-{slug(title)}.patch"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(header.encode() + body)
    return AddedPr(project, number, title, head_sha, dest, patch_url)


def _cmd(args: argparse.Namespace) -> int:
    added = add_pr(args.project, args.number, base_url=args.base_url, patches_dir=Path(args.patches_dir))
    rel = added.path.relative_to(Path(args.patches_dir)).as_posix()
    out.print(f"wrote {added.path} (head {added.head_sha})", markup=False)
    if added.project == "flashinfer":
        out.print("add to the stack's [stacks.<name>.flashinfer] table:", markup=False)
        out.print(f'prs = [{{ number = {added.number}, head_sha = "{added.head_sha}", patch = "{rel}", '
                  f'title = {json.dumps(added.title)} }}]', markup=False)
    else:
        out.print(f'add "{rel}" to stacks.<name>.vllm.patches', markup=False)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("patches", help="manage the patch series under patches/")
    sub = p.add_subparsers(dest="patches_command", metavar="ACTION")
    sub.required = True
    a = sub.add_parser("add-pr", help="download an upstream PR's patch with its head SHA")
    a.add_argument("project", choices=sorted(REPOS))
    a.add_argument("number", type=int)
    a.add_argument("--base-url", default="https://api.github.com", help="GitHub API base URL")
    a.add_argument("--patches-dir", default=str(PATCHES_DIR), help="where patches/<project>/ lives")
    a.set_defaults(func=_cmd)
