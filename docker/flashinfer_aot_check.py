"""FlashInfer's AOT modules where FlashInfer looks for them, proven with FlashInfer's own code.

    flashinfer_aot_check.py place DIR            # DIR: what `python -m flashinfer.aot --out-dir DIR` wrote
    flashinfer_aot_check.py check [--only NAME ...]

Run in the image after FlashInfer is installed and its AOT step has run, from a folder that is not
FlashInfer's source tree (the installed package must be the one imported), with the
FLASHINFER_CUDA_ARCH_LIST the AOT step had. Exit 0 on success; 1 with one line per problem.

Why: `flashinfer.aot --out-dir DIR` copies each module to DIR/<name>/<name>.so (aot.py
copy_built_kernels), but at run time FlashInfer 0.7.2 looks for AOT modules only in its
package's data/aot/<name>/<name>.so and in flashinfer-jit-cache providers (jit/env.py
get_aot_artifacts); anything else is JIT-compiled again on first use, in every new container.

`place` moves DIR's modules to FlashInfer's AOT folder, which it asks FlashInfer for
(flashinfer.jit.env.FLASHINFER_AOT_DIR); a file of DIR in any other shape is an error.

`check` recomputes the list the AOT step compiles (flashinfer.aot.gen_all_modules with its
default configuration and detect_sm_capabilities, as `python -m flashinfer.aot` does; `--only`
narrows it) and proves, for each module, through FlashInfer's resolution code:
  1. jit/env.py get_aot_artifacts(name) gives exactly one artifact, the package's
     data/aot/<name>/<name>.so, a regular ELF shared object;
  2. the module's JitSpec says it is AOT (is_aot) and would load that file (get_library_path);
  3. with FLASHINFER_DISABLE_JIT=1, JitSpec.build_and_load() returns the loaded module: the path
     a served process takes (jit/core.py try_load); a module it could not load would be built
     instead, and here raises MissingJITCacheError. TVM FFI loads any shared object, so the file
     must also export TVM FFI functions (`__tvm_ffi_<name>` in its dynamic symbols), each one
     found through TVM FFI. The loads run in a child process whose library path has the CUDA
     toolkit's libcuda stub (no driver at build time): the modules link -lcuda
     (jit/cpp_ext.py), which the driver provides at run time;
and that the AOT folder holds nothing FlashInfer would never look up (a stray or misplaced file).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
ET_DYN = 3


def fail(lines: list[str]) -> int:
    print(f"flashinfer_aot_check: FAILED, {len(lines)} problem(s):", file=sys.stderr)
    for line in lines:
        print(f"  - {line}", file=sys.stderr)
    return 1


def _installed_flashinfer():
    """The installed package, never a source tree that happens to be the current folder."""
    import flashinfer

    here = Path(flashinfer.__file__).resolve().parent
    roots = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    if not any(root in here.parents for root in roots):
        raise SystemExit(f"flashinfer_aot_check: flashinfer was imported from {here}, not from the installed "
                         f"package ({', '.join(sorted(map(str, roots)))}): run it from another folder")
    return flashinfer


def aot_dir() -> Path:
    _installed_flashinfer()
    from flashinfer.jit import env as jit_env

    return Path(jit_env.FLASHINFER_AOT_DIR)


def place(src: Path) -> int:
    if not src.is_dir():
        return fail([f"{src}: no such folder (the AOT step's --out-dir)"])
    dest = aot_dir()
    if dest.exists() and any(dest.iterdir()):
        return fail([f"{dest} already holds files: refusing to mix two AOT builds"])
    modules, odd = [], []
    for entry in sorted(src.iterdir()):
        so = entry / f"{entry.name}.so"
        rest = sorted(p.name for p in entry.iterdir()) if entry.is_dir() and not entry.is_symlink() else None
        if rest == [so.name] and so.is_file() and not so.is_symlink():
            modules.append(entry.name)
        else:
            odd.append(f"{entry}: not <name>/<name>.so (FlashInfer would never load it)")
    if odd or not modules:
        return fail(odd or [f"{src}: no module in it"])
    dest.mkdir(parents=True, exist_ok=True)
    for name in modules:
        (dest / name).mkdir()
        shutil.move(str(src / name / f"{name}.so"), str(dest / name / f"{name}.so"))
        (src / name).rmdir()
    src.rmdir()
    print(f"flashinfer_aot_check: placed {len(modules)} modules in {dest}")
    return 0


def _aot_specs(only: list[str] | None):
    """The JitSpecs `python -m flashinfer.aot` compiles with its default configuration."""
    import flashinfer.aot as aot

    if "FLASHINFER_CUDA_ARCH_LIST" not in os.environ:
        raise SystemExit("flashinfer_aot_check: set FLASHINFER_CUDA_ARCH_LIST as the AOT step had it")
    config = aot.get_default_config()
    specs = aot.gen_all_modules(
        config["f16_dtype"], config["f8_dtype"], config["fa2_head_dim"], config["fa3_head_dim"],
        config["use_sliding_window"], config["use_logits_soft_cap"], aot.detect_sm_capabilities(),
        config["add_comm"], config["add_gemma"], config["add_oai_oss"], config["add_moe"],
        config["add_act"], config["add_misc"], config["add_xqa"])
    if only is None:
        return specs
    by_name = {s.name: s for s in specs}
    unknown = [n for n in only if n not in by_name]
    if unknown:
        raise SystemExit(f"flashinfer_aot_check: --only names modules the AOT step does not compile: "
                         f"{', '.join(unknown)}")
    return [by_name[n] for n in only]


def _is_shared_object(path: Path) -> bool:
    with path.open("rb") as f:
        head = f.read(18)
    return head[:4] == ELF_MAGIC and int.from_bytes(head[16:18], "little") == ET_DYN


def tvm_ffi_exports(path: Path) -> list[str]:
    """The functions a module exports to TVM FFI: its defined dynamic symbols `__tvm_ffi_<name>`
    (TVM_FFI_DLL_EXPORT_TYPED_FUNC; `__tvm_ffi__*` are the library's own). Read from the ELF64
    section headers, .dynsym and its string table only: a 100 MB module is not read whole."""
    def u(b: bytes) -> int:
        return int.from_bytes(b, "little")

    with path.open("rb") as f:
        head = f.read(64)
        if head[:4] != ELF_MAGIC or head[4] != 2 or head[5] != 1:  # ELF64, little-endian
            return []
        shoff, shentsize, shnum = u(head[0x28:0x30]), u(head[0x3A:0x3C]), u(head[0x3C:0x3E])
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [table[i * shentsize:(i + 1) * shentsize] for i in range(shnum)]
        names: list[str] = []
        for sh in sections:
            if u(sh[4:8]) != 11:  # SHT_DYNSYM
                continue
            strtab = sections[u(sh[40:44])]
            f.seek(u(strtab[24:32]))
            strings = f.read(u(strtab[32:40]))
            f.seek(u(sh[24:32]))
            syms = f.read(u(sh[32:40]))
            for i in range(0, len(syms) - 23, 24):
                sym = syms[i:i + 24]
                if u(sym[6:8]) == 0:  # undefined here
                    continue
                start = u(sym[0:4])
                name = strings[start:strings.index(b"\0", start)].decode("ascii", "replace")
                if name.startswith("__tvm_ffi_") and not name.startswith("__tvm_ffi__"):
                    names.append(name[len("__tvm_ffi_"):])
        return sorted(set(names))


def _resolution_problems(specs, root: Path) -> list[str]:
    from flashinfer.jit import env as jit_env

    problems = []
    for spec in specs:
        want = root / spec.name / f"{spec.name}.so"
        artifacts = jit_env.get_aot_artifacts(spec.name)
        paths = [Path(a.path) for a in artifacts]
        if paths != [want]:
            misplaced = sorted(str(p) for p in root.rglob(f"{spec.name}.so")) if root.is_dir() else []
            where = f"; a file of that name is at {', '.join(misplaced)}" if misplaced else ""
            problems.append(f"{spec.name}: FlashInfer resolves it to {[str(p) for p in paths] or 'nothing'}, "
                            f"not {want}: it would be JIT-compiled at first use{where}")
            continue
        if want.is_symlink() or not want.is_file() or not _is_shared_object(want):
            problems.append(f"{spec.name}: {want} is not a regular ELF shared object")
        elif not spec.is_aot or Path(spec.get_library_path()) != want:
            problems.append(f"{spec.name}: its JitSpec would load {spec.get_library_path()} (is_aot={spec.is_aot})")
    expected = {s.name for s in specs}
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            ok = (entry.name in expected and entry.is_dir()
                  and sorted(p.name for p in entry.iterdir()) == [f"{entry.name}.so"])
            if not ok:
                problems.append(f"{entry}: not a module of this AOT build in FlashInfer's layout "
                                "(<name>/<name>.so): FlashInfer never loads it")
    return problems


def _load_problems(names: list[str]) -> list[str]:
    """build_and_load() of each module with JIT disabled, in a child whose loader finds libcuda."""
    env = dict(os.environ, FLASHINFER_DISABLE_JIT="1")
    with tempfile.TemporaryDirectory(prefix="fi-aot-load-") as tmp:
        cuda = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
        stub = Path(cuda) / "lib64" / "stubs" / "libcuda.so"
        if stub.is_file():  # the modules need libcuda.so.1 (and some builds name libcuda.so)
            for soname in ("libcuda.so.1", "libcuda.so"):
                os.symlink(stub, Path(tmp) / soname)
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [tmp, env.get("LD_LIBRARY_PATH")]))
        proc = subprocess.run([sys.executable, __file__, "_load", *names], env=env, capture_output=True,
                              text=True, timeout=3600, cwd=tmp)
    lines = proc.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1])
    except (IndexError, ValueError):
        loading = [ln.removeprefix("loading ") for ln in lines if ln.startswith("loading ")]
        if loading and proc.returncode < 0:  # a signal: dlopen of a damaged file can raise SIGBUS
            return [f"{loading[-1]}: loading it killed the process (signal {-proc.returncode}): not a loadable "
                    "module (a served process would die the same way)"]
        return [f"the load step died (exit {proc.returncode}): {proc.stderr.strip()[-800:]}"]
    return [f"{name}: with JIT disabled, {why}" if why.startswith(("TVM FFI", "/")) else
            f"{name}: with JIT disabled, build_and_load() raised {why}: a served process would JIT-compile it"
            for name, why in report.items()]


def _load_child(names: list[str]) -> int:
    """In the child: each module through JitSpec.build_and_load(), FLASHINFER_DISABLE_JIT=1 set."""
    _installed_flashinfer()
    specs = {s.name: s for s in _aot_specs(names)}
    failed = {}
    import tvm_ffi

    for name in names:
        print(f"loading {name}", flush=True)
        try:
            if specs[name].build_and_load() is None:
                failed[name] = "None"
                continue
        except Exception as exc:  # MissingJITCacheError, or a load error it explains
            cause = exc.__context__ or exc.__cause__
            failed[name] = f"{type(exc).__name__}: {exc}"[:300] + (f" (after: {cause})"[:300] if cause else "")
            continue
        # Loading proves little alone (TVM FFI loads any shared object): the file must be a module,
        # every function it exports found through TVM FFI
        path = Path(specs[name].get_library_path())
        exports = tvm_ffi_exports(path)
        module = tvm_ffi.load_module(str(path))
        missing = [fn for fn in exports if not module.implements_function(fn)]
        if not exports or missing:
            failed[name] = (f"{path} exports no TVM FFI function" if not exports
                            else f"TVM FFI does not find {', '.join(missing)} in {path}")
    print(json.dumps(failed))
    return 0


def check(only: list[str] | None, load: bool) -> int:
    root = aot_dir()
    specs = _aot_specs(only)
    problems = _resolution_problems(specs, root)
    if not problems and load:
        problems = _load_problems([s.name for s in specs])
    if problems:
        return fail(problems)
    how = "load with JIT disabled" if load else "(not loaded: --no-load)"
    print(f"flashinfer_aot_check: {len(specs)} modules of the AOT step ({os.environ['FLASHINFER_CUDA_ARCH_LIST']}) "
          f"resolve to {root}/<name>/<name>.so and {how}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_load"]:
        return _load_child(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("place", help="move the AOT step's modules to FlashInfer's AOT folder")
    pl.add_argument("src", type=Path)
    ch = sub.add_parser("check", help="prove FlashInfer resolves and loads each AOT module from the image")
    ch.add_argument("--only", nargs="+", metavar="NAME", help="only these modules (a partial AOT build)")
    ch.add_argument("--no-load", dest="load", action="store_false", help="resolution only, no build_and_load()")
    a = p.parse_args(argv)
    # spec generation writes generated sources to FlashInfer's workspace: keep it out of the image
    with tempfile.TemporaryDirectory(prefix="fi-aot-check-") as ws:
        os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", ws)
        if a.cmd == "place":
            return place(a.src)
        return check(a.only, a.load)


if __name__ == "__main__":
    sys.exit(main())
