"""`harness patches add-pr`: take an upstream PR's patch, pinned to its head SHA, into patches/.

Everything comes from the forge's API host and nowhere else: GET {api}/repos/{owner}/{repo}/pulls/{n}
as JSON gives `head.sha` and `title`; the same URL with `Accept: application/vnd.github.patch`
gives the patch (GitHub REST "Get a pull request", custom media types). The `patch_url` in the
answer is never followed, so an answer cannot send us to another host or scheme. The patch must
be git format-patch output whose last `From <sha>` line is the head SHA the API named.

The file starts with a provenance header, a TOML table written by tomli-w (git apply skips
text before the first diff), so a reader knows which head it was and when it was taken;
refresh by running the command again. The TOML snippet printed for the matrix is tomli-w's too.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import tomli_w
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from harness import http
from harness.errors import ConfigError
from harness.safety import writes

REPOS = {"vllm": "vllm-project/vllm", "flashinfer": "flashinfer-ai/flashinfer"}
API = "https://api.github.com"
# patches/<project>/ of the repository the command runs in (the matrix's repository)
PATCHES_DIR = Path("patches")
SLUG = re.compile(r"[^a-z0-9]+")
HEAD_SHA = re.compile(r"^[0-9a-f]{40}$")
# git format-patch's first line of each commit; the last one of a PR's series is its head.
FROM_LINE = re.compile(rb"^From ([0-9a-f]{40}) Mon Sep 17 00:00:00 2001$", re.MULTILINE)
PATCH_MAX_BYTES = 32 << 20
TITLE_MAX = 200


@dataclass(frozen=True)
class AddedPr:
    project: str
    number: int
    title: str
    head_sha: str
    path: Path
    source_url: str


def slug(title: str, limit: int = 48) -> str:
    return SLUG.sub("-", title.lower()).strip("-")[:limit].rstrip("-") or "pr"


def clean_title(title: object) -> str:
    """One line of printable text: control characters (newlines included) become spaces, so a
    title cannot add a line to the provenance header or the printed snippet."""
    if not isinstance(title, str):
        return ""
    text = "".join(" " if unicodedata.category(ch)[0] in "CZ" and ch != " " else ch for ch in title)
    text = " ".join(text.split())
    return text[:TITLE_MAX]


def _api_base(base_url: str) -> str:
    base = base_url.rstrip("/")
    http.check_url(base + "/")
    return base


# --- GitHub's pull-request answer, validated where it comes in: each value is checked where it
# is used (the answer may not be GitHub's), a nested table of another type reads as absent


def _table_or_none(value: object) -> object:
    return value if isinstance(value, dict) else None


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")


class PrRepo(_Answer):
    full_name: object = None


class PrBase(_Answer):
    repo: PrRepo | None = None

    _repo = field_validator("repo", mode="before")(_table_or_none)


class PrHead(_Answer):
    sha: object = None


class PrAnswer(_Answer):
    """GET /repos/{owner}/{repo}/pulls/{number}, the fields read; unknown keys are kept."""

    head: PrHead
    number: object = None
    title: object = ""
    base: PrBase | None = None

    _base = field_validator("base", mode="before")(_table_or_none)


def _head_of(meta: object, repo: str, number: int) -> tuple[str, str]:
    try:
        pr = PrAnswer.model_validate(meta)  # a non-object answer, or one without a head table, fails
    except ValidationError:
        raise ConfigError(f"{repo}#{number}: the PR answer has no head.sha", hint="is it a pull request number?") from None
    sha = pr.head.sha
    if not isinstance(sha, str) or not HEAD_SHA.fullmatch(sha):
        raise ConfigError(f"{repo}#{number}: head.sha {sha!r} is not a 40-hex commit SHA",
                          hint="the answer is not GitHub's: check --base-url")
    if pr.number not in (None, number):
        raise ConfigError(f"{repo}#{number}: the answer is about PR #{pr.number!r}",
                          hint="the answer is not GitHub's: check --base-url")
    full_name = pr.base.repo.full_name if pr.base and pr.base.repo else None
    if isinstance(full_name, str) and full_name.lower() != repo.lower():
        raise ConfigError(f"{repo}#{number}: the PR belongs to {full_name!r}", hint="check the project and number")
    return sha, clean_title(pr.title)


def check_patch(body: bytes, head_sha: str, where: str) -> None:
    if b"diff --git" not in body:
        raise ConfigError(f"{where}: no 'diff --git' in the answer", hint="the PR may be empty or closed")
    froms = FROM_LINE.findall(body)
    if not froms:
        raise ConfigError(f"{where}: no `From <sha>` line: not git format-patch output",
                          hint="the answer is not GitHub's patch media type: check --base-url")
    if froms[-1].decode() != head_sha:
        raise ConfigError(f"{where}: the patch ends at commit {froms[-1].decode()}, not the head {head_sha}",
                          hint="the PR moved between the two requests: run the command again")


def provenance(repo: str, number: int, title: str, head_sha: str, url: str, when: str, project: str) -> str:
    return tomli_w.dumps({"provenance": {
        "repo": repo, "pr": number, "title": title, "head_sha": head_sha, "taken_from": url,
        "taken_on": when, "taken_by": f"harness patches add-pr {project} {number}",
    }})


# GitHub answers a PR or its patch in a second or two: a server silent for this long gets one
# more try, so a dead or hostile server costs half a minute, not minutes of retries
ANSWER_TIMEOUT_S = 15.0


def add_pr(project: str, number: int, *, base_url: str = API,
           patches_dir: Path = PATCHES_DIR, now: dt.datetime | None = None) -> AddedPr:
    if project not in REPOS:
        raise ConfigError(f"unknown project {project!r}", hint=f"use one of: {', '.join(sorted(REPOS))}")
    if number < 1:
        raise ConfigError(f"PR number {number} is not a pull request number", hint="give the number after '#'")
    repo = REPOS[project]
    url = f"{_api_base(base_url)}/repos/{repo}/pulls/{number}"
    meta = http.get_json(url, accept="application/vnd.github+json", timeout=ANSWER_TIMEOUT_S, attempts=2)
    head_sha, title = _head_of(meta, repo, number)
    body = http.get(url, accept="application/vnd.github.patch", max_bytes=PATCH_MAX_BYTES, timeout=ANSWER_TIMEOUT_S, attempts=2)
    check_patch(body, head_sha, f"{repo}#{number}")
    when = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    header = provenance(repo, number, title, head_sha, url, when, project)
    dest = patches_dir / project / f"pr{number}-{slug(title)}.patch"
    dest.parent.mkdir(parents=True, exist_ok=True)
    writes.write_bytes(dest, header.encode() + b"\n" + body, flag="patch file")
    return AddedPr(project, number, title, head_sha, dest, url)


def snippet(added: AddedPr, rel: str, stack: str) -> str:
    """The matrix lines that use the patch, as TOML (tomli-w escapes whatever the title holds)."""
    if added.project == "flashinfer":
        entry = {"number": added.number, "head_sha": added.head_sha, "patch": rel, "title": added.title}
        return tomli_w.dumps({"stacks": {stack: {"flashinfer": {"prs": [entry]}}}})
    return tomli_w.dumps({"stacks": {stack: {"vllm": {"patches": [rel]}}}})
