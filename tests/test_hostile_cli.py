"""Every command with generated hostile arguments: planted files of every kind, odd flags, secrets.

The argument pool holds no valid matrix, run folder or bundle, and the working folder is an
empty sandbox (the default `matrix/spark.toml` is not there), so no command builds, serves or
downloads: each must end in exit 0-3 with a message, never a traceback, a leaked secret, a
touched file outside the inputs or a signalled process. Commands that only reach the network
(`patches add-pr`, `bench` against a live server) have their own tests.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile import KINDS, SECRET, check_after, make_sandbox, run_cli

FUZZ = settings(max_examples=300, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
COMMANDS = [["plan"], ["plan", "--json"], ["plan", "--list"], ["build", "--dry-run"], ["lock", "--check"], ["run"],
            ["rejudge"], ["fingerprint"], ["fingerprint", "--json"], ["compare"], ["bug"], ["report"],
            ["bundle", "install"], ["bundle", "make"], ["audit"], ["doctor"], ["env"], ["reap"], ["--version"], [],
            ["bisect"], ["bisect", "--resume"], ["sources", "fetch"], ["sources", "list"], ["build", "--probe"]]
FLAGS = ["-m", "--matrix", "-k", "--out", "--md", "--results", "--resume", "--dest", "--downloaded", "--site",
         "--json", "--floor", "--jobs", "--cc", "--force", "--no-report", "--soak", "--run", "--url", "--python",
         "--timeout", "--index", "--from", "--log-dir", "--patch", "--probe", "--cutlass", "--stack"]
WORDS = ["", "-", "--", "nan", "-1", "0", "1e999", "((((x", "not not", "x" * 5000, "\x00", "a\nb", "$(id)", "`id`",
         "[red]x", f"https://u:{SECRET}@h.example/x", f"--api-key={SECRET}", f"DB_PASS={SECRET}",
         f"http://h/?access_token={SECRET}", "/etc/shadow", "/dev/zero", "/proc/self/environ", "../../../etc/passwd",
         "~", "~/.ssh/id_ed25519", "12.1", "sm_121a", "vllm/vllm-openai:latest@sha256:" + "0" * 63]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DB_PASS", SECRET)  # an environment secret the tool may print (masked)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@FUZZ
@given(command=st.sampled_from(COMMANDS),
       args=st.lists(st.one_of(st.tuples(st.just("file"), st.sampled_from(KINDS)),
                               st.tuples(st.just("flag"), st.sampled_from(FLAGS)),
                               st.tuples(st.just("word"), st.sampled_from(WORDS)),
                               st.tuples(st.just("text"), st.text(max_size=20))), max_size=5))
def test_every_command_with_hostile_arguments(home, victim, command, args):
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        sb = make_sandbox(Path(tmp), victim)
        argv: list = list(command)
        for i, (what, value) in enumerate(args):
            if what == "file":
                argv.append(sb.plant(sb.work / f"in{i}.toml", value, '{"format": 1}\n'))
            else:
                argv.append(value)
        if "audit" in argv and not any(isinstance(a, Path) for a in argv):
            return  # a bare word would name a Docker image: the image audit has its own tests
        before = sb.snapshot()
        rc, text = run_cli(argv)
        check_after(sb, before, victim, argv, rc, text)
