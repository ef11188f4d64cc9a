"""Every `harness.*` label key the tool puts on images and containers, written here once.

Labels say who made a container or an image (run id, role, controller: what the reaper finds
leftovers by), what an image was built from (pins, arch lists, patches, its content hash: what
`harness bug` and a reused image's record read back), and where a server ran. A key is a name
here; no module spells `"harness.` itself.
"""

from __future__ import annotations

from enum import StrEnum

PREFIX = "harness"

# --- who made it -------------------------------------------------------------------------------
RUN_ID = f"{PREFIX}.run-id"
ROLE = f"{PREFIX}.role"
CELL = f"{PREFIX}.cell"
CONTROLLER_HOST = f"{PREFIX}.controller.host"
CONTROLLER_PID = f"{PREFIX}.controller.pid"
CONTROLLER_STARTED = f"{PREFIX}.controller.started"
RAY_NODE = f"{PREFIX}.ray.node"
PROBE = f"{PREFIX}.probe"


class Role(StrEnum):
    """What a container or an image is for (the value of ROLE)."""

    IMAGE = "image"  # a stack's image
    SERVE = "serve"  # a cell's server
    AUDIT = "audit"  # a container created (never started) to copy an image's files out
    AUDIT_EXPORT = "audit-export"  # the same, for `harness audit IMAGE`
    PROBE = "probe"  # a probe image (harness build --probe)
    RAY_HEAD = "ray-head"
    RAY_WORKER = "ray-worker"


def role(r: Role) -> dict[str, str]:
    """The labels of a helper container: its role alone."""
    return {ROLE: r.value}


# --- what an image was built from --------------------------------------------------------------
STACK = f"{PREFIX}.stack"
STACK_KIND = f"{PREFIX}.stack-kind"
CONTENT_HASH = f"{PREFIX}.content-hash"
PLATFORM = f"{PREFIX}.platform"
BASE_IMAGE = f"{PREFIX}.base-image"
BASE_IMAGE_ID = f"{PREFIX}.base-image-id"
CUDA = f"{PREFIX}.cuda"
PYTHON = f"{PREFIX}.python"
TORCH = f"{PREFIX}.torch"
TORCH_CUDA_ARCH_LIST = f"{PREFIX}.torch-cuda-arch-list"
FLASHINFER_CUDA_ARCH_LIST = f"{PREFIX}.flashinfer-cuda-arch-list"
MAX_JOBS = f"{PREFIX}.max-jobs"
NVCC_THREADS = f"{PREFIX}.nvcc-threads"
VLLM_SOURCE = f"{PREFIX}.vllm.source"
VLLM_PATCHES = f"{PREFIX}.vllm.patches"
FLASHINFER_SOURCE = f"{PREFIX}.flashinfer.source"
FLASHINFER_VERSION = f"{PREFIX}.flashinfer.version"
FLASHINFER_COMMIT = f"{PREFIX}.flashinfer.commit"
FLASHINFER_PRS = f"{PREFIX}.flashinfer.prs"
FLASHINFER_AOT = f"{PREFIX}.flashinfer.aot"
OFFLINE = f"{PREFIX}.offline"
VLLM_OFFLINE_SOURCES = f"{PREFIX}.vllm.offline-sources"
VLLM_LEFT_OUT = f"{PREFIX}.vllm.left-out"
VLLM_STAND_INS = f"{PREFIX}.vllm.stand-ins"
VLLM_DEPS_WHEELHOUSE = f"{PREFIX}.vllm.deps-wheelhouse"
# a `local` stack records where its vLLM lives (it has no image)
LOCAL_VLLM_DIR = f"{PREFIX}.local.vllm_dir"
LOCAL = f"{PREFIX}.local."


def patch_sha256(series: str, name: str) -> str:
    """The key holding one patch file's sha256 (`series`: vllm or flashinfer)."""
    return f"{PREFIX}.{series}.patch.{name}.sha256"


def is_ours(key: str) -> bool:
    return key.startswith(f"{PREFIX}.")
