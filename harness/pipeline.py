"""`harness run`: load → expand → build → audit → serve → fingerprint → bench → verdict → report.

Each cell ends as a result (status, reasons, fingerprint, bench, durations), written atomically
as soon as it is known; a failed cell never stops the run. The run directory can be resumed:
finished cells are skipped, the interrupted one is redone. Ctrl-C stops the current server,
removes its container, marks the run interrupted and leaves every finished cell on disk.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from harness import __version__, gpu_attach, serve_cmd
from harness.console import err
from harness.errors import ConfigError
from harness.fingerprint import fingerprint
from harness.matrix.load import Matrix
from harness.matrix.plan import Cell, expand, group_by_stack
from harness.redact import redact_args, redact_env
from harness.runners.base import Runner, ServeSpec
from harness.runners.readiness import wait_ready
from harness.verdict import add_verdict, apply_format_rule, judge

PROBE = Path(__file__).resolve().parent / "probe_image.py"
CONTAINER_MODEL_DIR = "/models"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class RunOptions:
    results_root: Path = Path("results")
    keep_failed: bool = False
    soak_s: float = 0.0
    bench: bool = True
    force_build: bool = False
    allow_unpinned: bool = False
    audit_local: bool = True
    # A shell command run against each ready server after the benchmark (another client, to
    # hold our figures against): it sees HARNESS_URL, HARNESS_MODEL and HARNESS_OUT (a JSON path).
    cross_check: str | None = None
    # A Dockerfile template other than docker/Dockerfile.vllm.in (tests use a small one).
    build_template: Path | None = None
    build_template_values: dict | None = None
    argv: tuple[str, ...] = ()
    # How a runner is made for a stack; tests and `--runner` swap it.
    runner_for: Callable[[Cell], Runner] | None = None
    on_cell: Callable[[dict], None] = field(default=lambda _c: None)


# --- stage: serve + fingerprint + bench, one cell ---------------------------------------------


def _requested(cell: Cell) -> dict:
    c = cell.config
    return {"moe_backend": c.moe_backend, "linear_backend": c.linear_backend,
            "attention_backend": c.attention_backend, "cudagraph_mode": c.cudagraph_mode}


def _spec(cell: Cell, matrix: Matrix, run_id: str, log_path: Path, image: str | None,
          opts: RunOptions) -> tuple[ServeSpec, serve_cmd.ServeCommand]:
    serve = matrix.spec.serve
    stack = cell.stack
    labels = {"harness.run-id": run_id, "harness.role": "serve", "harness.cell": cell.id}
    if stack.runner == "local":
        cmd = serve_cmd.build(cell, serve, matrix_dir=matrix.path.parent, port=serve.host_port or serve.port)
        argv = (stack.local.python, *serve_cmd.VLLM_MODULE, *cmd.args)
        mounts: tuple = ()
        attach = None
    else:
        src = serve_cmd.model_path(cell, matrix.path.parent)
        mounts = []
        override = None
        if Path(src).is_dir():  # a local checkpoint: mount it read-only where vLLM reads it
            override = f"{CONTAINER_MODEL_DIR}/{cell.model_name}"
            mounts.append((src, override, "ro"))
        if serve.model_cache:
            mounts.append((serve.model_cache, "/root/.cache/huggingface", "ro"))
        attach = gpu_attach.serve_fields(matrix)  # [host]: GPU attach mode, network, security options
        host_net = attach["spec"]["network"] == "host"
        cmd = serve_cmd.build(cell, serve, matrix_dir=matrix.path.parent,
                              port=(serve.host_port or serve.port) if host_net else serve.port,
                              host="127.0.0.1" if host_net else "0.0.0.0", model_override=override)
        cmd = dataclasses.replace(cmd, env={**attach["env"], **cmd.env})
        argv = ("python3", *serve_cmd.VLLM_MODULE, *cmd.args)
        mounts = tuple(mounts) + attach["mounts"]
    header = (f"# harness {__version__} run {run_id} cell {cell.id}",
              "# command: " + " ".join(redact_args(list(argv))),
              *(f"{k}={v}" for k, v in sorted(redact_env(cmd.env).items())),
              *((gpu_attach.describe(attach["spec"]),) if attach else ()))
    spec = ServeSpec(cell_id=cell.id, argv=argv, env=cmd.env, port=cmd.port, log_path=log_path,
                     labels=labels, image=image, gpus=None if serve.gpus == "none" else serve.gpus, mounts=mounts,
                     shm_size=serve.shm_size, keep_failed=opts.keep_failed, header=header,
                     **({k: v for k, v in attach["spec"].items() if k != "gpus"} if attach else {}))
    return spec, cmd


def _image_fingerprint(cell: Cell, server, spec: ServeSpec) -> dict | None:
    """Versions and env from inside the image (or the local env), via probe_image.py."""
    from harness import proc

    try:
        if cell.stack.runner == "local":
            import os

            r = proc.run([cell.stack.local.python, str(PROBE)], timeout=120,
                         env={**os.environ, **spec.env})
            text = r.stdout if r.ok else ""
        else:
            server.container.put_file("/tmp", "harness_probe.py", PROBE.read_bytes())
            code, text = server.container.exec(["python3", "/tmp/harness_probe.py"])
            text = text if code == 0 else ""
        return json.loads(text) if text.strip() else None
    except (json.JSONDecodeError, OSError, ValueError):
        return None


def _memwatch():
    try:
        from harness.results.memwatch import MemWatch
    except ImportError:
        return None
    return MemWatch(interval_s=5)


def serve_cell(cell: Cell, matrix: Matrix, store, run_id: str, runner: Runner, image: str | None,
               opts: RunOptions) -> dict:
    t0 = time.monotonic()
    started = now_iso()
    log_path = store.log_path(cell.id)
    spec, cmd = _spec(cell, matrix, run_id, log_path, image, opts)
    result: dict = {
        "format": 1, "id": cell.id, "stack": cell.stack_name, "model": cell.model_name,
        "config": cell.config_name, "quantization": cell.quantization, "runner": cell.stack.runner,
        "requested": _requested(cell),
        "model_info": {"active_params_b": cell.model.active_params_b,
                       "bytes_per_param": cell.model.bytes_per_param,
                       "checkpoint": cell.model.checkpoint, "load_format": cell.model.load_format},
        "status": None, "reasons": [], "verdicts": [], "fingerprint": None, "bench": None,
        "image": None, "image_fingerprint": None, "audit": None, "memory": None,
        "serve": {"command": redact_args(list(spec.argv)), "env": redact_env(spec.env),
                  "log": str(log_path.relative_to(store.dir)), "startup_s": None, "exit_code": None,
                  "state": None, "log_tail": []},
        "durations": {}, "started_at": started, "finished_at": None,
    }
    bench_cfg = matrix.spec.bench
    watch = _memwatch()
    with runner.serve(spec) as server:
        if watch is not None:
            watch.__enter__()
        try:
            ready = wait_ready(server, timeout_s=matrix.spec.serve.startup_timeout_s,
                               quiet_s=matrix.spec.serve.quiet_period_s)
            result["serve"].update(startup_s=round(ready.startup_s, 1), exit_code=ready.exit_code,
                                   state=ready.state, log_tail=list(ready.tail))
            result["durations"]["startup_s"] = round(ready.startup_s, 1)
            if ready.ready:
                if watch is not None:
                    watch.mark_steady()
                result["image_fingerprint"] = _image_fingerprint(cell, server, spec)
                if opts.bench:
                    from harness.bench import bench as run_bench_sync

                    tb = time.monotonic()
                    result["bench"] = run_bench_sync(
                        server.base_url, cmd.served_name, concurrency=bench_cfg.concurrency,
                        max_tokens=bench_cfg.max_tokens, repeats=bench_cfg.repeats,
                        prompt_tokens=bench_cfg.prompt_tokens, prefill=bench_cfg.prefill,
                        long_prompt_tokens=bench_cfg.long_prompt_tokens,
                    ).to_dict()
                    result["durations"]["bench_s"] = round(time.monotonic() - tb, 1)
                if opts.cross_check:
                    result["cross_check"] = _cross_check(opts.cross_check, server.base_url,
                                                         cmd.served_name, store.dir / "logs", cell)
                if opts.soak_s > 0:
                    _soak(server.base_url, cmd.served_name, opts.soak_s)
            else:
                server.mark_failed()
        finally:
            if watch is not None:
                watch.__exit__(None, None, None)
                result["memory"] = watch.result()
        text = server.log.text()
    fp = fingerprint(text, process_ended=not ready.ready)
    result["fingerprint"] = fp.to_json()
    judge(cell, matrix, result, fp, ready)
    result["durations"]["total_s"] = round(time.monotonic() - t0, 1)
    result["finished_at"] = now_iso()
    return result


def _cross_check(command: str, url: str, model: str, log_dir: Path, cell: Cell) -> dict:
    import os

    from harness import proc
    from harness.results.store import cell_key

    out_json = log_dir / f"{cell_key(cell.id)}.cross-check.json"
    t0 = time.monotonic()
    r = proc.run(["bash", "-c", command], timeout=1800,
                 env={**os.environ, "HARNESS_URL": url, "HARNESS_MODEL": model, "HARNESS_OUT": str(out_json)})
    data = None
    if out_json.is_file():
        try:
            data = json.loads(out_json.read_text())
        except json.JSONDecodeError:
            data = None
    return {"command": command, "exit_code": r.returncode, "duration_s": round(time.monotonic() - t0, 1),
            "output_tail": (r.stdout + r.stderr).strip().splitlines()[-20:], "result": data}


def _soak(url: str, model: str, seconds: float) -> None:
    """Steady load for the memory watch: rounds of concurrency-8 decode until time is up."""
    from harness.bench import bench as run_bench_sync

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        run_bench_sync(url, model, concurrency=(8,), max_tokens=128, repeats=1, warmup=False,
                       prefill=False)


# --- the run ----------------------------------------------------------------------------------


def _engine(engine_box: dict):
    """The Docker engine, connected on first use: a run of local stacks never needs one."""
    if "engine" not in engine_box:
        from harness.engine import connect

        engine_box["engine"] = connect()
    return engine_box["engine"]


def _default_runner_for(engine_box: dict) -> Callable[[Cell], Runner]:
    from harness.runners.local import LocalRunner

    def make(cell: Cell) -> Runner:
        if cell.stack.runner == "local":
            return LocalRunner()
        from harness.runners.docker import DockerRunner

        return DockerRunner(_engine(engine_box))

    return make


def run_matrix(matrix: Matrix, *, k: str | None, opts: RunOptions, resume_dir: Path | None = None):
    """Run the selected cells; returns the store (its run dir holds every result)."""
    from harness.results.store import RunStore, new_run_id

    cells = expand(matrix, k)
    if not cells:
        raise ConfigError(f"{matrix.path}: no cell matches -k {k!r}", hint="see `harness plan -m ... --list`")
    if resume_dir is not None:
        store = RunStore.open(resume_dir)
        done = store.finished_ids()
        planned = list(store.run.get("cells", []))
        added = [c.id for c in cells if c.id not in planned]
        # `--resume DIR -k EXPR` widens a run with more cells of the same matrix
        store.update_run(cells=planned + added, status="running", finished_at=None)
        err.print(f"resuming {store.dir}: {len(done)} of {len(cells)} cells already finished")
    else:
        from harness.hostenv import host_fingerprint

        run_id = new_run_id(matrix.spec.matrix.name)
        hw = matrix.spec.hardware[matrix.spec.matrix.hardware]
        store = RunStore.create(opts.results_root, run_id, {
            "format": 1, "run_id": run_id, "tool_version": __version__, "argv": list(opts.argv),
            "k": k,
            "matrix": {"path": str(matrix.path), "sha256": hashlib.sha256(matrix.source_bytes).hexdigest(),
                       "name": matrix.spec.matrix.name, "hardware_name": matrix.spec.matrix.hardware,
                       "hardware": hw.model_dump(mode="json"),
                       "expect": matrix.spec.expect.model_dump(mode="json"),
                       "bench": matrix.spec.bench.model_dump(mode="json")},
            "host": host_fingerprint(),
            "cells": [c.id for c in cells],
            "started_at": now_iso(), "finished_at": None,
        })
        done = set()
    run_id = store.run["run_id"]
    engine_box: dict = {}
    runner_for = opts.runner_for or _default_runner_for(engine_box)
    try:
        images = _build_stage(matrix, cells, store, opts, engine_box)
        for cell in cells:
            if cell.id in done:
                continue
            outcome = images.get(cell.stack_name)
            docker = cell.stack.runner == "docker"
            if outcome is not None and outcome.get("status") == "failed":
                result = _build_failed_cell(cell, outcome)
            else:
                image = outcome.get("image_ref") if outcome and docker else None
                result = serve_cell(cell, matrix, store, run_id, runner_for(cell), image, opts)
                if outcome:
                    result["audit"] = outcome.get("audit_summary") or outcome.get("audit")
                if outcome and docker:
                    result["image"] = {"ref": outcome.get("image_ref"), "id": outcome.get("image_id"),
                                       "labels": outcome.get("labels", {})}
                    for problem in outcome.get("arch_problems") or ():
                        # the build log says the archs asked for are not the archs built: THE trap
                        add_verdict(result, {"check": "build.archs", "status": "fail",
                                              "message": problem, "lines": []})
            store.write_cell(result)
            opts.on_cell(result)
        apply_format_rule(store)
        store.finish("finished")
    except BaseException:  # Ctrl-C, SIGTERM, or a refusal before any cell: say the run stopped
        store.finish("interrupted")
        raise
    return store


def _build_failed_cell(cell: Cell, outcome: dict) -> dict:
    return {
        "format": 1, "id": cell.id, "stack": cell.stack_name, "model": cell.model_name,
        "config": cell.config_name, "quantization": cell.quantization, "runner": cell.stack.runner,
        "requested": _requested(cell),
        "model_info": {"active_params_b": cell.model.active_params_b,
                       "bytes_per_param": cell.model.bytes_per_param},
        "status": "build-failed",
        "reasons": [f"image for stack {cell.stack_name} did not build: "
                    + (outcome.get("reason") or (outcome.get("log_tail") or ["(no log)"])[-1])],
        "verdicts": [], "fingerprint": None, "bench": None,
        "image": {"ref": outcome.get("image_ref"), "id": None, "labels": {}},
        "image_fingerprint": None, "audit": None, "memory": None,
        "serve": None, "durations": {}, "started_at": now_iso(), "finished_at": now_iso(),
        "build": {"log": outcome.get("log_path"), "log_tail": outcome.get("log_tail", [])[-40:]},
    }


def audit_local_stack(matrix: Matrix, stack_name: str) -> dict:
    """What a local install really holds: run the arch audit on its vllm package directory."""
    import os

    from harness import proc

    stack = matrix.spec.stacks[stack_name]
    env = {**os.environ, **stack.local.env}
    r = proc.run([stack.local.python, "-c", "import os, vllm; print(os.path.dirname(vllm.__file__))"],
                 timeout=300, env=env)
    outcome = {"stack": stack_name, "image_ref": f"local:{stack.local.python}", "image_id": None,
               "status": "local", "labels": {}, "log_path": None, "log_tail": [], "duration_s": 0.0,
               "audit": None}
    if not r.ok:
        outcome["log_tail"] = (r.stderr or r.stdout).strip().splitlines()[-5:]
        return outcome
    vllm_dir = r.stdout.strip().splitlines()[-1]
    outcome["labels"] = {"harness.local.vllm_dir": vllm_dir}
    try:
        from harness.audit import Target, audit_path
    except ImportError:
        return outcome
    hw = matrix.spec.hardware[matrix.spec.matrix.hardware]
    t0 = time.monotonic()
    report = audit_path(Path(vllm_dir), [Target.from_cc(hw.cc)])
    outcome["audit"] = report.to_json()
    outcome["audit"].pop("files", None)  # per-file detail stays out of every cell; totals remain
    outcome["audit_summary"] = report.summary()
    outcome["duration_s"] = round(time.monotonic() - t0, 1)
    return outcome


def _build_stage(matrix: Matrix, cells: list[Cell], store, opts: RunOptions, engine_box: dict) -> dict:
    """Build (or reuse) the image of every docker stack the cells need; outcomes by stack.

    Local stacks are audited instead (the arch audit of their installed vllm package)."""
    needed = list(group_by_stack(cells))
    for s in needed:
        if matrix.spec.stacks[s].runner == "local" and s not in store.builds() and opts.audit_local:
            store.write_build(s, audit_local_stack(matrix, s))
    stacks = [s for s in needed if matrix.spec.stacks[s].runner == "docker"]
    known = store.builds()
    for s in stacks:  # prebuilt images: record what they are, build nothing
        image = matrix.spec.stacks[s].image
        if image and s not in known:
            labels = _engine(engine_box).image_labels(image)
            outcome = {"stack": s, "image_ref": image, "image_id": _engine(engine_box).image_id(image),
                       "status": "reused" if labels is not None else "failed", "labels": labels or {},
                       "log_path": None, "log_tail": [] if labels is not None else
                       [f"image {image} does not exist on this engine (build or load it first)"],
                       "duration_s": 0.0, "audit": None}
            store.write_build(s, outcome)
    known = store.builds()
    todo = [s for s in stacks if s not in known]
    if todo:
        try:
            from harness.build.builder import build_stacks
        except ImportError as exc:
            from harness.errors import NotBuiltYet

            raise NotBuiltYet("the build stage is not available in this checkout",
                              hint="use a stack with runner = \"local\"") from exc
        extra = {}
        if opts.build_template is not None:
            extra = {"template": opts.build_template, "template_values": opts.build_template_values}
        outcomes = build_stacks(matrix, todo, engine=_engine(engine_box), log_dir=store.dir / "logs",
                                force=opts.force_build, allow_unpinned=opts.allow_unpinned, **extra)
        for name, outcome in outcomes.items():
            data = json.loads(json.dumps(dataclasses.asdict(outcome), default=str))
            store.write_build(name, data)
        known = store.builds()
    return {s: known[s] for s in needed if s in known}


def exit_code(store) -> int:
    cells = store.cells()
    return 0 if cells and all(c and c["status"] in ("pass", "skipped") for c in cells) else 1
