"""`harness bug RUN CELL`: a ready-to-file upstream bug report for one cell of a run.

Everything in it comes from the run directory (never from the host the command runs on, which
may not be the one that ran the cell): the host and image fingerprints, the build labels, the
exact serve command, the verdicts and the log lines that prove them. vLLM's collect_env misses
compute capability, archs actually compiled, FlashInfer builds, patches and image identity
(FACTS.md, "Bug-report fingerprint anchors"): those are what a maintainer asks for first.
Secrets are masked in every piece, and once more over the whole text.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError
from harness.fingerprint.tables import signatures
from harness.redact import redact_args, redact_env, redact_text
from harness.results.store import RunStore

LOG_TAIL_LINES = 40

TRACKERS = {
    "vllm": ("vLLM", "https://github.com/vllm-project/vllm/issues/new/choose"),
    "flashinfer": ("FlashInfer", "https://github.com/flashinfer-ai/flashinfer/issues/new/choose"),
    "driver": (
        "NVIDIA driver",
        "https://forums.developer.nvidia.com/c/accelerated-computing/dgx-spark-gb10/ "
        "(or the NVIDIA bug portal, https://developer.nvidia.com/bugs)",
    ),
    "triton": ("Triton", "https://github.com/triton-lang/triton/issues/new/choose"),
    "nvidia-container": (
        "NVIDIA Container Toolkit",
        "https://github.com/NVIDIA/nvidia-container-toolkit/issues/new/choose",
    ),
}
_SELECTION_CHECKS = ("moe_backend", "linear_backend", "attention_backend")
_CRASH_VERB = {
    "crashed": "server crashes at start-up",
    "hung": "server hangs at start-up",
    "timeout": "server not ready before the start-up timeout",
    "build-failed": "image build fails",
}


@dataclass(frozen=True)
class Tracker:
    key: str
    why: str


def _chip(run: dict) -> str:
    host = run.get("host") or {}
    gpus = host.get("gpus") or []
    hw = (run.get("matrix") or {}).get("hardware") or {}
    name = gpus[0].get("name") if gpus else None
    cc = (gpus[0].get("cc") if gpus else None) or hw.get("cc")
    name = name or (run.get("matrix") or {}).get("hardware_name") or "unknown GPU"
    if cc:
        sm = "SM_" + str(cc).replace(".", "")
        return f"{name} ({sm}, cc {cc})"
    return name


def _fatal(fp: dict) -> list[str]:
    severity = {s.id: s.severity for s in signatures()}
    return [s for s in fp.get("signatures") or [] if severity.get(s) == "fatal"]


def symptom(cell: dict) -> str:
    """One line naming what went wrong, most specific evidence first: a fatal signature, a
    start-up failure, a kernel the cell asked for and did not get, what the log says it asked."""
    fp = cell.get("fingerprint") or {}
    status = cell.get("status")
    fatal = _fatal(fp)
    if fatal:
        return f"{fatal[0]}: {_CRASH_VERB.get(status, 'server fails')}"
    if status in _CRASH_VERB:
        return _CRASH_VERB[status]
    failed = [v for v in cell.get("verdicts") or [] if v.get("status") == "fail"]
    for v in failed:
        if v.get("check") in _SELECTION_CHECKS:
            return f"--{v['check'].replace('_', '-')} not honoured: {v['message']}"
    for m in fp.get("mismatches") or []:
        flag = "--" + m["what"].replace("_", "-")
        return f"{flag} {m['asked']} not honoured: the log shows {m['got']}"
    if failed:
        return f"{failed[0]['check']}: {failed[0]['message']}"
    if cell.get("reasons") or []:
        return cell["reasons"][0]
    return f"cell status {status}"


def trackers(cell: dict) -> list[Tracker]:
    """Likely upstream homes, best guess first: the signature table's tracker for each known
    failure, vLLM for a kernel request it did not honour, FlashInfer for autotuner skips."""
    fp = cell.get("fingerprint") or {}
    by_id = {s.id: s for s in signatures()}
    found: list[Tracker] = []
    for sid in sorted(
        fp.get("signatures") or [],
        key=lambda s: by_id[s].severity != "fatal" if s in by_id else True,
    ):
        if sid in by_id:
            sig = by_id[sid]
            found.append(
                Tracker(sig.tracker, f"signature `{sid}` ({sig.severity}): see {sig.link}")
            )
    for v in cell.get("verdicts") or []:
        if v.get("check") in _SELECTION_CHECKS and v.get("status") == "fail":
            found.append(
                Tracker(
                    "vllm",
                    f"{v['check']}: {v['message']}: vLLM's kernel "
                    "selection (oracle / --moe-backend / --linear-backend)",
                )
            )
    for m in fp.get("mismatches") or []:
        got = str(m.get("got", ""))
        # A FlashInfer kernel picked instead of the one asked is still vLLM's oracle choosing.
        found.append(
            Tracker(
                "vllm",
                f"{m['what']} asked {m['asked']}, got {got}: vLLM's "
                "kernel selection (oracle / --moe-backend / --linear-backend)",
            )
        )
    for v in cell.get("verdicts") or []:
        if v.get("check", "").startswith("autotuner:") and v.get("status") == "fail":
            found.append(
                Tracker(
                    "flashinfer", f"{v['message']} (FlashInfer cubins or JIT archs for this GPU)"
                )
            )
    if not found and cell.get("status") == "build-failed":
        found.append(Tracker("vllm", "the image build failed (vLLM's CMake / kernels)"))
    if not found:
        found.append(Tracker("vllm", "no signature names another project"))
    seen: set[tuple[str, str]] = set()
    return [t for t in found if (t.key, t.why) not in seen and not seen.add((t.key, t.why))]


def _kv(rows: list[tuple[str, object]]) -> list[str]:
    out = ["| | |", "|---|---|"]
    for k, v in rows:
        text = "-" if v in (None, "", [], {}) else str(v)
        out.append(f"| {k} | {text.replace('|', '/')} |")
    return out


def _labels(cell: dict, build: dict) -> dict[str, str]:
    image = cell.get("image") or build.get("image") or {}
    labels = dict(build.get("labels") or {})
    labels.update(image.get("labels") or {})
    return {str(k): str(v) for k, v in labels.items()}


def _vllm_version(cell: dict, labels: dict[str, str]) -> str | None:
    """Probe first (what the image holds), then the build labels, then the log banner."""
    probe = (cell.get("image_fingerprint") or {}).get("vllm") or {}
    version, commit = probe.get("version"), probe.get("git_sha")
    for k, v in labels.items():
        low = k.lower()
        if "vllm" in low and low.endswith("version"):
            version = version or v
        if "vllm" in low and low.endswith(("commit", "sha")):
            commit = commit or v
    version = version or (cell.get("fingerprint") or {}).get("vllm_version")
    if version and commit:
        return f"{version} (commit {commit})"
    return version


def _environment(run: dict, cell: dict, build: dict) -> list[str]:
    host = run.get("host") or {}
    gpus = host.get("gpus") or []
    gpu_text = (
        "; ".join(f"{g.get('name')} (cc {g.get('cc')}, {g.get('memory_gib')} GiB)" for g in gpus)
        or f"none recorded (matrix hardware: {(run.get('matrix') or {}).get('hardware_name')})"
    )
    lines = ["## Environment", "", "### Host", ""]
    lines += _kv(
        [
            ("GPU", gpu_text),
            (
                "compute capability",
                gpus[0].get("cc")
                if gpus
                else ((run.get("matrix") or {}).get("hardware") or {}).get("cc"),
            ),
            ("driver", host.get("driver")),
            ("CUDA driver", host.get("cuda_driver")),
            ("kernel", host.get("kernel")),
            ("arch", host.get("arch")),
            ("OS", host.get("os")),
            ("memory", f"{host.get('mem_total_gib')} GiB" if host.get("mem_total_gib") else None),
            ("Docker", host.get("docker")),
            ("NVIDIA Container Toolkit", host.get("nvidia_container_toolkit")),
        ]
    )
    probe = cell.get("image_fingerprint") or {}
    torch = probe.get("torch") or {}
    dists = probe.get("distributions") or {}
    image = cell.get("image") or build.get("image") or {}
    labels = _labels(cell, build)
    fi_labels = {k: v for k, v in labels.items() if "flashinfer" in k.lower()}
    lines += ["", "### Image", ""]
    lines += _kv(
        [
            ("image", f"{image.get('ref')} ({image.get('id')})" if image else None),
            ("vLLM", _vllm_version(cell, labels)),
            (
                "torch",
                f"{torch.get('version')} (CUDA {torch.get('cuda')})"
                if torch.get("version")
                else None,
            ),
            ("torch arch list", ", ".join(torch.get("arch_list") or []) or None),
            ("CUDA runtime", (probe.get("cuda_runtime") or {}).get("version")),
            (
                "FlashInfer",
                ", ".join(f"{k} {v}" for k, v in dists.items() if k.startswith("flashinfer") and v)
                or None,
            ),
            (
                "FlashInfer pins (labels)",
                ", ".join(f"{k}={v}" for k, v in sorted(fi_labels.items())) or None,
            ),
            ("Triton", dists.get("triton")),
            ("Python", probe.get("python")),
        ]
    )
    patches = {k: v for k, v in labels.items() if "patch" in k.lower() or "pr." in k.lower()}
    lines += ["", "### Patches (from the image labels, with sha256)", ""]
    lines += [f"- `{k}`: `{v}`" for k, v in sorted(patches.items())] or ["- none recorded"]
    audit = cell.get("audit") or build.get("audit") or {}
    lines += ["", "### Archs actually compiled (harness audit of the image)", ""]
    lines += [f"- `{k}`: {v}" for k, v in sorted(audit.items())] or [
        "- no audit recorded (run `harness audit` on the image)"
    ]
    return lines


def _serve(cell: dict) -> list[str]:
    serve = cell.get("serve") or {}
    cmd = redact_args([str(a) for a in serve.get("command") or []])
    env = redact_env({str(k): str(v) for k, v in (serve.get("env") or {}).items()})
    lines = ["## Serve command and environment", "", "```sh"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines.append(shlex.join(cmd) if cmd else "# no command recorded")
    lines += ["```", ""]
    lines.append(
        f"Start-up: state `{serve.get('state')}`, exit code {serve.get('exit_code')}, "
        f"{serve.get('startup_s')} s."
    )
    return lines


def _expected_actual(cell: dict) -> list[str]:
    req = cell.get("requested") or {}
    fp = cell.get("fingerprint") or {}
    rows = [
        ("MoE backend", req.get("moe_backend"), fp.get("moe_backend")),
        ("linear backend", req.get("linear_backend"), ", ".join(fp.get("linear_kernels") or [])),
        ("attention backend", req.get("attention_backend"), fp.get("attention_backend")),
        ("CUDA-graph mode", req.get("cudagraph_mode"), fp.get("cudagraph_mode")),
    ]
    lines = ["## Expected vs actual", "", "| | asked | the log shows |", "|---|---|---|"]
    lines += [f"| {k} | {a or 'auto'} | {g or '-'} |" for k, a, g in rows]
    lines += ["", f"Cell status: **{cell.get('status')}**.", ""]
    bad = [v for v in cell.get("verdicts") or [] if v.get("status") != "pass"]
    if bad:
        lines += ["| check | verdict | message |", "|---|---|---|"]
        lines += [
            f"| {v['check']} | {v['status']} | {str(v['message']).replace('|', '/')} |" for v in bad
        ]
    shown = {v["check"] for v in bad}
    lines += [
        f"- {r}" for r in cell.get("reasons") or [] if not any(r.startswith(c + ":") for c in shown)
    ]
    return lines


def _log_tail(store: RunStore, cell: dict) -> list[str]:
    tail = (cell.get("serve") or {}).get("log_tail") or []
    if tail:
        return [str(x) for x in tail[-LOG_TAIL_LINES:]]
    path = store.log_path(cell["id"])
    if path.is_file():
        return path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    return []


def _evidence(store: RunStore, cell: dict) -> list[str]:
    fp = cell.get("fingerprint") or {}
    lines = [
        "## Evidence from the server log",
        "",
        f"Quoted lines only; the full log is `{(cell.get('serve') or {}).get('log') or ''}` "
        "in the run directory (attach it if asked).",
        "",
        "```",
    ]
    seen: set[str] = set()
    for key, line in (fp.get("evidence") or {}).items():
        if line not in seen:
            lines.append(f"[{key}] {line}")
            seen.add(line)
    for v in cell.get("verdicts") or []:
        if v.get("status") == "fail":
            for line in v.get("lines") or []:
                if line and line not in seen:
                    lines.append(f"[{v['check']}] {line}")
                    seen.add(line)
    if len(lines) == 5:
        lines.append("(the fingerprint found no evidence lines)")
    lines.append("```")
    if cell.get("status") in _CRASH_VERB or _fatal(fp):
        tail = _log_tail(store, cell)
        if tail:
            lines += ["", f"Last {len(tail)} log lines:", "", "```", *tail, "```"]
    return lines


def bug_report(store: RunStore, cell_id: str) -> str:
    cell = store.read_cell(cell_id)
    if cell is None:
        known = ", ".join(sorted(store.finished_ids())) or "none"
        raise ConfigError(
            f"{store.dir}: no finished cell {cell_id!r}",
            hint=f"give one of the finished cells: {known}",
        )
    run = store.run
    build = store.builds().get(cell.get("stack") or "", {})
    matrix = (run.get("matrix") or {}).get("path") or "<matrix.toml>"
    chip = _chip(run)
    driver = (run.get("host") or {}).get("driver")
    labels = _labels(cell, build)
    version = _vllm_version(cell, labels)
    version = version.split(" (")[0] if version else None
    title = f"[{chip}] {symptom(cell)}"
    if version:
        title += f" (vLLM {version}"
        title += f", driver {driver})" if driver else ")"
    elif driver:
        title += f" (driver {driver})"
    found = trackers(cell)
    best = TRACKERS.get(found[0].key, (found[0].key, ""))
    quoted_id = shlex.quote(cell_id) if "'" in cell_id else f"'{cell_id}'"

    lines = [f"# {title}", ""]
    lines += [f"Likely tracker: **{best[0]}** — file at {best[1]}", ""]
    lines += [f"- {TRACKERS.get(t.key, (t.key,))[0]}: {t.why}" for t in found]
    lines += [""]
    lines += _environment(run, cell, build) + [""]
    lines += [
        "## Rebuild the exact image",
        "",
        "```sh",
        f"harness build -m {shlex.quote(matrix)} -k {quoted_id}",
        "```",
        "",
    ]
    if labels:
        lines += ["Image labels (what the build recorded):", "", "```"]
        lines += [f"{k}={v}" for k, v in sorted(labels.items())]
        lines += ["```", ""]
    lines += _serve(cell) + [""]
    lines += _expected_actual(cell) + [""]
    lines += _evidence(store, cell) + [""]
    lines += [
        "## Reproduce",
        "",
        "With this tool (builds or reuses the image, serves the cell, "
        "fingerprints the log, benchmarks it):",
        "",
        "```sh",
        f"harness run -m {shlex.quote(matrix)} -k {quoted_id}",
        "```",
        "",
        f"Run `{run.get('run_id')}`, cell `{cell_id}`, started {cell.get('started_at')}.",
        "",
    ]
    # Every piece above was masked already; this pass catches what a new field might carry.
    return redact_text("\n".join(lines))


def write_report(store: RunStore, cell_id: str, out: Path | None) -> str:
    from harness.results.store import atomic_write_text

    text = bug_report(store, cell_id)
    if out is not None:
        atomic_write_text(out, text)
    return text
