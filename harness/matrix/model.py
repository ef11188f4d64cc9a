"""The matrix file, as pydantic models: the only place where its shape is defined.

Every model forbids unknown keys and describes each field, so a typo is an error that names the
key instead of a silently ignored setting. Checks that need the file's location (patch paths)
live in `load.py`; everything here depends on the text alone.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.matrix.archs import arch_list_problems

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
NAME = re.compile(r"^[a-z0-9][a-z0-9._=,+-]*$")

Name = Annotated[str, Field(pattern=NAME.pattern, max_length=64)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _sha256_hex(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(f"must be 64 lowercase hex characters (a sha256), got '{value}'")
    return value


def _full_sha(value: str, what: str) -> str:
    if not FULL_SHA.match(value):
        raise ValueError(
            f"{what} must be a full 40-character lowercase hex commit SHA, got '{value}' "
            "(a branch, tag or short SHA moves or is ambiguous; run `git rev-parse <ref>`)"
        )
    return value


class Hardware(Strict):
    cc: str = Field(description="Compute capability, e.g. '12.1' (GB10), '12.0' (RTX Pro 6000), '9.0' (H200).",
                    pattern=r"^\d+\.\d+$")
    bandwidth_gbs: float = Field(gt=0, description="Memory bandwidth in GB/s, for roofline figures.")
    memory_gib: float = Field(gt=0, description="Device memory (or unified memory) in GiB.")
    unified_memory: bool = Field(False, description="CPU and GPU share one memory (GB10): watch MemAvailable.")
    description: str = Field("", description="Free text: the machine, where its figures come from.")


class BaseImage(Strict):
    repository: str = Field(description="Image repository, e.g. 'nvidia/cuda'.")
    tag: str = Field(description="Image tag, e.g. '13.0.1-devel-ubuntu24.04'.")
    digest: str | None = Field(
        None,
        description="Content digest 'sha256:<64 hex>'. Without it the build refuses to run unless "
        "--allow-unpinned is given.",
    )
    unpinned_reason: str | None = Field(
        None, description="Why no digest is recorded (e.g. 'registry not reachable from the build machine')."
    )
    local: bool = Field(
        False, description="The tag names an image of the build engine that no registry serves (a "
        "`docker import`ed root file system, say): the build pins it by its image ID, read at build time.",
    )
    image_id: str | None = Field(
        None, description="For a local base: the image ID 'sha256:<64 hex>' it must have; without it the ID "
        "found at build time is recorded (label and content hash) but not checked.",
    )

    @field_validator("image_id")
    @classmethod
    def _image_id(cls, v: str | None) -> str | None:
        if v is not None and not DIGEST.match(v):
            raise ValueError(f"image_id must look like 'sha256:<64 hex>' (`docker image inspect -f '{{{{.Id}}}}'`), got '{v}'")
        return v

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: str | None) -> str | None:
        if v is not None and not DIGEST.match(v):
            raise ValueError(f"digest must look like 'sha256:<64 hex>', got '{v}'")
        return v

    @property
    def reference(self) -> str:
        ref = f"{self.repository}:{self.tag}"
        return f"{ref}@{self.digest}" if self.digest else ref


class Torch(Strict):
    version: str = Field(description="torch version installed in the image, e.g. '2.10.0'.")
    index_url: str = Field(
        "https://download.pytorch.org/whl/cu130",
        description="pip index the torch wheel comes from (its CUDA flavour).",
    )


class VllmSource(Strict):
    git: str | None = Field(None, description="Git URL of the vLLM source (with `commit`).")
    commit: str | None = Field(None, description="Full 40-hex commit SHA of the vLLM source.")
    pypi: str | None = Field(None, description="A PyPI release instead of git, e.g. '0.33.0' (sdist built).")
    sdist_sha256: str | None = Field(
        None, description="sha256 of the PyPI sdist (as the index lists it), checked after download."
    )
    patches: tuple[str, ...] = Field((), description="Ordered patch series, paths under patches/.")

    _sdist = field_validator("sdist_sha256")(classmethod(lambda cls, v: _sha256_hex(v)))

    @model_validator(mode="after")
    def _one_source(self) -> VllmSource:
        if bool(self.git) == bool(self.pypi):
            raise ValueError("give exactly one of `git` (with `commit`) or `pypi` (a release)")
        if self.git and not self.commit:
            raise ValueError("`git` needs `commit` (a full 40-hex SHA)")
        if self.commit is not None:
            _full_sha(self.commit, "commit")
        return self


class UpstreamPr(Strict):
    number: int = Field(gt=0, description="Upstream pull-request number.")
    head_sha: str = Field(description="Full SHA of the PR head the patch was taken from.")
    patch: str = Field(description="Path of the patch file under patches/.")
    title: str = Field("", description="The PR title, for reports.")

    @field_validator("head_sha")
    @classmethod
    def _sha(cls, v: str) -> str:
        return _full_sha(v, "head_sha")


class FlashInferSource(Strict):
    version: str | None = Field(None, description="PyPI release of flashinfer-python, e.g. '0.6.8'.")
    sdist_sha256: str | None = Field(
        None, description="sha256 of the flashinfer-python sdist, checked after download."
    )
    git: str | None = Field(None, description="Git URL, with `commit`, to build from source.")
    commit: str | None = Field(None, description="Full 40-hex commit SHA when built from git.")
    prs: tuple[UpstreamPr, ...] = Field((), description="Upstream PR patches applied in order.")
    cubin: bool = Field(True, description="Also install flashinfer-cubin (prebuilt kernels) at the same version.")

    _sdist = field_validator("sdist_sha256")(classmethod(lambda cls, v: _sha256_hex(v)))

    @model_validator(mode="after")
    def _one_source(self) -> FlashInferSource:
        if bool(self.git) == bool(self.version):
            raise ValueError("give exactly one of `version` (a release) or `git` (with `commit`)")
        if self.git and not self.commit:
            raise ValueError("`git` needs `commit` (a full 40-hex SHA)")
        if self.commit is not None:
            _full_sha(self.commit, "commit")
        return self


class WheelPin(Strict):
    version: str = Field(description="Release version, e.g. '0.25.1'.")
    sha256: str | None = Field(
        None, description="sha256 of the wheel file installed (a re-packed wheel has its own: see wheels.lock)."
    )

    _sha = field_validator("sha256")(classmethod(lambda cls, v: _sha256_hex(v)))


class Wheels(Strict):
    """vLLM installed from a pinned wheel onto a base image that already has torch (a wheel stack)."""

    vllm: WheelPin = Field(description="The vLLM wheel: version and sha256.")
    wheelhouse: str | None = Field(
        None, description="Folder with the wheels and their wheels.lock (`harness bundle install --dest`), "
        "installed with no index; relative paths start at the matrix file. Without it, the vLLM wheel "
        "comes from PyPI (sha256 checked) and its dependencies from the index.",
    )
    python: str = Field("python3", description="The base image's interpreter that gets the wheels.")
    patches: tuple[str, ...] = Field(
        (), description="Python-file patches applied, in order, to the installed package (paths under patches/, "
        "relative to site-packages: 'a/vllm/...'); checked by `harness build --preflight` like source patches.",
    )


class LocalEnv(Strict):
    python: str = Field(description="Python interpreter that has vLLM installed, e.g. /opt/venv/bin/python3.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment (PYTHONPATH, ...).")


class Stack(Strict):
    description: str = Field("", description="What this stack is and why it exists.")
    runner: Literal["docker", "local"] = Field(
        "docker", description="'docker': build an image and serve in a container; 'local': an existing install."
    )
    image: str | None = Field(
        None, description="An existing image to serve from instead of building one (docker runner): "
        "a community image, or one built elsewhere. Its labels are recorded; nothing is built."
    )
    base_image: BaseImage | None = Field(None, description="CUDA devel base image (docker runner).")
    python: str = Field("3.12", description="Python version inside the image.")
    torch: Torch | None = Field(None, description="torch pin (docker runner).")
    vllm: VllmSource | None = Field(None, description="vLLM source and its local patch series (docker runner).")
    flashinfer: FlashInferSource | None = Field(None, description="FlashInfer pin and upstream PR patches.")
    torch_cuda_arch_list: str | None = Field(None, description="TORCH_CUDA_ARCH_LIST, e.g. '12.1a'.")
    flashinfer_cuda_arch_list: str | None = Field(None, description="FLASHINFER_CUDA_ARCH_LIST, e.g. '12.1a'.")
    max_jobs: int = Field(2, ge=1, description="MAX_JOBS for the vLLM build.")
    nvcc_threads: int = Field(1, ge=1, description="NVCC_THREADS for the vLLM build.")
    kernel_selection: Literal["flags", "env"] = Field(
        "flags",
        description="How this vLLM takes kernel choices: 'flags' (--moe-backend/--linear-backend, 0.2x+) "
        "or 'env' (VLLM_USE_FLASHINFER_MOE_FP4-style variables, older releases).",
    )
    local: LocalEnv | None = Field(None, description="The existing install, for runner = 'local'.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment set in every cell of this stack.")
    wheels: Wheels | None = Field(
        None, description="A wheel stack: vLLM from a pinned wheel onto `base_image` (which must already hold "
        "`torch`), instead of building `vllm` from source. `torch`/`flashinfer` pins are then checked in the image.",
    )

    @field_validator("torch_cuda_arch_list", "flashinfer_cuda_arch_list")
    @classmethod
    def _archs(cls, v: str | None) -> str | None:
        if v is not None and (problems := arch_list_problems(v)):
            raise ValueError("; ".join(problems))
        return v

    @model_validator(mode="after")
    def _runner_fields(self) -> Stack:
        if self.runner == "docker":
            missing = [k for k in ("base_image", "torch", "vllm", "flashinfer", "torch_cuda_arch_list")
                       if getattr(self, k) is None]
            if self.wheels is not None:
                missing = [] if self.base_image is not None else ["base_image"]
            if missing and self.image is None:
                raise ValueError(f"a docker stack needs {', '.join(missing)} (or `image`, a prebuilt one)")
        elif self.local is None:
            raise ValueError("a local stack needs a [local] table with `python`")
        return self


class Model(Strict):
    checkpoint: str = Field(
        description="Hub id, or a local directory with config.json (a relative path starting with ./ "
        "or ../ is taken from the matrix file's folder)."
    )
    quantization: Literal["fp8", "nvfp4", "bf16"] = Field(description="Weight format served.")
    load_format: Literal["auto", "dummy"] = Field(
        "auto", description="'dummy': random weights from config.json alone (no download)."
    )
    served_name: str | None = Field(None, description="--served-model-name; defaults to the model key.")
    active_params_b: float = Field(gt=0, description="Active parameters per token, in billions (roofline).")
    bytes_per_param: float = Field(gt=0, description="Bytes per active parameter (fp8 1.0, nvfp4 ~0.5625).")
    max_model_len: int = Field(8192, ge=256, description="--max-model-len.")
    args: tuple[str, ...] = Field((), description="Extra vLLM args for this model (e.g. --quantization fp8).")


class Config(Strict):
    description: str = Field("", description="What this serving variant tests.")
    moe_backend: str | None = Field(None, description="Requested MoE backend (vLLM flag value); None = auto.")
    linear_backend: str | None = Field(None, description="Requested linear backend; None = auto.")
    attention_backend: str | None = Field(None, description="--attention-backend; None = auto.")
    cudagraph_mode: str | None = Field(
        None, description="Requested CUDA-graph mode (FULL_AND_PIECEWISE, PIECEWISE, FULL, NONE)."
    )
    args: tuple[str, ...] = Field((), description="Extra vLLM CLI args.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")

    @field_validator("cudagraph_mode")
    @classmethod
    def _mode(cls, v: str | None) -> str | None:
        valid = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
        if v is not None and v.upper() not in valid:
            raise ValueError(f"'{v}' is not a CUDA-graph mode (valid: {', '.join(valid)})")
        return v.upper() if v else v


class SelectRule(Strict):
    cells: str = Field(description="-k expression choosing the cells this rule applies to, e.g. 'nvfp4'.")
    moe_backend: str | None = Field(None, description="MoE backend the log must show, as printed (MARLIN).")
    linear_kernel: str | None = Field(None, description="A linear kernel class the log must show.")
    attention_backend: str | None = Field(None, description="Attention backend the log must show.")
    cudagraph_mode: str | None = Field(None, description="CUDA-graph mode the log must show after downgrades.")


class Expect(Strict):
    kernels_match_request: bool = Field(True, description="A requested kernel that the log does not confirm fails.")
    max_autotuner_skips: int = Field(0, ge=0, description="Most FlashInfer autotuner-skipped tactics per op.")
    allowed_signatures: tuple[str, ...] = Field((), description="Known failure signature ids tolerated.")
    nvfp4_over_fp8_min_ratio: float | None = Field(
        1.0, gt=0, description="NVFP4 per-stream decode must be at least this times FP8 (same stack, hardware)."
    )
    min_decode_tok_s: float | None = Field(None, gt=0, description="Per-stream decode floor at concurrency 1.")
    select: tuple[SelectRule, ...] = Field((), description="What the log must show for matching cells.")


class Serve(Strict):
    port: int = Field(8000, ge=1, le=65535, description="Port vLLM listens on (container or host).")
    host_port: int | None = Field(None, description="Host port to publish; None picks a free one.")
    startup_timeout_s: float = Field(900, gt=0, description="Give up when not ready after this long.")
    quiet_period_s: float = Field(300, gt=0, description="Call a start 'hung' after this long with no new log line.")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1, description="--gpu-memory-utilization.")
    shm_size: str = Field("16g", description="Container /dev/shm size (ipc=host is used when possible).")
    model_cache: str | None = Field(None, description="Host directory mounted read-only as the model cache.")
    gpus: str = Field("all", description="GPUs to attach: 'all', 'none', or a comma list of indices.")
    vllm_cache: str | None = Field(
        None, description="Host folder mounted read-write as vLLM's cache in the container (/root/.cache/vllm: "
        "torch.compile artifacts), so a repeated start of a cell is as warm as a local one; None: every "
        "container compiles cold (its cache goes with it).",
    )
    network: Literal["bridge", "host"] | None = Field(
        None, description="Container network: 'bridge' (the port published on 127.0.0.1) or 'host' (vLLM "
        "binds the port on the host itself); None takes [host].network.",
    )


class Host(Strict):
    """How containers reach the GPU on the host that runs the matrix (one host; `harness doctor` checks it)."""

    description: str = Field("", description="The machine, and why these settings.")
    gpu_attach: Literal["runtime", "cdi", "devices"] = Field(
        "runtime", description="'runtime': the NVIDIA Container Toolkit (docker --gpus, device_requests); "
        "'cdi': CDI device names (Docker >= 25 with a CDI spec); 'devices': the /dev/nvidia* nodes and the "
        "driver's library folders given here, for engines with neither.",
    )
    devices: tuple[str, ...] = Field(
        ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"),
        description="'devices' mode: device nodes passed to the container (rwm).",
    )
    driver_dirs: tuple[str, ...] = Field(
        (), description="'devices' mode: host folders with the driver's user-space libraries (libcuda, "
        "nvidia-smi), bind-mounted read-only at the same path.",
    )
    library_path: tuple[str, ...] | None = Field(
        None, description="'devices' mode: LD_LIBRARY_PATH entries in the container; None = each driver "
        "dir's lib64 and lib.",
    )
    cdi_devices: tuple[str, ...] = Field(("nvidia.com/gpu=all",), description="'cdi' mode: CDI device names.")
    network: Literal["bridge", "host"] = Field(
        "bridge", description="Default container network on this host ('host' where the engine has no bridge).",
    )
    security_opt: tuple[str, ...] = Field(
        (), description="docker --security-opt values for serving containers, e.g. 'seccomp=unconfined' "
        "where the default seccomp profile measurably slows decode (say so in the description).",
    )


class Bench(Strict):
    concurrency: tuple[int, ...] = Field((1, 8), description="Concurrency levels (the seeds use 1 and 8).")
    max_tokens: int = Field(256, ge=2, description="Output tokens per request (ignore_eos makes it exact).")
    repeats: int = Field(3, ge=1, description="Timed repeats per level; spread comes from these.")
    prompt_tokens: int = Field(128, ge=1, description="Approximate prompt length for decode requests.")
    prefill: bool = Field(True, description="Measure cold prefill and the prefix-cache replay.")
    long_prompt_tokens: int = Field(4000, ge=64, description="Prompt length for the prefill measurement.")
    noise_floor: float = Field(0.02, ge=0, description="Smallest relative change called a gain or loss.")


class CellFilter(Strict):
    stack: str = Field("*", description="Stack name or glob.")
    model: str = Field("*", description="Model name or glob.")
    config: str = Field("*", description="Config name or glob.")


class Cells(Strict):
    stacks: tuple[str, ...] = Field(("*",), description="Stacks in the product (names or globs).")
    models: tuple[str, ...] = Field(("*",), description="Models in the product (names or globs).")
    configs: tuple[str, ...] = Field(("*",), description="Configs in the product (names or globs).")
    exclude: tuple[CellFilter, ...] = Field((), description="Cells removed from the product.")
    only: tuple[CellFilter, ...] = Field((), description="If given, keep only cells matching one of these.")


class MatrixMeta(Strict):
    name: str = Field(description="Matrix name, used in run ids.")
    description: str = Field("", description="What this matrix verifies.")
    hardware: str = Field(description="The hardware profile this matrix runs on (a key of [hardware]).")
    patches_dir: str = Field("../patches", description="Where patch paths are rooted, relative to this file.")


class MatrixFile(Strict):
    matrix: MatrixMeta
    hardware: dict[Name, Hardware]
    stacks: dict[Name, Stack]
    models: dict[Name, Model]
    configs: dict[Name, Config]
    expect: Expect = Field(default_factory=Expect)
    serve: Serve = Field(default_factory=Serve)
    host: Host = Field(default_factory=Host)
    bench: Bench = Field(default_factory=Bench)
    cells: Cells = Field(default_factory=Cells)

    @field_validator("hardware", "stacks", "models", "configs")
    @classmethod
    def _not_empty(cls, v: dict) -> dict:
        if not v:
            raise ValueError("at least one entry is needed")
        return v
