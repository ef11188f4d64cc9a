"""What the tool shows and keeps, through the real command line (`python -m harness` in a child
process): secrets after credential flags and in every token form are masked by one rule in the
`-v` log, every table, `--json` and every stored record; data that looks like rich markup is
shown as it is; a 50 MB log line and a 1.5 GB log end in bounded output, not a hang or a
MemoryError.

A hang fails as the test's timeout, never by a clock assertion.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "fixtures" / "logs"
SECRET = "Zq7hunter2Secret9Xw"
HF = "hf_" + SECRET + "AbCdEfGhIjKlMn"  # a Hugging Face token by its shape


def cli(*args: object, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300,
        limit_as: int | None = None) -> tuple[int, str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(cwd / "home"), **(env or {})}

    def limits() -> None:  # in the child only: the address space a small host or a CI job gives
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    r = subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=cwd, env=full, capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=limits)
    return r.returncode, r.stdout + r.stderr


# the forms a secret takes in a server log, a command line or a probe's output
CREDENTIAL_LINES = [
    f"non-default args: {{'model': 'org/m', 'api_key': ['{SECRET}'], 'hf_token': '{HF}'}}",
    f"HF_TOKEN={SECRET} set in the environment",
    f"downloading from https://user:{SECRET}@mirror.example.org/simple/x",
    f"probe ran: curl -u user:{SECRET} https://example.org",
    f"probe ran: mysql -uroot -p{SECRET} db",
    f"probe ran: tool --password {SECRET} --token={SECRET}",
    f"header sent: Authorization: Bearer {SECRET}",
    f"token shape alone: {HF}",
]


def _log_with_secrets(tmp_path: Path) -> Path:
    lines = (LOGS / "h200_v0251_fp8_auto.log").read_text().splitlines()
    stamp = "INFO 12-01 10:00:00 [api_server.py:1] "
    log = tmp_path / "server.log"
    log.write_text("\n".join([*(stamp + c for c in CREDENTIAL_LINES), *lines,
                              "Traceback (most recent call last):",
                              f"RuntimeError: CUDA error: out of memory with {HF} HF_TOKEN={SECRET}"]) + "\n")
    return log


@pytest.mark.parametrize("columns", ["200", "60"])  # the grid, and the list layout of a narrow terminal
@pytest.mark.parametrize("as_json", [False, True])
def test_the_fingerprint_table_masks_what_json_masks(tmp_path, columns, as_json):
    log = _log_with_secrets(tmp_path)
    rc, text = cli("fingerprint", log, *(["--json"] if as_json else []), cwd=tmp_path, env={"COLUMNS": columns})
    assert rc in (0, 1) and "Traceback (most recent call last):\n  File" not in text, text[-3000:]
    assert SECRET not in text and HF not in text
    assert "***" in text  # masked, not dropped


def _repo(root: Path, subject: str) -> list[str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_GLOBAL": "/dev/null"}

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(root), *a], check=True, capture_output=True, text=True,
                              env=env).stdout.strip()

    root.mkdir()
    git("init", "-q", "-b", "main")
    for i in range(1, 6):
        (root / "state").write_text("bad\n" if i >= 4 else "good\n")
        (root / "counter").write_text(f"{i}\n")
        git("add", "-A")
        git("commit", "-q", "-m", subject.format(i=i))
    return git("rev-list", "--reverse", "HEAD").splitlines()


# a probe command holding each credential form, as separate arguments and inside a shell string;
# it echoes them, so its output (kept in the step logs) holds them too
PROBE = ["sh", "-c", f'echo "$@"; echo "curl -u user:{SECRET} -p{SECRET}"; grep -q bad state && exit 1; exit 0',
         "probe", "-u", f"user:{SECRET}", f"-p{SECRET}", "--password", SECRET, f"--password={SECRET}",
         "--token", SECRET, "-H", f"Authorization: Bearer {SECRET}", f"--user=bob:{SECRET}", f"HF_TOKEN={SECRET}"]


def test_verbose_bisect_masks_credential_flags_in_the_log_and_every_record(tmp_path):
    shas = _repo(tmp_path / "repo", "commit {i}")
    out = tmp_path / "out"
    rc, text = cli("-v", "bisect", tmp_path / "repo", "--good", shas[0], "--bad", shas[-1], "--out", out, "--", *PROBE,
                   cwd=tmp_path)
    assert rc == 0 and "Traceback" not in text, text[-3000:]
    assert "-u user:***" in text and "run: " in text  # the -v log shows the command, masked
    assert SECRET not in text
    kept = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in kept} >= {"bisect.json", "result.json", "result.md"} and any("steps" in p.parts for p in kept)
    for p in kept:
        assert SECRET not in p.read_text(errors="replace"), p
    assert "user:***" in (out / "bisect.json").read_text()  # masked in place, the user kept


def test_markup_in_a_commit_subject_and_an_out_path_is_shown_as_it_is(tmp_path):
    shas = _repo(tmp_path / "repo", "[/red] commit {i} [bold]x[/bold] [link=file:///etc/passwd]y")
    out = tmp_path / "o[/red]x"
    rc, text = cli("bisect", tmp_path / "repo", "--good", shas[0], "--bad", shas[-1], "--out", out,
                   "--", "sh", "-c", "grep -q bad state && exit 1; exit 0", cwd=tmp_path)
    assert rc == 0 and "Traceback" not in text and "MarkupError" not in text, text[-3000:]
    assert "[/red] commit 4" in text and "o[/red]x" in text


def test_markup_in_log_lines_is_text_in_the_fingerprint_table(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text((LOGS / "dynamo4087_log_ends_in_capture.log").read_text()
                   + "ERROR 11-04 12:25:50 [core.py:1] engine died: [/red] [bold]not markup[/bold]\n")
    rc, text = cli("fingerprint", log, cwd=tmp_path, env={"COLUMNS": "200"})
    assert rc in (0, 1) and "Traceback" not in text, text[-3000:]


def test_a_50_mb_capture_line_under_hung_is_bounded_in_every_table(tmp_path):
    log = tmp_path / "vllm.log"  # the capture line is the root cause: every table quotes it
    with log.open("w") as f:
        f.write("INFO 12-01 10:00:00 [api_server.py:1] vLLM API server version 0.11.0\n")
        f.write("INFO 12-01 10:00:05 [gpu_model_runner.py:1] Capturing CUDA graphs (mixed prefill-decode, "
                "PIECEWISE): 10%| " + "x" * (50 << 20) + "\n")
    rc, text = cli("fingerprint", log, "--hung", cwd=tmp_path, env={"COLUMNS": "120"})
    assert rc in (0, 1) and "Traceback" not in text, text[-3000:]
    assert len(text) < 256 << 10 and "more characters" in text  # said, not printed
    rc, text = cli("fingerprint", log, "--hung", "--json", cwd=tmp_path)
    assert rc in (0, 1) and "Traceback" not in text and len(text) < 8 << 20


@pytest.mark.slow
def test_a_log_of_1_5_gb_under_a_4_gib_address_space(tmp_path):
    log = tmp_path / "vllm.log"
    head = (LOGS / "h200_v0251_fp8_auto.log").read_text().encode()
    line = (b"INFO 12-01 10:00:05 [loggers.py:1] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
            b"throughput: 12.3 tokens/s, Running: 1 reqs, Waiting: 0 reqs\n")
    block = line * (1 << 14)
    with log.open("wb") as f:
        f.write(head)
        for _ in range((1536 << 20) // len(block)):
            f.write(block)
    rc, text = cli("fingerprint", log, cwd=tmp_path, limit_as=4 << 30, timeout=900)
    log.unlink()
    assert rc in (0, 1, 3) and "Traceback" not in text and "MemoryError" not in text, text[-3000:]
    said = " ".join(text.split())
    assert rc == 3 and "fix:" in said or "are read" in said  # read head and tail, and said so
