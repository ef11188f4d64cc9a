"""The matrix file, as pydantic models: the only place where its shape is defined.

Every model forbids unknown keys and describes each field, so a typo is an error that names the
key instead of a silently ignored setting. Checks that need the file's location (patch paths)
live in `load.py`; everything here depends on the text alone.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from harness.archs import CC, ArchList
from harness.matrix.mounts import engine_url_problem
from harness.safety.grammar import problem

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
NAME = re.compile(r"^[a-z0-9][a-z0-9._=,+-]*$")

Name = Annotated[str, Field(pattern=NAME.pattern, max_length=64)]

# The smallest relative change called a gain or loss when a matrix or run says none: the spread of
# two identical runs on the serving-levers sweep of matrix/rtx-pro-6000.toml. The one place it is
# written; `[bench] noise_floor` overrides it per matrix.
NOISE_FLOOR = 0.02

# Strings that become arguments of git, pip, docker or vllm: none may start with '-' (it would
# be read as an option), hold whitespace that a shell-expanded build ARG splits on, or a NUL.
GIT_URL = re.compile(
    r"^(?:https://[A-Za-z0-9][A-Za-z0-9.-]*(?::\d{1,5})?/[A-Za-z0-9._~/+-]+"
    r"|ssh://(?:[A-Za-z0-9][A-Za-z0-9._-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*(?::\d{1,5})?/[A-Za-z0-9._~/+-]+"
    r"|[A-Za-z0-9][A-Za-z0-9._-]*@[A-Za-z0-9][A-Za-z0-9.-]*:[A-Za-z0-9_~/][A-Za-z0-9._~/+-]*)$"
)
VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!_-]{0,63}$")
_NAME_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
# distribution/reference's grammar, simplified: [domain[:port]/]path[:tag][@sha256:digest]
IMAGE_NAME = re.compile(rf"^(?:[A-Za-z0-9][A-Za-z0-9.-]*(?::\d{{1,5}})?/)?{_NAME_PART}(?:/{_NAME_PART})*$")
IMAGE_REF = re.compile(IMAGE_NAME.pattern[:-1] + r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
TAG = re.compile(r"^[\w][\w.-]{0,127}$")
WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}$")
# huggingface_hub validate_repo_id: [org/]name of letters, digits, . _ -; no "--" or ".." (checked below)
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
GPUS = re.compile(r"^(?:all|none|\d{1,3}(?:,\d{1,3})*)$")
# docker-py 7.2.0 utils.parse_bytes (what engine.py hands shm_size to): digits, then one of
# b k m g, then an optional b; nothing else (no 'GiB', no spaces).
DOCKER_SIZE = re.compile(r"^(?P<num>\d+(?:\.\d+)?)(?P<unit>[bkmgBKMG])?[bB]?$")
_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
MAX_TOKENS = 1_000_000


def _no_nul(v: str) -> str:
    if "\x00" in v:
        raise ValueError("contains a NUL character (no process argument or variable can hold one)")
    return v


# docker --security-opt values a matrix may set: what measurably changes serving, nothing that
# names a host file (seccomp=PATH would make the engine read it) or takes a line break.
_SECURITY_OPT = re.compile(r"seccomp=unconfined|apparmor=(?:unconfined|[A-Za-z0-9][A-Za-z0-9_.-]{0,63})"
                           r"|label=disable|no-new-privileges(?:[=:](?:true|false))?")


def _security_opt(v: str) -> str:
    if not _SECURITY_OPT.fullmatch(v):
        raise ValueError(f"{v!r} is not an allowed security option: seccomp=unconfined, apparmor=unconfined "
                         "(or a profile name), label=disable, no-new-privileges[=true|false]")
    return v


def _one_line(v: str) -> str:
    if any(c in v for c in "\n\r\x00"):
        raise ValueError(f"{v!r} holds a line break or NUL (it becomes a build argument)")
    return v


def _arch_list(v: object) -> ArchList:
    """TORCH_CUDA_ARCH_LIST text, parsed once here: every later question about it asks the value."""
    if isinstance(v, ArchList):
        return v
    if not isinstance(v, str):
        raise ValueError(f"expected a string such as '12.1a' or '12.0a;12.1a', got {type(v).__name__}")
    archs = ArchList.parse(_one_line(v))
    if problems := archs.problems():
        raise ValueError("; ".join(problems))
    return archs


def _cc(v: str) -> str:
    return str(CC.parse(v))  # MAJOR.MINOR, one digit of minor, as the driver reports it


# Written as text (a build argument, a label, the identity hash), held as the parsed value.
Archs = Annotated[ArchList, PlainValidator(_arch_list), PlainSerializer(str, return_type=str),
                  WithJsonSchema({"type": "string"})]


def _no_option(v: str) -> str:
    _no_nul(v)
    if v.startswith("-"):
        raise ValueError(f"'{v}' starts with '-': a command would read it as an option")
    return v


def _env_name(v: str) -> str:
    if not ENV_NAME.fullmatch(v):
        raise ValueError(f"'{v}' is not an environment variable name (letters, digits, _; not first a digit)")
    return v


def _grammar(field: str):
    def check(v: str) -> str:
        if (why := problem(field, v)) is not None:
            raise ValueError(why)
        return v
    return check


Text = Annotated[str, AfterValidator(_no_nul)]
Arg = Annotated[str, AfterValidator(_no_nul)]
EnvName = Annotated[str, AfterValidator(_env_name)]
Env = dict[EnvName, Text]


def _shaped(pattern: re.Pattern[str], what: str, example: str):
    def check(v: str) -> str:
        _no_option(v)
        if not pattern.fullmatch(v):
            raise ValueError(f"'{v}' is not {what} (example: {example})")
        return v
    return AfterValidator(check)


GitUrl = Annotated[str, _shaped(GIT_URL, "a git URL of the form https://host/path, ssh://[user@]host/path "
                                "or user@host:path", "https://github.com/vllm-project/vllm")]
Version = Annotated[str, _shaped(VERSION, "a release version", "'0.33.0' or '0.7.2.post1'")]
Word = Annotated[str, _shaped(WORD, "a plain value (letters, digits, _ . : + -)", "'marlin' or 'FLASHINFER'")]


def docker_size(value: str) -> int:
    """Bytes in a Docker size string ('16g', '512m', '1.5g'), as docker-py reads it; ValueError if not one."""
    m = DOCKER_SIZE.fullmatch(value)
    if not m:
        raise ValueError(f"'{value}' is not a Docker size (a number and one of b, k, m, g: '16g', '512m')")
    return int(float(m["num"]) * _UNITS[(m["unit"] or "b").lower()])


def _shm(v: str) -> str:
    size = docker_size(v)
    if not (1 << 20) <= size <= (1 << 40):
        raise ValueError(f"'{v}' is {size} bytes: /dev/shm must be between 1m and 1024g")
    return v


def _gpus(v: str) -> str:
    if not GPUS.fullmatch(v):
        raise ValueError(f"'{v}' is not a GPU choice: 'all', 'none', or device indices like '0' or '0,1'")
    ids = v.split(",") if v not in ("all", "none") else []
    if len(set(ids)) != len(ids):
        raise ValueError(f"'{v}' names a GPU twice")
    return v


class Strict(BaseModel):
    # inf and nan are valid TOML floats; no field here means either (a timeout of inf hangs).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _sha256_hex(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(f"must be 64 lowercase hex characters (a sha256), got '{value}'")
    return value


def _full_sha(value: str, what: str) -> str:
    if not FULL_SHA.fullmatch(value):
        raise ValueError(
            f"{what} must be a full 40-character lowercase hex commit SHA, got '{value}' "
            "(a branch, tag or short SHA moves or is ambiguous; run `git rev-parse <ref>`)"
        )
    return value


class Hardware(Strict):
    cc: Annotated[str, AfterValidator(_cc)] = Field(
        description="Compute capability, e.g. '12.1' (GB10), '12.0' (RTX Pro 6000), '9.0' (H200).")
    bandwidth_gbs: float = Field(gt=0, description="Memory bandwidth in GB/s, for roofline figures.")
    memory_gib: float = Field(gt=0, description="Device memory (or unified memory) in GiB.")
    unified_memory: bool = Field(False, description="CPU and GPU share one memory (GB10): watch MemAvailable.")
    description: str = Field("", description="Free text: the machine, where its figures come from.")


class BaseImage(Strict):
    repository: Annotated[str, _shaped(IMAGE_NAME, "an image repository", "'nvidia/cuda'")] = Field(
        description="Image repository, e.g. 'nvidia/cuda'.")
    tag: Annotated[str, _shaped(TAG, "an image tag", "'13.0.1-devel-ubuntu24.04'")] = Field(
        description="Image tag, e.g. '13.0.1-devel-ubuntu24.04'.")
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
    python: Literal["install", "present"] | None = Field(
        None, description="Where Python and torch come from: 'install' (the template installs Python from "
        "apt, torch from the stack's index and the build requirements, as on a CUDA devel image) or "
        "'present' (the base brings them; the template checks them). Default: 'install' for a registry "
        "image, 'present' for a local one.",
    )

    @property
    def brings_python(self) -> bool:
        return self.python == "present" if self.python is not None else self.local

    @field_validator("image_id")
    @classmethod
    def _image_id(cls, v: str | None) -> str | None:
        if v is not None and not DIGEST.fullmatch(v):
            raise ValueError(f"image_id must look like 'sha256:<64 hex>' (`docker image inspect -f '{{{{.Id}}}}'`), got '{v}'")
        return v

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: str | None) -> str | None:
        if v is not None and not DIGEST.fullmatch(v):
            raise ValueError(f"digest must look like 'sha256:<64 hex>', got '{v}'")
        return v

    @property
    def reference(self) -> str:
        ref = f"{self.repository}:{self.tag}"
        return f"{ref}@{self.digest}" if self.digest else ref


class Torch(Strict):
    version: Version = Field(description="torch version installed in the image, e.g. '2.10.0'.")
    index_url: Annotated[str, _shaped(re.compile(r"^https://[A-Za-z0-9][A-Za-z0-9.-]*(?::\d{1,5})?/[^\s'\"\\$`]*$"),
                                      "an https:// index URL", "'https://download.pytorch.org/whl/cu130'")] = Field(
        "https://download.pytorch.org/whl/cu130",
        description="pip index the torch wheel comes from (its CUDA flavour).",
    )


class PatchRef(Strict):
    path: Text = Field(description="The patch file, relative to patches_dir (or absolute with allow_outside).")
    allow_outside: bool = Field(
        False, description="Allow this path to resolve outside the matrix's repository (a file you trust)."
    )

    def __str__(self) -> str:
        return self.path

    @model_serializer(mode="plain")
    def _plain(self) -> str | dict:
        # A plain entry dumps as the string it was written as, so image content hashes of
        # existing matrices do not move.
        return self.path if not self.allow_outside else {"path": self.path, "allow_outside": True}


def _patch_entry(v: object) -> object:
    return {"path": v} if isinstance(v, str) else v


class VllmSource(Strict):
    git: GitUrl | None = Field(None, description="Git URL of the vLLM source (with `commit`): https://, "
                               "ssh:// or user@host:path.")
    commit: str | None = Field(None, description="Full 40-hex commit SHA of the vLLM source.")
    pypi: Version | None = Field(None, description="A PyPI release instead of git, e.g. '0.33.0' (sdist built).")
    sdist_sha256: str | None = Field(
        None, description="sha256 of the PyPI sdist (as the index lists it), checked after download."
    )
    patches: tuple[Annotated[PatchRef, BeforeValidator(_patch_entry)], ...] = Field(
        (), description="Ordered patch series: paths under patches_dir, or { path = \"...\", "
        "allow_outside = true } for a file outside the matrix's repository."
    )
    deps_wheelhouse: str | None = Field(
        None, description="Offline builds: a folder of wheels for vLLM's runtime (and build) dependencies, "
        "with its wheels.lock (`harness bundle install --dest`), installed with no index; relative paths "
        "start at the matrix file."
    )

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
    patch: Text = Field(description="Path of the patch file under patches/.")
    allow_outside: bool = Field(False, description="Allow `patch` to resolve outside the matrix's repository.")
    title: Text = Field("", description="The PR title, for reports.")

    @field_validator("head_sha")
    @classmethod
    def _sha(cls, v: str) -> str:
        return _full_sha(v, "head_sha")


class FlashInferSource(Strict):
    version: Version | None = Field(None, description="PyPI release of flashinfer-python, e.g. '0.6.8'.")
    sdist_sha256: str | None = Field(
        None, description="sha256 of the flashinfer-python sdist, checked after download."
    )
    git: GitUrl | None = Field(None, description="Git URL, with `commit`, to build from source: https://, "
                               "ssh:// or user@host:path.")
    commit: str | None = Field(None, description="Full 40-hex commit SHA when built from git.")
    prs: tuple[UpstreamPr, ...] = Field((), description="Upstream PR patches applied in order.")
    cubin: bool = Field(True, description="Also install flashinfer-cubin (prebuilt kernels) at the same version.")
    aot: bool = Field(True, description="Compile FlashInfer's kernels ahead of time (`python -m flashinfer.aot`); "
                      "false: the package only, kernels JIT-compiled on first use (minutes instead of an hour).")

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
    version: Version = Field(description="Release version, e.g. '0.25.1'.")
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
    python: Annotated[str, AfterValidator(_grammar("python"))] = Field(
        "python3", description="The base image's interpreter that gets the wheels: 'python3', 'python3.12' or "
        "an absolute path.")
    patches: tuple[str, ...] = Field(
        (), description="Python-file patches applied, in order, to the installed package (paths under patches/, "
        "relative to site-packages: 'a/vllm/...'); checked by `harness build --preflight` like source patches.",
    )


class LocalEnv(Strict):
    python: Annotated[str, AfterValidator(_no_option)] = Field(
        description="Python interpreter that has vLLM installed, e.g. /opt/venv/bin/python3.")
    env: Env = Field(default_factory=dict, description="Extra environment (PYTHONPATH, ...).")


# What only a build reads: a prebuilt `image` stack that sets one would plan one image and run another.
BUILD_FIELDS = ("base_image", "torch", "vllm", "flashinfer", "torch_cuda_arch_list", "flashinfer_cuda_arch_list",
                "python", "max_jobs", "nvcc_threads")


class Stack(Strict):
    description: str = Field("", description="What this stack is and why it exists.")
    runner: Literal["docker", "local"] = Field(
        "docker", description="'docker': build an image and serve in a container; 'local': an existing install."
    )
    image: Annotated[str, _shaped(IMAGE_REF, "an image reference", "'vllm/vllm-openai:v0.33.0'")] | None = Field(
        None, description="An existing image to serve from instead of building one (docker runner): "
        "a community image, or one built elsewhere. Its labels are recorded; nothing is built. "
        "Excludes the build fields (base_image, torch, vllm, flashinfer, arch lists)."
    )
    base_image: BaseImage | None = Field(None, description="CUDA devel base image (docker runner).")
    python: str = Field("3.12", pattern=r"^3\.\d{1,2}$", description="Python version inside the image, e.g. '3.12'.")
    torch: Torch | None = Field(None, description="torch pin (docker runner).")
    vllm: VllmSource | None = Field(None, description="vLLM source and its local patch series (docker runner).")
    flashinfer: FlashInferSource | None = Field(None, description="FlashInfer pin and upstream PR patches.")
    torch_cuda_arch_list: Archs | None = Field(
        None, description="TORCH_CUDA_ARCH_LIST, e.g. '12.1a'.")
    flashinfer_cuda_arch_list: Archs | None = Field(
        None, description="FLASHINFER_CUDA_ARCH_LIST, e.g. '12.1a'.")
    offline: bool = Field(
        False, description="Build with no network: the sdists from the cache, what vLLM's CMake fetches as "
        "pinned archives (harness/data/sources/, `harness sources fetch`), dependencies from "
        "vllm.deps_wheelhouse. A local base image must then hold Python, torch and the CUDA toolchain.")
    max_jobs: int = Field(2, ge=1, le=1024, description="MAX_JOBS for the vLLM build.")
    nvcc_threads: int = Field(1, ge=1, le=256, description="NVCC_THREADS for the vLLM build.")
    kernel_selection: Literal["flags", "env"] = Field(
        "flags",
        description="How this vLLM takes kernel choices: 'flags' (--moe-backend/--linear-backend, 0.2x+) "
        "or 'env' (VLLM_USE_FLASHINFER_MOE_FP4-style variables, older releases).",
    )
    local: LocalEnv | None = Field(None, description="The existing install, for runner = 'local'.")
    env: Env = Field(default_factory=dict, description="Environment set in every cell of this stack.")
    wheels: Wheels | None = Field(
        None, description="A wheel stack: vLLM from a pinned wheel onto `base_image` (which must already hold "
        "`torch`), instead of building `vllm` from source. `torch`/`flashinfer` pins are then checked in the image.",
    )

    @model_validator(mode="after")
    def _runner_fields(self) -> Stack:
        build = [k for k in BUILD_FIELDS if k in self.model_fields_set]
        if self.image is not None and build:
            raise ValueError(f"`image` (a prebuilt image) and the build field(s) {', '.join(build)} exclude "
                             "each other: plan would show one image and run would use the other "
                             "(keep `image`, or remove it to build)")
        if self.image is not None and self.runner != "docker":
            raise ValueError("`image` needs runner = \"docker\" (a local stack runs an existing install)")
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


def is_local_checkpoint(checkpoint: str) -> bool:
    """A checkpoint that names a folder on the host, not a hub id (harness.serve.command.model_path agrees)."""
    return checkpoint.startswith(("/", "./", "../"))


# the weight formats a model is served in
Quantization = Literal["fp8", "nvfp4", "bf16"]


class Model(Strict):
    checkpoint: Annotated[str, AfterValidator(_no_option)] = Field(
        description="Hub id (org/name), or a local directory with config.json: an absolute path, or one "
        "starting with ./ or ../ taken from the matrix file's folder. A local directory must lie inside "
        "the matrix's repository unless allow_outside = true."
    )
    allow_outside: bool = Field(
        False, description="Allow a local checkpoint directory outside the matrix's repository."
    )
    quantization: Quantization = Field(description="Weight format served.")
    load_format: Literal["auto", "dummy"] = Field(
        "auto", description="'dummy': random weights from config.json alone (no download)."
    )
    served_name: Annotated[str, _shaped(re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$"), "a served model name",
                                        "'qwen3-fp8'")] | None = Field(
        None, description="--served-model-name; defaults to the model key.")
    active_params_b: float = Field(gt=0, description="Active parameters per token, in billions (roofline).")
    bytes_per_param: float = Field(gt=0, description="Bytes per active parameter (fp8 1.0, nvfp4 ~0.5625).")
    max_model_len: int = Field(8192, ge=256, le=16 * MAX_TOKENS, description="--max-model-len.")
    args: tuple[Arg, ...] = Field((), description="Extra vLLM args for this model (e.g. --quantization fp8).")
    family: Name | None = Field(
        None, description="The model family this checkpoint is a format of (e.g. 'qwen3-30b-a3b'): an NVFP4 "
        "model is judged against the one FP8 model of its family, on the same stack and config. None: "
        "compared with nothing (unless compare_with names its FP8 model).")
    compare_with: Name | None = Field(
        None, description="On an NVFP4 model: the key of the FP8 model in [models] it is judged against "
        "(same stack and config). Needed when its family has more than one FP8 model.")

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint(cls, v: str) -> str:
        if v.startswith("~"):
            raise ValueError(f"'{v}': write the folder in full (no process expands '~' here)")
        if not is_local_checkpoint(v) and (not HUB_ID.fullmatch(v) or ".." in v or "--" in v):
            raise ValueError(f"'{v}' is neither a hub id ('org/name') nor a local folder "
                             "(an absolute path, or ./ or ../ from the matrix file's folder)")
        return v


class Config(Strict):
    description: str = Field("", description="What this serving variant tests.")
    moe_backend: Word | None = Field(None, description="Requested MoE backend (vLLM flag value); None = auto.")
    linear_backend: Word | None = Field(None, description="Requested linear backend; None = auto.")
    attention_backend: Word | None = Field(None, description="--attention-backend; None = auto.")
    cudagraph_mode: str | None = Field(
        None, description="Requested CUDA-graph mode (FULL_AND_PIECEWISE, PIECEWISE, FULL, NONE)."
    )
    args: tuple[Arg, ...] = Field((), description="Extra vLLM CLI args.")
    env: Env = Field(default_factory=dict, description="Extra environment variables.")
    nodes: int = Field(
        1, ge=1, le=64, description="Machines this cell spans: above 1, a Ray cluster (a head on the first "
        "[hosts] entry that takes the stack, a worker on each next one, host network) and "
        "`--distributed-executor-backend ray` with the parallel sizes in `args`.",
    )

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
        1.0, gt=0, description="NVFP4 decode must be at least this times FP8 (same stack and config) at every "
        "concurrency level both measured: per stream at c=1, aggregate above; judged beyond the noise band."
    )
    min_decode_tok_s: float | None = Field(None, gt=0, description="Per-stream decode floor at concurrency 1.")
    select: tuple[SelectRule, ...] = Field((), description="What the log must show for matching cells.")


class Serve(Strict):
    port: int = Field(8000, ge=1, le=65535, description="Port vLLM listens on (container or host).")
    host_port: int | None = Field(None, ge=1, le=65535, description="Host port to publish; None picks a free one.")
    startup_timeout_s: float = Field(900, gt=0, le=86400, description="Give up when not ready after this long.")
    quiet_period_s: float = Field(300, gt=0, le=86400,
                                  description="Call a start 'hung' after this long with no new log line.")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1, description="--gpu-memory-utilization.")
    shm_size: Annotated[str, AfterValidator(_shm)] = Field(
        "16g", description="Container /dev/shm size, a Docker size such as '16g' or '512m' (ipc=host is used when possible).")
    model_cache: Annotated[str, AfterValidator(_no_option)] | None = Field(
        None, description="Host folder (an absolute path) mounted read-only as the model cache; never a "
        "system folder, socket or device.")
    gpus: Annotated[str, AfterValidator(_gpus)] = Field(
        "all", description="GPUs to attach: 'all', 'none', or a comma list of indices ('0' or '0,1').")

    vllm_cache: str | None = Field(
        None, description="Host folder mounted read-write as vLLM's cache in the container (/root/.cache/vllm: "
        "torch.compile artifacts), so a repeated start of a cell is as warm as a local one; None: every "
        "container compiles cold (its cache goes with it).",
    )
    network: Literal["bridge", "host"] | None = Field(
        None, description="Container network: 'bridge' (the port published on 127.0.0.1) or 'host' (vLLM "
        "binds the port on the host itself); None takes [host].network.",
    )

    @field_validator("model_cache", "vllm_cache")
    @classmethod
    def _cache(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(f"'{v}' is not an absolute path (a relative one would be a named volume "
                             "to Docker): write the full folder, e.g. /home/me/.cache/huggingface")
        return v


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
    allow_devices: tuple[str, ...] = Field(
        (), description="Device nodes other than the GPU's own (/dev/nvidia*, /dev/dri/*) that `devices` may "
        "list, each by its full path: a deliberate exception, say why in the description.")
    cdi_devices: tuple[str, ...] = Field(("nvidia.com/gpu=all",), description="'cdi' mode: CDI device names.")
    network: Literal["bridge", "host"] = Field(
        "bridge", description="Default container network on this host ('host' where the engine has no bridge).",
    )
    security_opt: tuple[Annotated[str, AfterValidator(_security_opt)], ...] = Field(
        (), description="docker --security-opt values for serving containers, e.g. 'seccomp=unconfined' "
        "where the default seccomp profile measurably slows decode (say so in the description). "
        "Allowed: seccomp=unconfined, apparmor=unconfined or a profile name, label=disable, "
        "no-new-privileges[=true|false] (a seccomp profile file is not read from a matrix).",
    )


class EngineTls(Strict):
    """Client TLS for a `tcp://` engine, as `docker --tlsverify --tlscacert ... --tlscert ... --tlskey`."""

    ca_cert: str | None = Field(None, description="CA certificate that signed the engine's certificate (PEM path).")
    client_cert: str = Field(description="Client certificate (PEM path), e.g. ~/.docker/cert.pem.")
    client_key: str = Field(description="Client key (PEM path), e.g. ~/.docker/key.pem.")
    verify: bool = Field(True, description="Check the engine's certificate against `ca_cert` (leave on).")


class EngineHost(Strict):
    """[hosts.NAME]: one Docker engine, the hardware behind it, and the GPUs it lends to cells.

    The GPU-attach fields (`gpu_attach`, `network`) carry the names and values of the single-host
    `[host]` table, so one unnamed `[host]` reads as a one-entry `[hosts]` (see harness/run/schedule.py).
    """

    description: str = Field("", description="The machine, and why these settings.")
    engine: str | None = Field(
        None, description="Docker engine URL: 'unix:///var/run/docker.sock', 'ssh://user@host[:port]' "
        "(the host's own engine, through `docker system dial-stdio`), or 'tcp://host:2376' with "
        "[hosts.NAME.tls]. None = DOCKER_HOST or the local socket, as `docker` itself.",
    )
    tls: EngineTls | None = Field(None, description="Client TLS files for a tcp:// engine.")
    hardware: str | None = Field(
        None, description="This host's hardware profile (a key of [hardware]); None = matrix.hardware. "
        "A cell goes only to hosts whose compute capability its stack's arch list covers.",
    )
    # strict: a TOML `true` is not GPU 1
    gpus: Literal["all", "none"] | tuple[StrictInt | StrictStr, ...] = Field(
        "all", description="GPUs this host gives its cells: 'all' (every GPU, one cell at a time), 'none', or a list of "
        "GPU indices/UUIDs that form a pool: a cell takes tensor_parallel_size x pipeline_parallel_size "
        "of them, for its container only.",
    )
    slots: int | None = Field(
        None, ge=1, description="Most cells running at once on this host; default: one per listed GPU "
        "(1 for 'all' and 'none').",
    )
    gpu_attach: Literal["runtime", "cdi", "devices"] = Field(
        "runtime", description="How containers get the GPU, as [host].gpu_attach: 'runtime' (device_requests).",
    )
    network: Literal["bridge", "host"] = Field(
        "bridge", description="'bridge': the server's port published at a free host port; 'host': the "
        "container shares the host's network and each slot listens on its own port of `ports`.",
    )
    address: str | None = Field(
        None, description="Where the controller reaches this host's servers; default: the engine URL's "
        "host name, 127.0.0.1 for a unix:// or default engine.",
    )
    ports: tuple[int, int] = Field(
        (8100, 8199), description="[first, last] host ports for slots that listen on the host itself "
        "(network = 'host', local stacks): slot i uses first + i, so ports never collide.",
    )
    stacks: tuple[str, ...] = Field(("*",), description="Stacks that may run here (names or globs).")

    @field_validator("engine")
    @classmethod
    def _engine_url(cls, v: str | None) -> str | None:
        if v is not None and (why := engine_url_problem(v)) is not None:
            raise ValueError(why)
        return v

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not (1 <= v[0] <= v[1] <= 65535):
            raise ValueError(f"ports must be [first, last] with 1 <= first <= last <= 65535, got {list(v)}")
        return v

    @model_validator(mode="after")
    def _fits(self) -> EngineHost:
        if isinstance(self.gpus, tuple):
            if not self.gpus:
                raise ValueError("gpus = [] lends nothing: write gpus = 'none'")
            if len(set(map(str, self.gpus))) != len(self.gpus):
                raise ValueError(f"gpus lists a GPU twice: {list(self.gpus)}")
        n = self.slots or (len(self.gpus) if isinstance(self.gpus, tuple) else 1)
        if self.ports[1] - self.ports[0] + 1 < n:
            raise ValueError(f"ports {list(self.ports)} hold fewer than the {n} slots of this host (widen the range)")
        if self.tls is not None and not (self.engine or "").startswith("tcp://"):
            raise ValueError("tls applies to a tcp:// engine only")
        return self


class Bench(Strict):
    concurrency: tuple[Annotated[int, Field(ge=1, le=4096)], ...] = Field(
        (1, 8), min_length=1, max_length=64,
        description="Concurrency levels, each 1..4096, at least one (the matrices here use 1 and 8).")
    max_tokens: int = Field(256, ge=2, le=MAX_TOKENS,
                            description="Output tokens per request, 2..1000000 (ignore_eos makes it exact).")
    repeats: int = Field(3, ge=1, le=1000, description="Timed repeats per level, 1..1000; spread comes from these.")
    prompt_tokens: int = Field(128, ge=1, le=MAX_TOKENS,
                               description="Approximate prompt length for decode requests, 1..1000000.")
    prefill: bool = Field(True, description="Measure cold prefill and the prefix-cache replay.")
    long_prompt_tokens: int = Field(4000, ge=64, le=MAX_TOKENS,
                                    description="Prompt length for the prefill measurement, 64..1000000.")
    noise_floor: float = Field(NOISE_FLOOR, ge=0, lt=1, description="Smallest relative change called a gain or loss (0..1).")


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
    name: Name = Field(description="Matrix name, used in run ids (lowercase letters, digits, . _ = , + -).")
    description: str = Field("", description="What this matrix verifies.")
    hardware: str = Field(description="The hardware profile this matrix runs on (a key of [hardware]).")
    patches_dir: Text = Field("../patches", description="Where patch paths are rooted, relative to this file; "
                              "patches must still resolve inside the matrix's repository.")


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
    hosts: dict[Name, EngineHost] = Field(
        default_factory=dict, description="Docker engines cells are spread over, by name; none = the "
        "single local engine (DOCKER_HOST or the local socket), one cell at a time.",
    )

    @field_validator("hardware", "stacks", "models", "configs")
    @classmethod
    def _not_empty(cls, v: dict) -> dict:
        if not v:
            raise ValueError("at least one entry is needed")
        return v
