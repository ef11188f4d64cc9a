"""Hostile inputs to `harness bisect` and the surfaces added with it: a resumed bisect folder (its
files replaced by links, FIFOs, devices, deep nesting; its points and probe edited), a repository
whose own config and attributes name a filter, commit subjects and command output that are
markup, escapes or not UTF-8, package-index answers of the wrong type, `--timeout` nonsense; and
the source caches (`sources fetch --from`, the sdist cache) holding links.

After each run (tests/support/hostile.py): exit 0-3, no traceback, no secret printed, nothing
outside the inputs touched, no process the tool did not start signalled, and nothing the
folder named was run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.hostile import SECRET, check_after, make_sandbox, run_cli

from harness.bisect import history as history_mod
from harness.errors import ConfigError
from harness.image import sources

CHECK = ["sh", "-c", "grep -q bad state && exit 1; exit 0"]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_GLOBAL": "/dev/null"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def make_repo(root: Path, n: int = 6, bad_from: int = 4, subject: str = "commit {i}") -> list[str]:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(1, n + 1):
        (repo / "state").write_text("bad\n" if i >= bad_from else "good\n")
        (repo / "counter").write_text(f"{i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject.format(i=i))
    return git(repo, "rev-list", "--reverse", "HEAD").splitlines()


@pytest.fixture
def sb(home, victim):
    return make_sandbox(home / "sb", victim)


@pytest.fixture
def done_bisect(sb):
    """A finished bisect over a small repository, in sb.work/out."""
    shas = make_repo(sb.work)
    out = sb.work / "out"
    rc, text = run_cli(["bisect", sb.work / "repo", "--good", shas[0], "--bad", shas[-1], "--out", out, "--", *CHECK])
    assert rc == 0, text
    return out, shas


def _resume(out: Path) -> list:
    return ["bisect", "--resume", out, "--", *CHECK]


# -- a resumed folder's files ---------------------------------------------------------------------

PLANTS = [("steps", "link_canary_dir"), ("logs", "link_canary_dir"), ("steps/{step}", "link_canary"),
          ("bisect.json", "fifo"), ("bisect.json", "dev_zero"), ("bisect.json", "deep_100k"),
          ("bisect.json", "link_canary"), ("steps/{step}", "deep_100k"), ("steps/{step}", "fifo"),
          ("result.json", "link_canary"), ("result.md", "link_etc"), ("steps/{step}", "dev_urandom")]


@pytest.mark.parametrize(("where", "kind"), PLANTS)
def test_a_resumed_folder_is_read_as_a_root(sb, victim, done_bisect, where, kind):
    out, _shas = done_bisect
    step = sorted(os.listdir(out / "steps"))[0]
    target = out / where.format(step=step)
    (out / "steps" / step).unlink()  # one point left to judge: the resume writes a step, a log, the result
    if kind == "link_canary_dir":
        import shutil

        shutil.rmtree(target)
        target.symlink_to(sb.canary)
    elif kind == "deep_100k":
        target.write_text("[" * 100_000 + "]" * 100_000)
    else:
        sb.plant(target, kind)
    before = sb.snapshot()
    rc, text = run_cli(_resume(out))
    check_after(sb, before, victim, ["bisect --resume", where, kind], rc, text)
    if kind not in ("link_etc",) or where != "result.md":
        assert rc in (2, 3), text  # refused, with the file named
    if kind == "link_etc":
        assert Path(target).is_symlink() and os.readlink(target) == "/etc/passwd"



def test_a_point_id_never_reaches_git_as_an_option(sb, victim, done_bisect):
    out, _shas = done_bisect
    doc = json.loads((out / "bisect.json").read_text())
    doc["points"][2]["id"] = f"--output={sb.canary}/written"
    (out / "bisect.json").write_text(json.dumps(doc))
    for step in os.listdir(out / "steps"):
        (out / "steps" / step).unlink()
    before = sb.snapshot()
    rc, text = run_cli(_resume(out))
    check_after(sb, before, victim, ["bisect --resume (point id --output=)"], rc, text)
    assert rc == 2 and "point id" in " ".join(text.split())
    assert not (sb.canary / "written").exists()


def test_what_the_folder_says_to_run_is_shown_and_refused(sb, done_bisect):
    out, _shas = done_bisect
    marker = sb.root / "ran"
    doc = json.loads((out / "bisect.json").read_text())
    doc["probe"]["command"] = ["sh", "-c", f"touch {marker}"]
    doc["setup"] = {"patches": [["p.patch", str(sb.canary / "secret.txt")]]}
    (out / "bisect.json").write_text(json.dumps(doc))
    for step in os.listdir(out / "steps"):
        (out / "steps" / step).unlink()
    rc, text = run_cli(["bisect", "--resume", out])
    said = " ".join(text.split())
    assert rc == 2 and f"touch {marker}" in said and "patch" in said and "name them again" in said, said
    assert not marker.exists()
    # named again with different words: still refused
    rc, text = run_cli(["bisect", "--resume", out, "--", "sh", "-c", "true"])
    assert rc == 2 and not marker.exists()


def test_the_repositorys_own_filters_and_hooks_never_run(sb):
    shas = make_repo(sb.work)
    repo = sb.work / "repo"
    marker = sb.root / "filtered"
    (repo / ".gitattributes").write_text("* filter=evil\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "attributes")
    git(repo, "config", "filter.evil.smudge", f"touch {marker}; cat")
    git(repo, "config", "filter.evil.process", f"touch {marker}")
    git(repo, "config", "core.hooksPath", str(sb.canary))
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* filter=evil\n")
    head = git(repo, "rev-parse", "HEAD")
    rc, text = run_cli(["bisect", repo, "--good", shas[0], "--bad", head, "--out", sb.work / "out", "--", *CHECK])
    assert rc in (0, 1), text
    assert not marker.exists(), "git ran the repository's filter"


def test_markup_escapes_and_bytes_in_subjects_and_output(sb, victim):
    shas = make_repo(sb.work, subject="[red]boom[/red] \x1b]0;title\x07 [link=file:///etc/passwd]x[/link] {i}")
    cmd = ["sh", "-c", "printf '\\377\\376\\033[2J[bold]x[/bold]\\n'; grep -q bad state && exit 1; exit 0"]
    before = sb.snapshot()
    rc, text = run_cli(["bisect", sb.work / "repo", "--good", shas[0], "--bad", shas[-1], "--out", sb.work / "o", "--", *cmd])
    check_after(sb, before, victim, ["bisect markup"], rc, text)
    assert rc == 0 and "\x1b]0;" not in text and "\x1b[2J" not in text


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-5", "1e999", "x"])
def test_nonsense_timeouts_are_usage_errors(sb, value):
    rc, text = run_cli(["bisect", sb.work, "--good", "a", "--bad", "b", "--timeout", value, "--", "true"])
    assert rc == 2 and "Traceback" not in text and "--timeout" in text


# -- package-index answers --------------------------------------------------------------------------

ODD = [
    {"releases": {"1.0": "x", "1.1": [1, "a", None], "2.0": {"a": 1}}},
    {"releases": {"1.0": [{"packagetype": 5, "upload_time": 7, "filename": ["x"], "url": {}, "digests": "no"}],
                  "2.0": [{"packagetype": "sdist", "upload_time": None, "filename": "../../x.tar.gz",
                           "url": "file:///etc/passwd", "digests": {"sha256": 5}}]}},
    {"releases": {"1.0": [{"packagetype": "sdist", "upload_time": "2026-01-01", "filename": "d-1.0.tar.gz"}],
                  "1.1": [{"packagetype": "sdist", "upload_time": "2026-01-02", "filename": "d-1.1.tar.gz"}],
                  "1.1.0": [{"packagetype": "sdist", "upload_time": "2026-01-03", "filename": "d-1.1.0.tar.gz"}],
                  "2.0": [{"packagetype": "sdist", "upload_time": "2026-01-04", "filename": "d-2.0.tar.gz"}]}},
    [1, 2, 3],
    {"releases": []},
]


@pytest.mark.parametrize("doc", ODD)
def test_index_answers_of_the_wrong_type_never_raise(sb, victim, monkeypatch, doc):
    cache = sb.work / "cache"
    cache.mkdir()
    (cache / "demo.releases.json").write_text(json.dumps(doc))
    monkeypatch.setattr(history_mod, "SDIST_CACHE", cache)
    before = sb.snapshot()
    # the index is unreachable: the cached answer is what is read
    rc, text = run_cli(["bisect", "pypi:demo", "--good", "1.0", "--bad", "2.0", "--index",
                        "http://127.0.0.1:9/{name}", "--out", sb.work / "o", "--", *CHECK])
    check_after(sb, before, victim, ["bisect pypi (odd index)"], rc, text)


def test_equal_versions_are_one_release():
    h = history_mod.ReleaseHistory.__new__(history_mod.ReleaseHistory)
    from packaging.version import Version

    h.project, h.good, h.bad, h.minor_first = "d", Version("1.0"), Version("2.0"), True
    h._doc = history_mod.ProjectPage.of(ODD[2], "index")
    ids = [p.id for p in h.points()]
    assert len(ids) == 3 and ids[0] == "1.0" and ids[-1] == "2.0"


# -- caches and --from --------------------------------------------------------------------------------


def test_an_sdist_in_the_cache_that_is_a_link_is_refused(sb, monkeypatch):
    cache = sb.work / "sdist"
    cache.mkdir()
    want = sources.sdist_filename("vllm", "0.1.0")
    (cache / want).symlink_to(sb.canary / "secret.txt")
    monkeypatch.setattr(sources, "SDIST_CACHE", cache)
    with pytest.raises(ConfigError, match="symbolic link"):
        sources.sdist(sources.Source("vllm", "pypi", "vllm", "0.1.0", "0" * 64), cache=sb.work / "other")


def test_a_bundle_part_named_outside_is_refused_before_it_is_read(sb):
    import hashlib

    from harness.bundle import check_parts

    bundle = sb.work / "bundle"
    bundle.mkdir()
    secret = (sb.canary / "secret.txt").read_bytes()
    (bundle / "bundle.json").write_text(json.dumps({
        "bundle": "b", "archive_sha256": hashlib.sha256(secret).hexdigest(), "archive_bytes": len(secret),
        "parts": [{"file": "../../canary/secret.txt", "bytes": len(secret), "sha256": hashlib.sha256(secret).hexdigest()}],
        "lock": {"bundle": "b", "python_version": "3.12", "wheels": []}}))
    with pytest.raises(ConfigError) as exc:
        check_parts(bundle)
    assert SECRET not in str(exc.value) and "parts[0].file" in exc.value.message


@pytest.mark.parametrize("answer", [[1, 2], "text", None, {"urls": "x"}, {"urls": [1, None, {"filename": 5}]},
                                    {"urls": [{"filename": "d-1.0.tar.gz", "packagetype": "sdist", "digests": "no"}]},
                                    {"urls": [{"filename": "d-1.0.tar.gz", "packagetype": "sdist",
                                               "digests": {"sha256": 7}}]}])
def test_lock_reads_index_answers_of_the_wrong_type_as_one_error(answer):
    """`harness lock` asks the index for a release's files: an answer of another shape is one
    error naming the URL or the missing file, never a KeyError or an AttributeError."""
    from harness.errors import HarnessError
    from harness.lock import pick_file, pypi_files

    try:
        files = pypi_files("d", "1.0", fetch=lambda url: answer)
        pick_file(files, "d", "1.0", "sdist")
    except HarnessError as exc:
        assert exc.exit_code in (2, 3) and "Traceback" not in str(exc)
    else:
        pytest.fail("an index answer without a usable sdist was accepted")


def test_a_source_folder_in_the_cache_that_is_a_link_is_never_built_from(sb):
    """A planted `sources/<key>` link to another folder (with its own .harness-complete) is
    refused, not handed to the build as the pristine tree."""
    source = sources.Source("vllm", "pypi", "vllm", "0.1.0", "0" * 64)
    cache = sb.work / "sources"
    cache.mkdir()
    (sb.canary / ".harness-complete").write_text("x\n")
    (cache / source.key).symlink_to(sb.canary)
    with pytest.raises(ConfigError, match="symbolic link"):
        sources.tree(source, cache=cache)


@pytest.mark.parametrize("project", ["../../x", "a/b", "-x", "", "x" * 200, "a b"])
def test_a_release_history_names_a_package(sb, project):
    rc, text = run_cli(["bisect", f"pypi:{project}", "--good", "1.0", "--bad", "2.0", "--index",
                        "http://127.0.0.1:9/{name}", "--out", sb.work / "o", "--", *CHECK])
    assert rc == 2 and "Traceback" not in text and not (sb.work / "o").exists()
