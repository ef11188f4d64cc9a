"""`harness cache`: the compile cache every source build shares (harness/image/compile_cache.py).

    harness cache show
    harness cache prune [--max-gib N] [--folder NAME]

`show` lists the store's folders, one per platform and toolchain (machine, then a digest of the
compiler programs), with their files, size and last use; files lying at the store's top level
are one more row. `prune` removes the least recently used files until the store (or one folder)
holds at most N GiB (default: the bound every build keeps, HARNESS_COMPILE_CACHE_MAX_GIB, 40
unless set); `--max-gib 0` empties it. Both act only on a folder the harness made (it holds
`.harness-compile-cache`), and prune removes through the folder held open, never by a path
looked up again.
"""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("cache", help="show or prune the compile cache that source builds share")
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    verbs.add_parser("show", help="the store's folders: objects, size, last use").set_defaults(func=run_show)
    pr = verbs.add_parser("prune", help="drop the least recently used objects down to a size")
    # a string, read by compile_cache.gib: float() would take nan, inf, 1e999 and non-ASCII digits
    pr.add_argument("--max-gib", default=None, metavar="N",
                    help="keep at most N GiB (default: HARNESS_COMPILE_CACHE_MAX_GIB, else 40); 0 empties it")
    pr.add_argument("--folder", default=None, metavar="NAME", help="only this folder (`harness cache show`)")
    pr.set_defaults(func=run_prune)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def run_show(args) -> int:
    from harness.console import out
    from harness.image import compile_cache as cc

    root = cc.cache_root()
    bound = cc.max_bytes()
    store = cc.open_store(root, create=False)
    if store is None:
        out.print(f"compile cache {root}: none yet (the first source build makes it)", markup=False)
        return 0
    with store:
        folders = cc.usage(store)
    total = sum(f.bytes for f in folders)
    out.print(f"compile cache {root}: {len(folders)} folder(s), {_gib(total)} of {_gib(bound)}", markup=False)
    for f in folders:
        tools = f.toolchain
        out.print(f"  {f.name}  {f.objects} objects  {_gib(f.bytes)}  last used {cc.age(f.last_used)}", markup=False)
        if f.name != cc.TOP:
            out.print(f"    {tools.ccache or '?'}; gcc {tools.program('gcc') or '?'}; "
                      f"{tools.program('nvcc') or 'no nvcc'}", markup=False)
    return 0


def run_prune(args) -> int:
    from harness.console import out
    from harness.image import compile_cache as cc

    limit = cc.max_bytes() if args.max_gib is None else cc.gib(args.max_gib, "--max-gib")
    store = cc.open_store(create=False)
    if store is None:
        out.print(f"compile cache {cc.cache_root()}: none yet, nothing to prune", markup=False)
        return 0
    with store:
        removed, freed = cc.prune(limit, store, only=args.folder)
    out.print(f"compile cache: removed {removed} object(s), {_gib(freed)}", markup=False)
    return 0
