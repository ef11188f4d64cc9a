"""Every `--json` of every command parses, with secrets planted in what it reads.

The commands that have `--json` are found in the parser itself (harness/cli), so a new one
without a case here fails `test_every_json_command_has_a_case`. Each case runs the real
command line on shipped data (a shipped matrix, captured vLLM logs, the fixture run folders,
compiled cubins, the fake vLLM server) with a secret planted where the command will read it,
and checks that stdout is JSON and the secret is masked. The mask works inside JSON string
values only: `"token_counts_reliable": ***` (a boolean under a key holding "token") once made
`harness bench --json` print something no JSON reader takes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.local import fake_server

from harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SECRET = "Zq7hunter2Secret9Xw"
# a folder name that carries a query token, as a path copied from a signed URL does
PLANTED_DIR = f"from-bucket?token={SECRET}"


def json_commands() -> set[str]:
    """`command` (or `command verb`) for every parser of harness/cli with a --json option."""
    found: set[str] = set()

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if "--json" in action.option_strings and prefix:
                found.add(prefix)
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{prefix} {name}".strip())

    walk(build_parser(), "")
    return found


def harness(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd or ROOT, env={**os.environ, **(env or {})})


def case_plan(tmp: Path) -> tuple[list[str], dict, bool]:
    matrix = tmp / "generic.toml"
    text = (ROOT / "matrix" / "generic.toml").read_text()
    matrix.write_text(text + f'\n[hosts.a]\nengine = "tcp://admin:{SECRET}@127.0.0.1:2376"\n')
    return ["plan", "-m", str(matrix), "--json"], {}, False


def case_env(tmp: Path) -> tuple[list[str], dict, bool]:
    # the engine `docker version` asks is named with a password in the environment
    return ["env", "--json"], {"DOCKER_HOST": f"tcp://admin:{SECRET}@127.0.0.1:9"}, False


def case_fingerprint(tmp: Path) -> tuple[list[str], dict, bool]:
    log = tmp / "server.log"
    text = (FIXTURES / "logs" / "h200_v0251_fp8_auto.log").read_text()
    # vLLM echoes its arguments: an --api-key reaches the log as a list, a mirror URL with its token
    text = text.replace("'load_format': 'dummy'", f"'load_format': 'dummy', 'api_key': ['{SECRET}']", 1)
    text += f"\n(APIServer pid=569) WARNING downloading from https://user:{SECRET}@mirror.example/m\n"
    log.write_text(text)
    return ["fingerprint", str(log), "--json"], {}, True


def case_bench(tmp: Path) -> tuple[list[str], dict, bool]:
    return (["bench", "--url", f"http://admin:{SECRET}@URL", "--model", "fake-model", "--concurrency", "1",
             "--max-tokens", "8", "--repeats", "1", "--no-prefill", "--no-warmup", "--json"], {}, False)


def case_compare(tmp: Path) -> tuple[list[str], dict, bool]:
    where = tmp / PLANTED_DIR
    runs = sorted((FIXTURES / "runs").glob("*-spark-*"))
    base, cand = (shutil.copytree(r, where / r.name) for r in runs[:2])
    return ["compare", str(base), str(cand), "--json"], {}, True


def case_audit(tmp: Path) -> tuple[list[str], dict, bool]:
    where = tmp / PLANTED_DIR
    where.mkdir()
    shutil.copy(FIXTURES / "cubins" / "nvfp4_sm120a.so", where)
    return ["audit", str(where / "nvfp4_sm120a.so"), "--target-cc", "12.1", "--json"], {}, True


CASES = {"plan": case_plan, "env": case_env, "fingerprint": case_fingerprint, "bench": case_bench,
         "compare": case_compare, "audit": case_audit}


def test_every_json_command_has_a_case():
    assert json_commands() == set(CASES)


@pytest.mark.parametrize("command", sorted(CASES))
def test_json_output_parses_and_masks_what_was_planted(command, tmp_path):
    argv, env, reaches = CASES[command](tmp_path)
    if command == "bench":
        with fake_server("--tokens-per-s", "5000") as url:
            argv = [a.replace("URL", url.removeprefix("http://")) for a in argv]
            r = harness(*argv, env=env)
    else:
        r = harness(*argv, env=env)
    assert r.returncode in (0, 1), r.stderr  # 1: a verdict or a comparison failed, still reported
    data = json.loads(r.stdout)  # the whole of stdout is one JSON document
    assert SECRET not in r.stdout and SECRET not in r.stderr
    if reaches:  # the planted secret reached the document, masked where it sits
        assert "***" in r.stdout, r.stdout[:2000]
    if command == "bench":  # the fields whose names hold "token" keep their values
        assert isinstance(data["token_counts_reliable"], bool) and data["token_count_source"] == "usage", data


def test_the_bench_out_file_is_the_same_masked_json(tmp_path):
    out = tmp_path / "bench.json"
    with fake_server("--tokens-per-s", "5000") as url:
        r = harness("bench", "--url", url, "--model", "fake-model", "--concurrency", "1", "--max-tokens", "8",
                    "--repeats", "1", "--no-prefill", "--no-warmup", "--json", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text()) == json.loads(r.stdout)


# --- the same rule in what is written and in argparse's errors -------------------------------


def test_a_bisect_folder_s_files_are_masked_and_stay_json(tmp_path):
    from harness.bisect.history import Point
    from harness.bisect.store import BisectResult, BisectSpec, BisectStore, Side, Step

    spec = BisectSpec.model_validate({
        "history": {"kind": "releases", "project": "vllm", "good": "0.20.1", "bad": "0.20.2",
                    "index": f"https://pypi.example/pypi/{{name}}/json?token={SECRET}"},
        "probe": {"probe": "command", "command": ["probe.sh", "--api-key", SECRET]},
        "setup": {"env": {"HF_TOKEN": SECRET}}})
    store = BisectStore.create(tmp_path, spec, [Point("0.20.1", "a"), Point("0.20.2", f"b https://{SECRET}@h")],
                               set())
    store.write_step(Step(index=1, id="0.20.2", step=1, verdict="bad", reason=f"--x-token {SECRET}", seconds=1.0,
                          token_counts_reliable=True))
    good = Side(id="0.20.1", title="a", date="", verdict="good", reason="")
    bad = Side(id="0.20.2", title="b", date="", verdict="bad", reason="")
    store.write_result(BisectResult(history=spec.history, probe=spec.probe, setup=spec.setup, points=2, done=True,
                                    first_bad=bad, last_good=good, bad_side=bad, steps=[], seconds=1.0,
                                    note=f"{'X' * 200}_TOKEN={SECRET}"), f"see ?api_key={SECRET}\n")
    for path in (tmp_path / "bisect.json", store.step_path(1), tmp_path / "result.json", tmp_path / "result.md"):
        text = path.read_text()
        assert SECRET not in text and "***" in text, (path, text)
        if path.suffix == ".json":
            json.loads(text)
    assert json.loads(store.step_path(1).read_text())["token_counts_reliable"] is True


def test_argparse_errors_are_masked_by_the_same_rule():
    for bad in (("--x-token", SECRET), (f"--api-key={SECRET}",), (f"https://admin:p@ss{SECRET}@host/x",)):
        r = harness("plan", "-m", "matrix/generic.toml", *bad)
        assert r.returncode == 2 and "error" in r.stderr, r.stderr
        assert SECRET not in r.stderr + r.stdout, r.stderr
