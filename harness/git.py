"""Git, run so that data never becomes an option and a repository never runs its own code.

Every git call of the tool goes through `run`: the options below come first, every value from
data sits after `--end-of-options` or `--` (or is checked against a grammar first: a commit id
is 40 hex characters, so `--output=<path>` never reaches `git archive`), and git reads no
system or global configuration when it reads a tree (a filter, a hook or an fsmonitor defined
there would run). A repository on disk is never read in place: `mirror` clones it, bare, into
the tool's cache (a clone copies objects and refs, never the source's config, hooks or
info/attributes), so the repository's own filters, hooks and config are not in the repository
git then reads.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

from harness import proc
from harness.errors import ConfigError, EnvironmentProblem
from harness.safety import grammar

# Transports: https and ssh only (no ext::, no fd::, no file:// from data); no hooks; no fsmonitor.
OPTIONS = ("-c", "protocol.allow=never", "-c", "protocol.https.allow=always", "-c", "protocol.ssh.allow=always",
           "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.attributesFile=/dev/null")
# Reading a tree: no system or global config (their filters and diff drivers would run), no
# system attributes, no replace refs, never a password prompt.
READ_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_REPLACE_OBJECTS": "1", "GIT_TERMINAL_PROMPT": "0"}
# Fetching: the user's own global config stays (a credential helper, url.insteadOf).
FETCH_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}

_URL = re.compile(r"^(https://|ssh://|[\w.-]+@[\w.-]+:)")


def run(args: list[str], *, timeout: float = 600, cwd: str | None = None, fetch: bool = False,
        allow_file: bool = False, purpose: str | None = None) -> proc.Result:
    """`git OPTIONS ARGS` with the read (or fetch) environment; a host without git is exit 3
    naming what needed it (`purpose`)."""
    proc.require_tool("git", purpose)
    extra = ("-c", "protocol.file.allow=always") if allow_file else ()
    env = {**os.environ, **(FETCH_ENV if fetch else READ_ENV)}
    return proc.run(["git", *OPTIONS, *extra, *args], timeout=timeout, cwd=cwd, env=env)


def commit_id(value: object, *, where: str) -> str:
    """`value` when it is a full commit SHA (what a point id or a pin must be)."""
    return grammar.check("sha", value, where=where, hint="a commit is named by its full 40-character SHA")


def url_problem(url: str) -> str | None:
    """Why `url` is not a git URL the tool fetches (https://, ssh:// or user@host:path), or None."""
    if not isinstance(url, str) or any(c.isspace() or c in "\x00" for c in url) or not _URL.match(url):
        return "is not a git URL (https://, ssh:// or user@host:path)"
    if url.startswith(("https://", "ssh://")):
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            return f"is not a URL ({exc})"
        host, user = parts.hostname or "", parts.username or ""
    else:
        user, _, rest = url.partition("@")
        host = rest.split(":", 1)[0]
    if not host or host.startswith("-") or user.startswith("-"):
        return "names a host or user that starts with '-' (ssh would read it as an option)"
    return None


def mirror(path: Path, cache: Path) -> str:
    """A bare clone of the repository at `path` in `cache` (made, or brought up to date), so
    that the repository's config, hooks and attributes are never read; its git folder."""
    src = str(path.resolve())
    dest = cache / ("local-" + hashlib.sha256(src.encode()).hexdigest()[:16])
    if (dest / "HEAD").is_file():
        res = run(["--git-dir", str(dest), "fetch", "-q", "--prune", "--", src,
                   "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"], timeout=3600, allow_file=True)
        if res.ok:
            return str(dest)
        shutil.rmtree(dest, ignore_errors=True)  # a damaged mirror: clone it again
    _clone_bare(src, dest, lambda err: ConfigError(f"{path}: not a git repository ({err[-200:]})",
                                                   hint="give a git repository's folder or a git URL"),
                allow_file=True)
    return str(dest)


def _clone_bare(src: str, dest: Path, failed, **how) -> None:
    """`git clone --bare src` into `dest`, through a `.partial` folder renamed once complete (an
    interrupted clone is never taken for a mirror); `failed(stderr)` is the error to raise."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    res = run(["clone", "-q", "--bare", "--", src, str(tmp)], timeout=3600, **how)
    if not res.ok:
        shutil.rmtree(tmp, ignore_errors=True)
        raise failed(res.stderr.strip())
    tmp.rename(dest)


def clone_url(url: str, cache: Path) -> str:
    """A bare clone of `url` in `cache` (made once); its git folder."""
    if (why := url_problem(url)) is not None:
        raise ConfigError(f"{grammar.one_line(url)[:200]}: {why}", hint="give a local clone or mirror, or the repository's URL")
    dest = cache / hashlib.sha256(url.encode()).hexdigest()[:16]
    if not (dest / "HEAD").is_file():
        _clone_bare(url, dest, lambda err: EnvironmentProblem(f"{url}: git clone failed: {err[-300:]}",
                                                              hint="check the URL and the network, or give a local mirror"),
                    fetch=True)
    return str(dest)
