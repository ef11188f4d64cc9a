"""`harness run` end to end with the LocalRunner and a stand-in vLLM (tests/fixtures/fakevllm).

The stand-in serves real HTTP (tests/support/fakeserver.py) and prints a vLLM-0.33-style log that
always "selects" Marlin for NVFP4, like Hopper. So these runs exercise every stage for real:
serve, readiness, fingerprint of the live log, benchmark over HTTP, verdicts, the FP8-vs-NVFP4
rule, the results store and resume. No GPU, no vLLM.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.local import wait_healthy

from harness.cli import main
from harness.matrix.load import load_matrix
from harness.results.model import Status
from harness.results.store import RunStore
from harness.run.options import RunOptions
from harness.run.session import run_matrix

ROOT = Path(__file__).resolve().parent.parent
FAKEVLLM = ROOT / "tests" / "fixtures" / "fakevllm"
FAKESERVER = ROOT / "tests" / "support" / "fakeserver.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def foreign_server(port: int, model: str):
    """Someone else's server on `port`: the fake server, serving `model` at 40 tok/s."""
    p = subprocess.Popen([sys.executable, str(FAKESERVER), "--port", str(port), "--model", model,
                          "--tokens-per-s", "40"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", p)
        yield
    finally:
        p.kill()
        p.wait()


def matrix_text(port: int, extra: str = "") -> str:
    return f"""
[matrix]
name = "fake-local"
hardware = "h200"

[hardware.h200]
cc = "9.0"
bandwidth_gbs = 4800
memory_gib = 141

[stacks.fake]
runner = "local"
[stacks.fake.local]
python = "{sys.executable}"
env = {{ PYTHONPATH = "{FAKEVLLM}", HARNESS_FAKESERVER = "{FAKESERVER}" }}

[models.qwen-fp8]
checkpoint = "fake/qwen3moe-fp8"
quantization = "fp8"
family = "qwen3moe"
load_format = "dummy"
active_params_b = 3.3
bytes_per_param = 1.0

[models.qwen-nvfp4]
checkpoint = "fake/qwen3moe-nvfp4"
quantization = "nvfp4"
family = "qwen3moe"
load_format = "dummy"
active_params_b = 3.3
bytes_per_param = 0.5625

[configs.auto]
attention_backend = "TRITON_ATTN"

[configs."moe=flashinfer_cutlass"]
moe_backend = "flashinfer_cutlass"
attention_backend = "TRITON_ATTN"

[cells]
exclude = [{{ model = "qwen-fp8", config = "moe=*" }}]

[expect]
nvfp4_over_fp8_min_ratio = 1.0

[[expect.select]]
cells = "nvfp4"
moe_backend = "MARLIN"
linear_kernel = "MarlinNvFp4LinearKernel"

[serve]
port = {port}
gpus = "none"  # the stand-in needs no GPU: serve it on any host
startup_timeout_s = 30
quiet_period_s = 8

[bench]
concurrency = [1, 2]
max_tokens = 24
repeats = 2
prompt_tokens = 32
long_prompt_tokens = 300
{extra}
"""


@pytest.fixture
def matrix_file(tmp_path) -> Path:
    path = tmp_path / "fake.toml"
    path.write_text(matrix_text(free_port()))
    return path


def test_run_serves_fingerprints_benchmarks_and_judges(matrix_file, tmp_path):
    store = run_matrix(load_matrix(matrix_file), k=None,
                       opts=RunOptions(results_root=tmp_path / "results"))
    cells = {c.id: c for c in store.cells()}
    assert list(cells) == ["fake/qwen-fp8/auto", "fake/qwen-nvfp4/auto",
                           "fake/qwen-nvfp4/moe=flashinfer_cutlass"]
    fp8, nv_auto, nv_fi = (cells[i] for i in cells)

    # every stage ran for real: the log was read, the server benchmarked over HTTP
    assert fp8.status is Status.PASS, fp8.reasons
    assert fp8.fingerprint.moe_backend == "TRITON"
    assert fp8.fingerprint.attention_backend == "TRITON_ATTN"
    lv1 = fp8.bench.levels[0]
    assert lv1.concurrency == 1 and lv1.per_stream_tok_s > 0 and lv1.failed == 0
    assert fp8.bench.prefill_prompt_tokens and fp8.bench.prefix_cache_hit_rate is not None
    assert fp8.serve.state == "ready" and fp8.serve.served_model == "qwen-fp8"
    assert (store.dir / fp8.serve.log).read_text().count("Using AttentionBackendEnum.TRITON_ATTN") == 1
    # the server proved it was this cell's: its second served name is in the command and the log
    identity = fp8.serve.command[fp8.serve.command.index("--served-model-name") + 2]
    assert identity.startswith("harness-")
    assert identity not in nv_auto.serve.command  # one per cell
    assert fp8.image_fingerprint.python  # the probe ran inside the server's environment
    assert not list((store.dir / "cells").glob("*.partial.json"))  # finished cells keep no partial

    # NVFP4 auto: Marlin as expected; the FP8-vs-NVFP4 rule judged it from the measured samples
    assert nv_auto.fingerprint.moe_backend == "MARLIN"
    assert nv_auto.fingerprint.linear_kernels == ("MarlinNvFp4LinearKernel",)
    rule = nv_auto.verdict("expect.nvfp4_over_fp8")
    assert rule is not None and rule.asked == "1"
    ratios = {f"{nv_auto.decode_c1 / fp8.decode_c1:.3f}"}
    for conc in {lv.concurrency for lv in nv_auto.bench.levels} - {1}:
        ratios.add(f"{nv_auto.bench.level(conc).aggregate_tok_s / fp8.bench.level(conc).aggregate_tok_s:.3f}")
    assert rule.got in ratios, (rule, ratios)  # the level that decided: a loss, else the lowest
    assert nv_auto.status is (Status.FAIL if rule.failed else Status.PASS)
    assert [v.check for v in nv_auto.verdicts].count("expect.nvfp4_over_fp8") == 1

    # asking is not getting: flashinfer_cutlass requested, Marlin ran
    assert nv_fi.status is Status.FAIL
    moe = nv_fi.verdict("moe_backend")
    assert moe.failed and (moe.asked, moe.got) == ("flashinfer_cutlass", "MARLIN")
    assert "asked flashinfer_cutlass, got MARLIN" in nv_fi.reasons
    assert store.run.status == "finished" and store.run.controller.pid == os.getpid()


def test_crash_and_hang_are_results_not_crashes(tmp_path):
    path = tmp_path / "fake.toml"
    path.write_text(matrix_text(free_port(), extra="") + """
[configs.crash]
env = { FAKE_VLLM_MODE = "crash" }
[configs.hang]
env = { FAKE_VLLM_MODE = "hang" }
""")
    store = run_matrix(load_matrix(path), k="qwen-fp8 and (crash or hang)",
                       opts=RunOptions(results_root=tmp_path / "results"))
    cells = {c.config: c for c in store.cells()}
    crash, hang = cells["crash"], cells["hang"]
    assert crash.status is Status.CRASHED
    assert crash.serve.exit_code == 3
    assert any("illegal memory access" in line for line in crash.serve.log_tail)
    assert any("illegal" in s for s in crash.fingerprint.signatures), crash.fingerprint.signatures
    # the stored line numbers are the stored log file's (its harness header included), as rejudge reads them
    from harness.results.store import cell_key

    log = (store.dir / "logs" / f"{cell_key(crash.id)}.server.log").read_text().splitlines()
    assert log[0].startswith("# harness ")
    for sig, ctx in crash.fingerprint.signature_context.items():
        assert crash.fingerprint.evidence[f"signature:{sig}"] in log[ctx.line - 1], (sig, ctx.line)
    assert hang.status is Status.HUNG
    assert "no new log line" in hang.reasons[0]
    assert hang.serve.log_tail[-1].endswith("Capturing CUDA graphs (decode, FULL): 100%")
    assert any("capture" in s for s in hang.fingerprint.signatures), hang.fingerprint.signatures


def test_resume_redoes_only_unfinished_cells(matrix_file, tmp_path, capsys):
    store = run_matrix(load_matrix(matrix_file), k="auto",
                       opts=RunOptions(results_root=tmp_path / "results", bench=False))
    first = {c.id: c for c in store.cells()}
    # simulate an interruption during the second cell: its JSON was never written
    store.cell_path("fake/qwen-nvfp4/auto").unlink()
    run = json.loads((store.dir / "run.json").read_text())
    run["status"] = "interrupted"
    (store.dir / "run.json").write_text(json.dumps(run))
    reopened = RunStore.open(store.dir)
    assert reopened.finished_ids() == {"fake/qwen-fp8/auto"}

    # run.json names a matrix outside the run folder: shown and refused until -m names it again
    assert main(["run", "--resume", str(store.dir), "--no-bench", "--no-report"]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "outside the run folder" in said and f"-m {store.run.matrix.path}" in said
    assert RunStore.open(store.dir).finished_ids() == {"fake/qwen-fp8/auto"}  # nothing ran
    code = main(["run", "--resume", str(store.dir), "-m", str(matrix_file), "--no-bench", "--no-report"])
    assert code == 0
    again = {c.id: c for c in RunStore.open(store.dir).cells()}
    assert list(again) == list(first)
    assert again["fake/qwen-fp8/auto"].started_at == first["fake/qwen-fp8/auto"].started_at
    assert again["fake/qwen-nvfp4/auto"].status == first["fake/qwen-nvfp4/auto"].status
    assert again["fake/qwen-nvfp4/auto"].fingerprint.moe_backend == "MARLIN"
    assert RunStore.open(store.dir).run.status == "finished"
    assert "resuming" in capsys.readouterr().err

    # an explicit -k on resume widens the run with more cells of the same matrix
    assert main(["run", "--resume", str(store.dir), "-m", str(matrix_file), "-k", "flashinfer", "--no-bench",
                 "--no-report"]) == 1
    widened = RunStore.open(store.dir)
    assert widened.run.cells == [*first, "fake/qwen-nvfp4/moe=flashinfer_cutlass"]
    assert widened.read_cell("fake/qwen-nvfp4/moe=flashinfer_cutlass").status is Status.FAIL
    assert widened.read_cell("fake/qwen-fp8/auto").started_at == first["fake/qwen-fp8/auto"].started_at


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_sigterm_stops_the_server_and_marks_the_run_interrupted(tmp_path, sig):
    """Also with SIGINT ignored by the parent (a background job of a script): Ctrl-C still
    cleans up."""
    import os
    import signal
    import subprocess
    import time
    import uuid

    tag = uuid.uuid4().hex[:10]
    path = tmp_path / "fake.toml"
    # the served name reaches the server's command line (the checkpoint path does not)
    text = matrix_text(free_port()).replace('checkpoint = "fake/qwen3moe-fp8"',
                                            f'checkpoint = "fake/qwen3moe-fp8"\nserved_name = "fp8-{tag}"')
    path.write_text(text.replace("quiet_period_s = 8", "quiet_period_s = 600") + """
[configs.hang]
env = { FAKE_VLLM_MODE = "hang" }
""")
    results = tmp_path / "results"
    p = subprocess.Popen([sys.executable, "-m", "harness", "run", "-m", str(path), "-k", "qwen-fp8/hang",
                          "--results", str(results), "--no-report"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))

    def server_pids() -> list[str]:
        r = subprocess.run(["pgrep", "-f", "--", f"--model fp8-{tag}"], capture_output=True, text=True)
        return [x for x in r.stdout.split() if x != str(p.pid)]

    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not server_pids():
            time.sleep(0.2)
        assert server_pids(), "the server never started"
        time.sleep(1.0)
        p.send_signal(getattr(signal, sig))
        out = p.communicate(timeout=60)[0].decode()
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out
    assert server_pids() == []
    run_dir = next(results.iterdir())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert os.path.exists(run_dir / "logs")


def test_cross_check_command_runs_against_the_ready_server(matrix_file, tmp_path):
    # another client measured on the same server, in the same run: its JSON lands in the cell
    cmd = (f"{sys.executable} -c \"import json, os, urllib.request; "
           "body = urllib.request.urlopen(os.environ['HARNESS_URL'] + '/v1/models').read(); "
           "json.dump({'model': os.environ['HARNESS_MODEL'], 'models': json.loads(body)}, "
           "open(os.environ['HARNESS_OUT'], 'w'))\"")
    store = run_matrix(load_matrix(matrix_file), k="qwen-fp8/auto",
                       opts=RunOptions(results_root=tmp_path / "results", bench=False, cross_check=cmd))
    cell = store.cells()[0]
    cc = cell.cross_check
    assert cc.exit_code == 0, cc.output_tail
    assert cc.result["model"] == "qwen-fp8"
    assert cc.result["models"]["data"][0]["id"] == "qwen-fp8"


def test_an_exception_in_a_cell_is_that_cell_s_result(matrix_file, tmp_path):
    # a stack whose python does not exist: starting its server raises; the run goes on
    text = matrix_file.read_text().replace("[configs.auto]", """[stacks.broken]
runner = "local"
[stacks.broken.local]
python = "/nonexistent/bin/python3"

[configs.auto]""")
    matrix_file.write_text(text)
    store = run_matrix(load_matrix(matrix_file), k="qwen-fp8 and auto",
                       opts=RunOptions(results_root=tmp_path / "results", bench=False))
    cells = {c.id: c for c in store.cells()}
    broken, ok = cells["broken/qwen-fp8/auto"], cells["fake/qwen-fp8/auto"]
    assert ok.status is Status.PASS, ok.reasons
    assert broken.status is Status.ERROR
    assert broken.error.type in ("FileNotFoundError", "ConfigError")
    assert "/nonexistent/bin/python3" in broken.error.message + " ".join(broken.reasons)
    assert broken.error.traceback  # for the maintainer; the message is for the user
    assert store.run.status == "finished"


def test_a_busy_port_is_an_error_naming_it_not_someone_else_s_numbers(matrix_file, tmp_path):
    # an orphan server (say, of a SIGKILLed run) answers on the cell's port with the same model
    # name: the cell must not measure it
    port = int(matrix_file.read_text().split("port = ")[1].split()[0])
    with foreign_server(port, "qwen-fp8"):
        store = run_matrix(load_matrix(matrix_file), k="qwen-fp8/auto",
                           opts=RunOptions(results_root=tmp_path / "results"))
    cell = store.cells()[0]
    assert cell.status is Status.ERROR and cell.bench is None
    assert f"port {port}" in cell.reasons[0] and "harness reap" in cell.reasons[0]


def test_readiness_refuses_a_foreign_server_and_reads_a_bind_failure(tmp_path):
    from harness.serve.base import ServeSpec
    from harness.serve.local import LocalRunner
    from harness.serve.readiness import wait_ready

    port = free_port()
    bind_msg = ("ERROR: [Errno 98] error while attempting to bind on address "
                f"('0.0.0.0', {port}): address already in use")
    with foreign_server(port, "qwen-fp8"):
        # our "server" lives on but never answers as itself: the foreign one must not count
        spec = ServeSpec("c", (sys.executable, "-c", "import time; print('starting', flush=True); "
                               "time.sleep(60)"), {}, port, tmp_path / "a.log")
        with LocalRunner(stop_timeout_s=2).serve(spec) as server:
            r = wait_ready(server, timeout_s=3, quiet_s=60, identity="harness-mine", poll_s=0.2)
        assert r.state == "timeout" and "not this cell's" in r.detail and "qwen-fp8" in r.detail
        # vLLM's uvicorn could not bind: that is a crash now, not a wait for the timeout
        spec = ServeSpec("c", (sys.executable, "-c", f"print({bind_msg!r}, flush=True); "
                               "import time; time.sleep(60)"), {}, port, tmp_path / "b.log")
        with LocalRunner(stop_timeout_s=2).serve(spec) as server:
            r = wait_ready(server, timeout_s=30, quiet_s=60, identity="harness-mine", poll_s=0.2)
        assert r.state == "exited" and "could not bind" in r.detail


def test_sigkill_of_the_controller_is_reaped_by_the_next_run(tmp_path):
    """SIGKILL leaves the server running and run.json at `running`: `harness reap` (and every
    run's start) stops the server of the dead controller and marks its run interrupted."""
    import signal
    import uuid

    tag = uuid.uuid4().hex[:10]
    path = tmp_path / "fake.toml"
    text = matrix_text(free_port()).replace('checkpoint = "fake/qwen3moe-fp8"',
                                            f'checkpoint = "fake/qwen3moe-fp8"\nserved_name = "fp8-{tag}"')
    path.write_text(text.replace("quiet_period_s = 8", "quiet_period_s = 600") + """
[configs.hang]
env = { FAKE_VLLM_MODE = "hang" }
""")
    results = tmp_path / "results"
    p = subprocess.Popen([sys.executable, "-m", "harness", "run", "-m", str(path), "-k", "qwen-fp8/hang",
                          "--results", str(results), "--no-report"], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def server_pids() -> list[str]:
        r = subprocess.run(["pgrep", "-f", "--", f"--model fp8-{tag}"], capture_output=True, text=True)
        return r.stdout.split()

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (server_pids() and list(results.glob("*/cells/*.partial.json"))):
            time.sleep(0.2)
        assert server_pids(), "the server never started"
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        assert server_pids(), "the orphan should outlive its controller"
        run_dir = next(results.iterdir())
        assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
        assert main(["reap", "--results", str(results)]) == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and server_pids():
            time.sleep(0.2)
        assert server_pids() == []
        run = json.loads((run_dir / "run.json").read_text())
        assert run["status"] == "interrupted" and "died" in run["note"]
    finally:
        for pid in server_pids():
            subprocess.run(["kill", "-9", pid], check=False)


def test_run_output_fits_80_columns_and_shows_final_status(matrix_file, tmp_path):
    """Ids and reasons break between words only; the line of each cell shows its final status
    (the NVFP4 cells run after FP8, so the cross-cell rule is applied before they print)."""
    env = {**os.environ, "COLUMNS": "80", "PYTHONUNBUFFERED": "1"}
    r = subprocess.run([sys.executable, "-m", "harness", "run", "-m", str(matrix_file),
                        "--results", str(tmp_path / "results"), "--no-report"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    text = r.stdout + r.stderr
    assert r.returncode in (0, 1), text
    lines = text.splitlines()
    # a line runs past 80 only when one word (a path) is longer than the room left: kept whole,
    # never folded inside (the wrapped error hint included)
    long = [x for x in lines if len(x) > 80]
    assert all(len(x.split()) <= 2 and max(map(len, x.split())) > 40 for x in long), long
    assert not any(x.rstrip().endswith("-") for x in lines), "a word was broken at a hyphen"
    store = RunStore.open(next((tmp_path / "results").iterdir()))
    for cell in store.cells():
        shown = [x for x in lines if x.endswith(f"  {cell.id}") and "]" in x]
        assert len(shown) == 1, (cell.id, lines)
        assert f" {cell.status.value}  {cell.id}" in shown[0]  # the live status is the final one
    assert "moe MARLIN" in text and "linear MarlinNvFp4LinearKernel" in text


def test_live_progress_names_the_phase_and_the_last_server_line(tmp_path):
    from rich.console import Console

    from harness.cli.run import LiveProgress
    from harness.matrix.load import load_matrix as load
    from harness.matrix.plan import expand
    from harness.serve.base import LogBuffer

    path = tmp_path / "m.toml"
    path.write_text(matrix_text(free_port()))
    cell = expand(load(path))[0]
    progress = LiveProgress(total=3)
    progress.cell_started(cell, 1, 3)
    log = LogBuffer(tmp_path / "x.log")
    log.add("(EngineCore pid=1) INFO Capturing CUDA graphs (decode, FULL): 42%")
    progress.cell_phase(cell, "start-up", log)
    console = Console(width=80, record=True, file=open(os.devnull, "w"))
    console.print(progress._render())
    shown = console.export_text().splitlines()
    assert shown[0].startswith("[1/3] fake/qwen-fp8/auto: start-up")
    assert "Capturing CUDA graphs" in shown[1] and all(len(x) <= 80 for x in shown)
    log.close()


def test_a_host_without_gpu_builds_audits_and_skips(matrix_file, tmp_path):
    """No GPU: the half of the job that needs none still runs (the local stack's audit), every
    cell is `skipped` with the reason, the report is written, and that is not a failure."""
    text = matrix_file.read_text().replace('gpus = "none"', 'gpus = "all"')
    matrix_file.write_text(text)
    store = run_matrix(load_matrix(matrix_file), k=None, opts=RunOptions(
        results_root=tmp_path / "results", gpu_present=lambda: "no NVIDIA driver on this host"))
    cells = store.cells()
    assert [c.status for c in cells] == [Status.SKIPPED] * 3
    assert all(c.reasons == () for c in cells)
    assert cells[0].verdicts[0].message == "skipped: no GPU on this host (no NVIDIA driver on this host)"
    build = store.builds()[("fake", None)]
    assert build.status == "local"  # the audit of the install ran
    assert not list((store.dir / "logs").glob("*.server.log"))  # nothing was served
    # each of its verdicts is stored once in the run, in the build; every cell points there
    assert build.audit is not None and build.audit.lines
    assert {c.build_record for c in cells} == {"builds/fake.json"}
    assert all(store.build_of(c) == build for c in cells)
    stored = "".join(p.read_text() for p in sorted(store.dir.rglob("*.json")))
    for v in (*build.audit.verdicts, *build.audit.problems):
        assert stored.count(json.dumps(v.message, ensure_ascii=False)[1:-1]) == 1, v.message


def test_planted_secrets_reach_no_file_and_no_line_the_tool_writes(matrix_file, tmp_path):
    """Secrets in every input form: stack env, config env, a CLI flag (which vLLM echoes in its
    log), a list-valued flag, the cross-check command and what it prints. None may survive in
    any file of the run directory, the report, or the tool's own output."""
    secrets = {
        "hf": "hf_" + "Q" * 34,
        "api": "sk-plantedapikey0000000001",
        "list": "sk-plantedlistvalue000002",
        "env": "plantedenvsecret000003",
        "bearer": "plantedbearer000004",
        "cc": "plantedcrosscheck000005",
    }
    text = matrix_file.read_text().replace(
        'HARNESS_FAKESERVER = "', f'HF_TOKEN = "{secrets["hf"]}", HARNESS_FAKESERVER = "').replace(
        '[configs.auto]\nattention_backend = "TRITON_ATTN"',
        '[configs.auto]\nattention_backend = "TRITON_ATTN"\n'
        f'args = ["--api-key", "{secrets["api"]}", "--middleware-token={secrets["list"]}"]\n'
        f'env = {{ MY_SERVICE_PASSWORD = "{secrets["env"]}" }}')
    matrix_file.write_text(text)
    cc = (f"echo 'Authorization: Bearer {secrets['bearer']}'; "
          f"echo token={secrets['cc']}; echo '{{}}' > \"$HARNESS_OUT\"")
    env = {**os.environ, "COLUMNS": "100"}
    r = subprocess.run([sys.executable, "-m", "harness", "run", "-m", str(matrix_file), "-k",
                        "qwen-fp8/auto", "--results", str(tmp_path / "results"), "--no-bench",
                        "--cross-check", cc], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    run_dir = next((tmp_path / "results").iterdir())
    log = next((run_dir / "logs").glob("*.server.log")).read_text()
    assert "api_key" in log  # vLLM echoed its arguments: the mask had something to do
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "report.md" for p in written)
    everything = r.stdout + r.stderr + "".join(p.read_text(errors="replace") for p in written)
    leaked = {k: v for k, v in secrets.items() if v in everything}
    assert not leaked, leaked


def test_rejudge_derives_every_verdict_again_from_the_stored_logs(tmp_path, capsys):
    """The shipped H200 example, judged again: today's fingerprint finds the Triton JIT
    signature in its stored logs, which the run itself did not know."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(ROOT / "examples" / "h200" / "run", run_dir)
    for path in (run_dir / "cells").glob("*.json"):  # as an older version judged it
        cell = json.loads(path.read_text())
        cell["verdicts"] = [v for v in cell["verdicts"] if "triton-jit" not in v["check"]]
        path.write_text(json.dumps(cell))
    before = {c.id: c for c in RunStore.open(run_dir).cells()}
    assert main(["rejudge", str(run_dir)]) == 0
    after = {c.id: c for c in RunStore.open(run_dir).cells()}
    for cid, cell in after.items():
        assert cell.verdict("signature:triton-jit-during-inference") is not None, cid
        assert cell.status == before[cid].status
        assert cell.bench == before[cid].bench  # figures are kept, only verdicts are derived
        sel = cell.verdict("moe_backend")
        assert sel.got == cell.fingerprint.moe_backend
    assert "+ signature:triton-jit-during-inference" in capsys.readouterr().out
    nv = after["vllm-0251/qwen3moe-nvfp4/auto"]
    rule = nv.verdict("expect.nvfp4_over_fp8")
    # a tie within noise at c=1, and 0.71x of FP8's aggregate at c=8: the rule judges every level
    assert rule.status == "fail" and "(within the ±2.0% noise band)" in rule.message
    assert rule.got == "0.712" and rule.message.endswith("Fails at c=8")
