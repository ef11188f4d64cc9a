"""How `make test` spreads the suite over pytest-xdist workers (`-n 4 --dist loadgroup`).

A module's tests stay on one worker, so its module fixtures (an image, a second dockerd) are made
once (SPREAD names the few modules whose tests go to any worker: long CPU-bound shards). These modules also share one worker, one test at a time:
  "engine": Docker tests that look at the whole engine (every audit container, every busybox
    container, every image) and would see another worker's;
  "pypi-cache": tests that use the pinned sdists (the `pinned_sources` fixture): the first
    downloads and unpacks them, under a lock the others would otherwise wait on.
test_arm64_docker has a worker of its own: it runs its arm64 container emulated (qemu), which
keeps a core busy for a while and shares nothing with the other modules.
The longest units are handed out first, so that none starts last.

The groups are named here, by module, rather than with xdist_group marks: pytest-xdist 3.8 puts
a mark's group into the test id, which pytest 9's ids no longer take. Every worker checks that
each module holding a `docker` or `network` test is listed, so a new one cannot slip past.
"""

from __future__ import annotations

from pathlib import Path

GROUPS = {
    **dict.fromkeys(("test_audit_image", "test_build_docker", "test_doctor_env", "test_engine_docker",
                     "test_gpu_attach_docker", "test_lock_registry", "test_pipeline_docker",
                     "test_probe_bare_image_docker", "test_wheel_stack_docker"), "engine"),
    **dict.fromkeys(("test_build_requirements", "test_offline_sources", "test_patches_addpr",
                     "test_packaging_probe_docker", "test_patches_preflight",
                     "test_source_probe_docker", "test_h200_cache_example", "test_upstream_reports",
                     "test_configure_targets_docker", "test_bisect_configure"), "pypi-cache"),
    # alone: each starts its own dockerd (the engines of one module, not of the others)
    "test_multinode_docker": "test_multinode_docker",
    "test_hosts_docker": "test_hosts_docker",
    # its own images (by label) and its own store and port: beside any other module
    "test_compile_cache_docker": "test_compile_cache_docker",
    # its own labelled busybox containers only
    "test_serve_drain": "test_serve_drain",
    "test_arm64_docker": "test_arm64_docker",
    # their own images (the CUDA 13 devel base, the toolchain's FlashInfer AOT image) and their
    # own temporary folders; the sdists through pinned_sources' lock. Long: handed out early.
    "test_configure_0330_docker": "test_configure_0330_docker",
    "test_flashinfer_aot_docker": "test_flashinfer_aot_docker",
    # one network test (the default release's trees, through pinned_sources' lock)
    "test_stackbuild": "test_stackbuild",
}
FIRST = ("pypi-cache", "test_flashinfer_aot_docker", "test_configure_0330_docker", "test_multinode_docker", "engine",
         "test_arm64_docker", "test_hosts_docker")
# Modules whose tests are spread over the workers, each test a unit of its own: CPU-bound shards
# of one long check, with no module fixture worth keeping on one worker. Started first too.
SPREAD = ("test_fingerprint_upstream_cpp",)


def group(nodeid: str) -> str:
    stem = Path(nodeid.split("::")[0]).stem
    if stem in SPREAD:
        return nodeid
    return GROUPS.get(stem, stem)


def unlisted(items) -> list[str]:
    """Modules with a Docker or network test that GROUPS does not name."""
    return sorted({str(item.path.name) for item in items
                   if item.path.stem not in GROUPS
                   and (item.get_closest_marker("docker") or item.get_closest_marker("network"))})


def order(items: list) -> None:
    """The long units first, the rest as collected: the same order on every worker."""
    first = (*FIRST, *SPREAD)
    rank = {id(item): (first.index(g) if (g := group(item.nodeid)) in first
                       else first.index(item.path.stem) if item.path.stem in SPREAD else len(first), i)
            for i, item in enumerate(items)}
    items.sort(key=lambda item: rank[id(item)])


def scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group(nodeid)

    return GroupScheduling(config, log)
