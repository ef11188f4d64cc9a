"""`harness sources`: what the selected stacks' builds fetch, pinned, into the cache.

    harness sources list  -m MATRIX [-k K]
    harness sources fetch -m MATRIX [-k K] [--mirror URL=PATH ...] [--from DIR] [--out DIR]

`fetch` puts in the cache (~/.cache/vllm-bw-harness) the vLLM and FlashInfer sdists (sha256
checked) and every source vLLM's CMake would clone (content sha256 checked), minus what a
stack's patches leave out. `--out DIR` also copies them there, for a host with no network;
there, `--from DIR` takes them in (checked again). `--mirror` reads a git URL from a local clone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.errors import ConfigError


def register(sub) -> None:
    from harness.cli.plan import add_matrix_args

    p = sub.add_parser("sources", help="fetch the pinned sources a source build needs (offline builds)")
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    ls = verbs.add_parser("list", help="what each selected stack's build fetches, and what is cached")
    add_matrix_args(ls)
    ls.set_defaults(func=run_list)
    f = verbs.add_parser("fetch", help="fetch into the cache (and --out DIR)")
    add_matrix_args(f)
    f.add_argument("--mirror", action="append", default=[], metavar="URL=PATH",
                   help="read this git URL from a local clone instead of the network")
    f.add_argument("--from", dest="from_dir", type=Path, help="take archives and sdists from DIR (no network)")
    f.add_argument("--out", type=Path, help="also copy everything to DIR, for an air-gapped host")
    f.set_defaults(func=run_fetch)


def _needs(matrix, k):
    """(stack name, sdist Sources, source Table or None, names left out) per selected source stack."""
    from harness.build import offline, sources
    from harness.build.offline_stack import left_out
    from harness.build.render import patch_files
    from harness.matrix.plan import expand, group_by_stack

    out = []
    for name in group_by_stack(expand(matrix, k)):
        stack = matrix.spec.stacks[name]
        if stack.runner != "docker" or stack.image is not None or stack.wheels is not None or stack.vllm is None:
            continue
        srcs = [sources.vllm_source(stack)] + ([sources.flashinfer_source(stack)] if stack.flashinfer else [])
        table = offline.load_table(stack.vllm.pypi) if stack.vllm.pypi else None
        cut = left_out([p.data for p in patch_files(matrix, stack) if p.series == "vllm"])
        out.append((name, srcs, table, cut))
    return out


def run_list(args) -> int:
    from harness.build import offline
    from harness.console import out
    from harness.matrix.load import load_matrix

    matrix = load_matrix(Path(args.matrix))
    for name, srcs, table, cut in _needs(matrix, args.k):
        out.print(f"[bold]{name}[/bold]", markup=True)
        for s in srcs:
            out.print(f"  sdist  {s.name} {s.pin}  sha256 {s.sha256 or '(not pinned)'}", markup=False)
        if table is None:
            out.print("  (no table of what this vLLM's CMake fetches: an offline build is refused)", markup=False)
            continue
        for p in table.pins:
            state = "left out" if p.name in cut else (
                "cached" if (offline.OFFLINE / p.archive_name).is_file() else "NOT cached")
            out.print(f"  {p.name:16} {p.commit[:12]}  {p.env:24} {state}", markup=False)
        for u_name, u_url, u_env in table.unpinned:
            state = "left out" if u_name in cut else "NOT pinned: an offline build is refused"
            out.print(f"  {u_name:16} {'-':12}  {u_env:24} {state}  ({u_url})", markup=False)
    return 0


def run_fetch(args) -> int:
    from harness.build import offline, sources
    from harness.console import out
    from harness.matrix.load import load_matrix

    repos = {}
    for item in args.mirror:
        url, sep, path = item.partition("=")
        if not sep or not Path(path).is_dir():
            raise ConfigError(f"--mirror {item!r}: expected URL=PATH with PATH a local git folder",
                              hint="e.g. --mirror https://github.com/NVIDIA/cutlass.git=/src/cutlass")
        repos[url] = path
    matrix = load_matrix(Path(args.matrix))
    got: dict[str, Path] = {}
    for name, srcs, table, cut in _needs(matrix, args.k):
        for s in srcs:
            if s.kind != "pypi":
                continue
            want = sources.sdist_filename(s.name, s.pin)
            if args.from_dir is not None and (args.from_dir / want).is_file():
                sources.SDIST_CACHE.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(args.from_dir / want, sources.SDIST_CACHE / want)
            got[want] = sources.sdist(s)  # sha256 checked against the pin
        if table is None:
            continue
        for pin in table.pins:
            if pin.name not in cut:
                got[pin.archive_name] = offline.fetch(pin, repos=repos, from_dir=args.from_dir)
        for u_name, _url, _env in table.unpinned:
            if u_name not in cut:
                out.print(f"{name}: vLLM's CMake also fetches {u_name}, which is not pinned: an offline build "
                          "of this stack is refused", markup=False)
    for fname, path in sorted(got.items()):
        out.print(f"{path}  {path.stat().st_size / 1e6:.1f} MB", markup=False)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, args.out / fname)
    if args.out is not None:
        out.print(f"copied {len(got)} file(s) to {args.out}: on the other host, "
                  f"`harness sources fetch -m {args.matrix} --from DIR`", markup=False)
    return 0
