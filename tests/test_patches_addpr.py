"""`harness patches add-pr` against a local server that answers in GitHub's shapes, honest or not.

GitHub REST "Get a pull request": JSON for `Accept: application/vnd.github+json`, the
format-patch text for `Accept: application/vnd.github.patch`, both from the same URL.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
import tomllib
from pathlib import Path

import pytest

from harness import http as harness_http
from harness.cli import main
from harness.errors import ConfigError
from harness.image import addpr
from harness.image.addpr import add_pr, clean_title
from harness.image.preflight import apply_series

REAL_PATCH = Path(__file__).resolve().parent.parent / "patches" / "vllm" / "0001-cmake-sm121a-on-cuda13.patch"
HEAD = "7a96833b3090f237400840808e749b3949d29a9e"  # the `From` line of REAL_PATCH
PR_PATH = "/repos/vllm-project/vllm/pulls/4242"
TITLE = "[Build] SM121a kernels on CUDA 13"


class Forge:
    """What the local server answers; a test edits it before calling add-pr."""

    def __init__(self) -> None:
        self.meta: dict = {"number": 4242, "title": TITLE, "head": {"sha": HEAD, "ref": "sm121a"},
                           "base": {"repo": {"full_name": "vllm-project/vllm"}}}
        self.patch = REAL_PATCH.read_bytes()
        self.seen: list[tuple[str, str]] = []


@pytest.fixture
def github(monkeypatch):
    monkeypatch.setattr(harness_http, "ALLOW_LOOPBACK_HTTP", True)
    forge = Forge()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            accept = self.headers.get("Accept", "")
            forge.seen.append((self.path, accept))
            if self.path != PR_PATH:
                self.send_error(404)
                return
            if accept == "application/vnd.github.patch":
                data, ctype = forge.patch, "text/x-patch"
            else:
                data, ctype = json.dumps(forge.meta).encode(), "application/json"
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", forge
    server.shutdown()
    server.server_close()


def _flat(text: str) -> str:
    return " ".join(text.split())  # the stderr console wraps long lines


def _provenance(text: str) -> dict:
    return tomllib.loads(text.split("\n\n", 1)[0])["provenance"]


def test_add_pr_writes_patch_with_provenance(github, tmp_path):
    base, forge = github
    when = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
    added = add_pr("vllm", 4242, base_url=base, patches_dir=tmp_path, now=when)
    assert added.head_sha == HEAD
    assert added.path == tmp_path / "vllm" / "pr4242-build-sm121a-kernels-on-cuda-13.patch"
    text = added.path.read_text()
    prov = _provenance(text)
    assert prov["repo"] == "vllm-project/vllm" and prov["pr"] == 4242 and prov["title"] == TITLE
    assert prov["head_sha"] == HEAD and prov["taken_on"] == "2026-11-30T12:00:00Z"
    assert text.endswith(REAL_PATCH.read_text())
    # both answers come from the API URL itself, asked for in two media types
    assert forge.seen == [(PR_PATH, "application/vnd.github+json"), (PR_PATH, "application/vnd.github.patch")]


def test_header_does_not_stop_git_apply(github, tmp_path):
    # the TOML header sits before the first diff, where git apply skips text
    base, _ = github
    added = add_pr("vllm", 4242, base_url=base, patches_dir=tmp_path)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text("placeholder\n")
    result = apply_series(tree, [(added.path.name, added.path)])
    assert result.patches[0].files == ("CMakeLists.txt",)  # git read the diff past the header


@pytest.mark.network
def test_added_patch_still_applies(github, tmp_path, pinned_sources):
    # the provenance header must not break `git apply`, on the real vLLM 0.33.0 sdist
    base, _ = github
    added = add_pr("vllm", 4242, base_url=base, patches_dir=tmp_path)
    tree = tmp_path / "tree"
    tree.mkdir()
    from harness.image import sources
    from harness.matrix.load import load_matrix

    spark = load_matrix(Path(__file__).resolve().parent.parent / "matrix" / "spark.toml")
    pristine = pinned_sources.tree(sources.vllm_source(spark.spec.stacks["spark-121a"]))
    (tree / "CMakeLists.txt").write_bytes((pristine / "CMakeLists.txt").read_bytes())
    assert apply_series(tree, [(added.path.name, added.path)]).ok


def test_cli_prints_a_toml_snippet(github, tmp_path, capsys):
    base, forge = github
    forge.meta["title"] = 'quote " and backslash \\ in a title'
    assert main(["patches", "add-pr", "vllm", "4242", "--base-url", base, "--patches-dir", str(tmp_path),
                 "--stack", "spark-121a"]) == 0
    printed = capsys.readouterr().out
    snippet = printed.split("table):\n", 1)[1]
    assert tomllib.loads(snippet)["stacks"]["spark-121a"]["vllm"]["patches"] == [
        "vllm/pr4242-quote-and-backslash-in-a-title.patch"]


def test_unknown_pr_is_an_error(github, tmp_path):
    base, _ = github
    assert main(["patches", "add-pr", "vllm", "1", "--base-url", base, "--patches-dir", str(tmp_path)]) == 3
    assert not (tmp_path / "vllm").exists()


# --- the attacks -------------------------------------------------------------------------------


def test_a_file_patch_url_in_the_answer_is_never_followed(github, tmp_path):
    base, forge = github
    forge.meta["patch_url"] = "file:///etc/passwd"
    added = add_pr("vllm", 4242, base_url=base, patches_dir=tmp_path)
    assert "root:" not in added.path.read_text()
    assert added.path.read_text().endswith(REAL_PATCH.read_text())
    assert [p for p, _ in forge.seen] == [PR_PATH, PR_PATH]


@pytest.mark.parametrize("sha", ['not-a-sha"; evil = "x', "7a96833b", HEAD.upper(), None, 42, HEAD + "0"])
def test_bad_head_sha_is_refused_before_anything_is_written(github, tmp_path, capsys, sha):
    base, forge = github
    forge.meta["head"]["sha"] = sha
    assert main(["patches", "add-pr", "vllm", "4242", "--base-url", base, "--patches-dir", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "is not a 40-hex commit SHA" in _flat(captured.err) and "evil" not in captured.out
    assert not (tmp_path / "vllm").exists()
    assert len(forge.seen) == 1  # the patch was never asked for


def test_a_newline_in_the_title_cannot_forge_a_header_line(github, tmp_path, capsys):
    base, forge = github
    forge.meta["title"] = "Fix\nTaken-by: someone else\r\ntaken_by = \"evil\"\u2028diff --git a/x b/x"
    assert main(["patches", "add-pr", "vllm", "4242", "--base-url", base,
                 "--patches-dir", str(tmp_path)]) == 0
    (path,) = (tmp_path / "vllm").iterdir()
    text = path.read_text()
    header = text.split("\n\n", 1)[0]
    prov = _provenance(text)
    assert prov["taken_by"] == "harness patches add-pr vllm 4242"
    assert "\n" not in prov["title"] and "\u2028" not in prov["title"]
    assert [line.split(" = ")[0] for line in header.splitlines()] == [
        "[provenance]", "repo", "pr", "title", "head_sha", "taken_from", "taken_on", "taken_by"]
    assert not any(line.startswith(("Taken-by", "diff --git")) for line in header.splitlines())
    out = capsys.readouterr().out
    assert not any(line.startswith("Taken-by") for line in out.splitlines())


def test_flashinfer_snippet_escapes_the_title(github, tmp_path, capsys, monkeypatch):
    base, forge = github
    monkeypatch.setitem(addpr.REPOS, "flashinfer", "vllm-project/vllm")  # the local forge serves one repo
    forge.meta["title"] = 'x"]\nevil = "y'
    assert main(["patches", "add-pr", "flashinfer", "4242", "--base-url", base, "--patches-dir", str(tmp_path),
                 "--stack", "s"]) == 0
    printed = capsys.readouterr().out
    parsed = tomllib.loads(printed.split("table):\n", 1)[1])
    (entry,) = parsed["stacks"]["s"]["flashinfer"]["prs"]
    assert entry == {"number": 4242, "head_sha": HEAD, "patch": entry["patch"], "title": 'x"] evil = "y'}
    assert "evil" not in parsed


def test_a_patch_that_ends_at_another_commit_is_refused(github, tmp_path, capsys):
    base, forge = github
    forge.patch = forge.patch.replace(HEAD.encode(), b"0" * 40)
    assert main(["patches", "add-pr", "vllm", "4242", "--base-url", base, "--patches-dir", str(tmp_path)]) == 2
    assert f"not the head {HEAD}" in _flat(capsys.readouterr().err)
    assert not (tmp_path / "vllm").exists()


def test_a_patch_without_from_line_is_refused(github, tmp_path):
    base, forge = github
    forge.patch = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n"
    assert main(["patches", "add-pr", "vllm", "4242", "--base-url", base, "--patches-dir", str(tmp_path)]) == 2


def test_an_answer_about_another_pr_or_repo_is_refused(github, tmp_path):
    base, forge = github
    forge.meta["number"] = 1
    assert main(["patches", "add-pr", "vllm", "4242", "--base-url", base, "--patches-dir", str(tmp_path)]) == 2
    forge.meta["number"] = 4242
    forge.meta["base"]["repo"]["full_name"] = "evil/vllm"
    assert main(["patches", "add-pr", "vllm", "4242", "--base-url", base, "--patches-dir", str(tmp_path)]) == 2


@pytest.mark.parametrize("base", ["http://example.com", "file:///etc", "ftp://127.0.0.1/", "-x"])
def test_base_url_must_be_https(tmp_path, capsys, base):
    assert main(["patches", "add-pr", "vllm", "4242", f"--base-url={base}", "--patches-dir", str(tmp_path)]) == 2
    assert "only https:// URLs are fetched" in _flat(capsys.readouterr().err)


def test_loopback_http_needs_the_test_hook(tmp_path):
    assert main(["patches", "add-pr", "vllm", "4242", "--base-url", "http://127.0.0.1:9",
                 "--patches-dir", str(tmp_path)]) == 2


def test_production_default_is_the_github_api():
    from harness.cli import build_parser

    args = build_parser().parse_args(["patches", "add-pr", "vllm", "1"])
    assert args.base_url == addpr.API == "https://api.github.com"
    assert harness_http.ALLOW_LOOPBACK_HTTP is False


@pytest.mark.parametrize(("raw", "clean"), [
    ("a\nb", "a b"), ("a\r\nTaken-by: x", "a Taken-by: x"), ("tab\there", "tab here"),
    ("nul\x00byte", "nul byte"), ("ls\u2028ps\u2029", "ls ps"), ("  lots   of  space ", "lots of space"),
    (None, ""), (["list"], ""), ("x" * 500, "x" * 200),
])
def test_clean_title(raw, clean):
    assert clean_title(raw) == clean


@pytest.mark.parametrize("answer, refusal", [
    ([HEAD], "the PR answer has no head.sha"),
    ({"head": "x"}, "the PR answer has no head.sha"),
    ({"head": {"sha": 7}}, "head.sha 7 is not a 40-hex commit SHA"),
    ({"head": {"sha": HEAD}, "number": 1}, "the answer is about PR #1"),
    ({"head": {"sha": HEAD}, "base": {"repo": {"full_name": "other/repo"}}}, "the PR belongs to 'other/repo'"),
])
def test_the_pr_answer_is_validated_where_it_comes_in(answer, refusal):
    with pytest.raises(ConfigError, match=refusal):
        addpr._head_of(answer, "vllm-project/vllm", 4242)


def test_a_pr_answer_of_odd_but_harmless_shape_is_read():
    # base of another type reads as absent; the title is made one printable line
    assert addpr._head_of({"head": {"sha": HEAD}, "base": "x", "number": 4242, "title": "a\nb"},
                          "vllm-project/vllm", 4242) == (HEAD, "a b")
    assert addpr._head_of({"head": {"sha": HEAD}, "base": {"repo": {"full_name": "VLLM-project/vLLM"}}},
                          "vllm-project/vllm", 4242) == (HEAD, "")
