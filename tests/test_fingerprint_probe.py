"""probe_image.py run for real with this machine's interpreter (no vllm / torch here), and the
`harness fingerprint` command on a real fixture log."""

from __future__ import annotations

import ast
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "harness" / "probe_image.py"
LOGS = ROOT / "tests" / "fixtures" / "logs"


def test_probe_runs_standalone_and_redacts():
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin"),
        "VLLM_API_KEY": "sekrit",
        "VLLM_NOTE": "hf_" + "a" * 34,
        "TORCH_CUDA_ARCH_LIST": "12.0a;12.1a",
        "FLASHINFER_CUDA_ARCH_LIST": "12.1a",
        "HF_TOKEN": "hf_" + "b" * 34,
        "VLLM_DB_PASS": "pw-one",
        "VLLM_SESSION_COOKIE": "pw-two",
        "VLLM_CREDENTIALS_FILE": "pw-three",
        "VLLM_MIRROR": "https://alice:pw-four@mirror.example/simple?access_token=pw-five&x=1",
    }
    # -I: isolated, so nothing from this checkout (or the harness package) can be imported.
    done = subprocess.run(
        [sys.executable, "-I", str(PROBE)],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["python"] == ".".join(map(str, sys.version_info[:3]))
    assert data["env"]["VLLM_API_KEY"] == "***"
    assert data["env"]["VLLM_NOTE"] == "***"
    assert data["env"]["TORCH_CUDA_ARCH_LIST"] == "12.0a;12.1a"
    assert data["env"]["FLASHINFER_CUDA_ARCH_LIST"] == "12.1a"
    assert "HF_TOKEN" not in data["env"] and "hf_" not in done.stdout
    # the names and URL credentials harness.redact masks are masked inside the image too
    assert not any(f"pw-{n}" in done.stdout for n in ("one", "two", "three", "four", "five"))
    assert data["env"]["VLLM_MIRROR"] == "https://***@mirror.example/simple?access_token=***&x=1"
    assert set(data["distributions"]) >= {
        "vllm",
        "torch",
        "flashinfer-python",
        "flashinfer-cubin",
        "flashinfer-jit-cache",
    }
    for part in ("vllm", "torch"):
        assert set(data[part]) >= {"version", "error"}
        if data[part]["version"] is None:
            assert data[part]["error"]


def test_probe_is_stdlib_only_and_python38_syntax():
    tree = ast.parse(PROBE.read_text(), feature_version=(3, 8))
    imported = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    imported |= {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
    }
    assert not {"harness", "pydantic", "rich"} & imported
    assert imported <= set(sys.stdlib_module_names) | {"vllm", "torch"}


def test_cli_json(capsys):
    rc = main(
        [
            "fingerprint",
            str(LOGS / "vllm43507_marlin_moe_cutlass_linear.log"),
            "--json",
            "--linear",
            "marlin",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert rc == 1  # a failed verdict is exit 1
    assert data["fingerprint"]["moe_backend"] == "MARLIN"
    assert {
        "check": "linear_backend",
        "status": "fail",
        "message": "asked marlin, got CutlassNvFp4LinearKernel",
        "lines": ["Using CutlassNvFp4LinearKernel for NVFP4 GEMM"],
    } in data["verdicts"]


def test_cli_table(capsys):
    log = str(LOGS / "dynamo4087_log_ends_in_capture.log")
    assert main(["fingerprint", log]) == 0  # a file alone: ends during capture (warn)
    text = capsys.readouterr().out
    assert "132752" in text and "ends-during-capture" in text and "capture-hang" not in text
    assert main(["fingerprint", "--hung", log]) == 1
    text = capsys.readouterr().out
    assert "cudagraph-capture-hang" in text
    assert "cuda-graph-capture" in text  # failure_class row


def test_cli_passing_log_exits_0(capsys):
    log = LOGS / "corpus" / "016-v0191-phi3-ok.log"
    assert main(["fingerprint", str(log)]) == 0
    assert "fail" not in capsys.readouterr().out.split("verdicts")[-1]


def test_cli_shows_new_facts(capsys):
    log = LOGS / "corpus" / "001-gb10-v0251-dflash-laguna-nvfp4.log"
    main(["fingerprint", str(log), "--json"])
    fp = json.loads(capsys.readouterr().out)["fingerprint"]
    assert fp["spec_method"] == "dflash" and fp["num_speculative_tokens"] == 15
    assert fp["spec_acceptance_per_position"] == [0.0] * 15  # the drafter never hit
    main(["fingerprint", str(LOGS / "corpus" / "010-gb10-fi3486-swiglustep-refused.log")])
    text = capsys.readouterr().out
    assert "backend-refused" in text and "flashinfer_cutlass" in text


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "is empty"),
        (b"  \n\n", "is empty"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)) * 4, "not text"),
        (gzip.compress(b"INFO 05-12 10:00:00 [x.py:1] hi\n", mtime=0), "compressed (gzip)"),
    ],
)
def test_cli_bad_input_is_exit_2_naming_the_file(tmp_path, capsys, content, words):
    log = tmp_path / "vllm.log"
    log.write_bytes(content)
    assert main(["fingerprint", str(log)]) == 2
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long paths
    assert str(log) in err and words in err and "fix:" in err


def test_cli_directory_is_exit_2(tmp_path, capsys):
    assert main(["fingerprint", str(tmp_path)]) == 2
    assert "is a directory" in " ".join(capsys.readouterr().err.split())  # wrapped at 80 columns


def test_cli_missing_file(capsys):
    assert main(["fingerprint", "/nonexistent/vllm.log"]) == 2
    assert "cannot read log" in capsys.readouterr().err
