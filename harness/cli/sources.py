"""`harness sources`: what the selected stacks' builds fetch, pinned, into the cache.

    harness sources list  -m MATRIX [-k K]
    harness sources fetch -m MATRIX [-k K] [--mirror URL=PATH ...] [--from DIR] [--out DIR]

`fetch` puts in the cache (~/.cache/vllm-bw-harness) the vLLM and FlashInfer sdists (sha256
checked) and every source vLLM's CMake would clone (content sha256 checked), minus what a
stack's patches leave out. `--out DIR` also copies them there, for a host with no network;
there, `--from DIR` takes them in (checked again). `--mirror` reads a git URL from a local clone
or mirror (e.g. `--mirror https://github.com/NVIDIA/cutlass.git=/srv/git/cutlass.git`). What is
already in the cache is checked again, not fetched. `harness lock` does the same for every
`offline = true` stack of the matrix.
"""

from __future__ import annotations

from pathlib import Path


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


def run_list(args) -> int:
    from harness.console import out, plain
    from harness.image import offline
    from harness.image.prefetch import needs
    from harness.matrix.load import load_matrix

    matrix = load_matrix(Path(args.matrix))
    for n in needs(matrix, args.k):
        name, srcs, table, cut = n.stack, n.sdists, n.table, n.cut
        out.print(f"[bold]{plain(name)}[/bold]", markup=True)
        for s in srcs:
            out.print(f"  sdist  {s.name} {s.pin}  sha256 {s.sha256 or '(not pinned)'}", markup=False)
        if table is None:
            out.print("  (no table of what this vLLM's CMake fetches: an offline build is refused)", markup=False)
            continue
        for p in table.pins:
            state = "left out" if p.name in cut else (
                "cached" if (offline.OFFLINE / p.archive_name).is_file() else "NOT cached")
            out.print(f"  {p.name:16} {p.commit[:12]}  {p.env:24} {state}", markup=False)
        stand = {p.name: p for p in (n.plan.stand_ins if n.plan else ())}
        for u_name, u_url, u_env in table.unpinned:
            if u_name in stand:
                p = stand[u_name]
                state = "cached" if (offline.OFFLINE / p.archive_name).is_file() else "NOT cached"
                out.print(f"  {u_name:16} {p.commit[:12]}  {u_env:24} {state}: stand-in for {p.stands_in_for} "
                          "(a patch asks for it)", markup=False)
                continue
            state = "left out" if u_name in cut else "NOT pinned: an offline build is refused"
            out.print(f"  {u_name:16} {'-':12}  {u_env:24} {state}  ({u_url})", markup=False)
    return 0


def run_fetch(args) -> int:
    from harness.console import err, out
    from harness.image.prefetch import fetch_all, needs, parse_mirrors
    from harness.lock import locked_matrix
    from harness.matrix.load import load_matrix
    from harness.safety.roots import Root

    repos = parse_mirrors(args.mirror)
    matrix = locked_matrix(load_matrix(Path(args.matrix)))  # the lock's sdist sha256s, where there is one
    wanted = needs(matrix, args.k)
    for n in wanted:
        for u_name in n.unpinned:
            out.print(f"{n.stack}: vLLM's CMake also fetches {u_name}, which is not pinned: an offline build "
                      "of this stack is refused", markup=False)
    got = fetch_all(wanted, matrix_path=args.matrix, repos=repos, from_dir=args.from_dir,
                    say=lambda s: err.print(s, markup=False))
    for g in sorted(got, key=lambda g: g.file):
        out.print(f"{g.path}  {g.path.stat().st_size / 1e6:.1f} MB  ({g.how})", markup=False)
        if args.out is not None:  # a root: a file there that is a link is refused, never written through
            Root(args.out, what="--out", create=True).copy_in(Root(g.path.parent, what="source cache"), g.path.name,
                                                               to=g.file)
    if args.out is not None:
        out.print(f"copied {len(got)} file(s) to {args.out}: on the other host, "
                  f"`harness sources fetch -m {args.matrix} --from DIR`", markup=False)
    return 0
