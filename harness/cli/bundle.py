"""`harness bundle make|install`: a wheelhouse for a host with no package index (harness/bundle.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness import platforms
from harness.bundle import install_site, make, unpack
from harness.console import out


def register(sub) -> None:
    p = sub.add_parser("bundle", help="make / install a wheelhouse bundle for a host with no package index")
    s = p.add_subparsers(dest="bundle_cmd", metavar="ACTION")
    s.required = True
    m = s.add_parser("make", help="download, strip, lock and split a wheelhouse (parts with sha256)")
    m.add_argument("spec", help="bundle spec (TOML), e.g. bundles/vllm-0.25.1-h200.toml")
    m.add_argument("--out", required=True, help="folder for part_NN and bundle.json")
    m.add_argument("--downloaded", default=None, help="use wheels already downloaded here (no pip download)")
    m.add_argument("--wheelhouse", default=None, help="also keep the unpacked wheelhouse here")
    m.add_argument("--platform", default=None, help="CPU platform of the wheels (linux/amd64, linux/arm64); "
                   "default: the spec's `platform`, else this host's")
    m.set_defaults(func=_run_make)
    i = s.add_parser("install", help="check the parts, unpack the wheelhouse, optionally install it")
    i.add_argument("bundle_dir", help="folder holding bundle.json and every part_NN")
    i.add_argument("--dest", required=True, help="wheelhouse folder to unpack into (checked against wheels.lock)")
    i.add_argument("--site", default=None, help="also install the wheels into this folder (PYTHONPATH)")
    i.add_argument("--python", default=sys.executable, help="Python whose pip installs into --site")
    i.add_argument("--platform", default=None, help="CPU platform the wheelhouse is for (an image build's); "
                   "default: this host's. --site installs only for the CPU of --python")
    i.set_defaults(func=_run_install)


def _run_make(args) -> int:
    manifest = make(Path(args.spec), Path(args.out),
                    downloaded=Path(args.downloaded) if args.downloaded else None,
                    keep_wheelhouse=Path(args.wheelhouse) if args.wheelhouse else None,
                    platform=platforms.parse(args.platform) if args.platform else None)
    repacked = [w for w in manifest.lock.wheels if w.repacked]
    out.print(f"bundle {manifest.bundle}: {len(manifest.lock.wheels)} wheels for {manifest.platform}, "
              f"{manifest.archive_bytes / 1e6:.1f} MB in {len(manifest.parts)} part(s), "
              f"archive sha256 {manifest.archive_sha256}", markup=False)
    for w in repacked:
        out.print(f"  re-packed {w.file}: sha256 {w.sha256} (upstream {w.upstream_sha256}), "
                  f"{len(w.stripped)} files removed: {w.strip_reason}", markup=False)
    return 0


def _run_install(args) -> int:
    target = platforms.parse(args.platform) if args.platform else platforms.host()
    manifest = unpack(Path(args.bundle_dir), Path(args.dest), target)
    out.print(f"bundle {manifest.bundle}: {len(manifest.parts)} part(s) checked, "
              f"{len(manifest.lock.wheels)} wheels for {target.docker} in {args.dest}", markup=False)
    if args.site:
        done = install_site(Path(args.dest), Path(args.site), args.python)
        out.print(f"installed {len(done)} wheels into {args.site} (PYTHONPATH={os.path.abspath(args.site)})", markup=False)
    return 0
