"""Probe a Python environment (an image's, usually) and print one JSON object.

STANDALONE on purpose: run with the image's own interpreter, `python3 probe_image.py`, where
the harness is not installed. Standard library only, Python 3.8+ syntax, nothing raised: every
failure is captured as a string in the output.
"""

import json
import os
import platform
import re
import sys

# the same names harness.redact masks (this file runs alone inside images: no harness import)
_SECRET = re.compile(r"token(?!s|izer)|key|secret|pass|credential|private|session|cookie|_pw$",
                     re.IGNORECASE)
_HF = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
# credentials inside a URL: the user part (user:password@, token@) and token-like query parameters
_URL_USER = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]{0,30}://)[^/@\s:]{1,256}(?::[^/@\s]{0,256})?@", re.IGNORECASE)
_URL_PARAM = re.compile(r"(?P<key>[?&;](?:access_token|token|api_key|apikey|key|secret|password|passwd|sig|"
                        r"signature|auth)=)[^&#\s,)]{1,4096}", re.IGNORECASE)
_ENV_PREFIXES = ("FLASHINFER_", "VLLM_", "CUDA_", "NVIDIA_", "TORCH_CUDA_ARCH_LIST", "TRITON_")
_DISTS = (
    "vllm",
    "torch",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "triton",
    "transformers",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-runtime",
)


def _redact(name, value):
    if name == "HF_TOKEN" or _SECRET.search(name):
        return "***"
    value = _URL_USER.sub(lambda m: m.group("scheme") + "***@", value)
    value = _URL_PARAM.sub(lambda m: m.group("key") + "***", value)
    return _HF.sub("***", value)


def _error(exc):
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _dist_versions():
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8 has no importlib.metadata
        return {name: None for name in _DISTS}
    out = {}  # type: dict
    for name in _DISTS:
        try:
            out[name] = metadata.version(name)
        except Exception:
            out[name] = None
    return out


def _vllm():
    info = {"version": None, "version_tuple": None, "git_sha": None, "error": None}  # type: dict
    try:
        import vllm
    except Exception as exc:
        info["error"] = _error(exc)
        return info
    info["version"] = getattr(vllm, "__version__", None)
    try:
        from vllm import _version

        vt = getattr(_version, "__version_tuple__", None) or getattr(
            _version, "version_tuple", None
        )
        info["version_tuple"] = [str(x) for x in vt] if vt else None
        commit = getattr(_version, "__commit_id__", None) or getattr(_version, "commit_id", None)
        if commit:
            info["git_sha"] = str(commit)
    except Exception as exc:
        info["error"] = _error(exc)
    if info["git_sha"] is None and info["version"]:
        m = re.search(r"\+g([0-9a-f]{7,40})", info["version"])
        info["git_sha"] = m.group(1) if m else None
    return info


def _torch():
    info = {
        "version": None,
        "cuda": None,
        "arch_list": None,
        "device_capability": None,
        "error": None,
    }  # type: dict
    try:
        import torch
    except Exception as exc:
        info["error"] = _error(exc)
        return info
    info["version"] = getattr(torch, "__version__", None)
    info["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    try:
        info["arch_list"] = list(torch.cuda.get_arch_list())
        if torch.cuda.is_available():
            info["device_capability"] = list(torch.cuda.get_device_capability(0))
    except Exception as exc:
        info["error"] = _error(exc)
    return info


def _cuda_runtime():
    """cudaRuntimeGetVersion through ctypes, when a libcudart is on the loader path."""
    import ctypes
    import ctypes.util

    names = [
        ctypes.util.find_library("cudart"),
        "libcudart.so",
        "libcudart.so.13",
        "libcudart.so.12",
    ]
    for name in [n for n in names if n]:
        try:
            lib = ctypes.CDLL(name)
            version = ctypes.c_int(0)
            if lib.cudaRuntimeGetVersion(ctypes.byref(version)) == 0:
                v = version.value
                return {
                    "version": f"{v // 1000}.{(v % 1000) // 10}",
                    "library": name,
                    "error": None,
                }
        except Exception:
            continue
    return {"version": None, "library": None, "error": "no loadable libcudart"}


def probe():
    env = {k: _redact(k, v) for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)}
    return {
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "distributions": _dist_versions(),
        "vllm": _vllm(),
        "torch": _torch(),
        "cuda_runtime": _cuda_runtime(),
        "env": env,
    }


if __name__ == "__main__":
    print(json.dumps(probe(), sort_keys=True))
