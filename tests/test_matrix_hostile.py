"""Hostile matrices: nothing a matrix says runs a command, reads a host file or mounts
a system folder, and every bad value is exit 2 with the key and a `fix:` line."""

from __future__ import annotations

import json
import os
import socket
import textwrap
from pathlib import Path

import pytest
from support.builds import one

from harness.cli import main
from harness.errors import ConfigError, EnvironmentProblem, MatrixError
from harness.image import sources
from harness.matrix.load import load_matrix
from harness.matrix.model import docker_size

SHA = "0123456789abcdef0123456789abcdef01234567"

# No patches and PyPI pins: `build --dry-run` of this matrix fetches nothing.
BASE = textwrap.dedent("""
    [matrix]
    name = "hostile"
    hardware = "gb10"
    patches_dir = "patches"

    [hardware.gb10]
    cc = "12.1"
    bandwidth_gbs = 273
    memory_gib = 128

    [stacks.s]
    torch_cuda_arch_list = "12.1a"
    base_image = { repository = "nvidia/cuda", tag = "13.0.1-devel-ubuntu24.04" }
    torch = { version = "2.14.0" }
    vllm = { pypi = "0.33.0" }
    flashinfer = { version = "0.7.2.post1" }

    [models.m]
    checkpoint = "org/model"
    quantization = "fp8"
    active_params_b = 3.3
    bytes_per_param = 1.0

    [configs.auto]
""")


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository (its own .git) holding the matrix; tmp_path/outside is not in it."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "patches" / "vllm").mkdir(parents=True)
    (root / "patches" / "vllm" / "ok.patch").write_text("diff --git a/x b/x\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "trusted.patch").write_text("diff --git a/y b/y\n")
    return root


def write(root: Path, text: str) -> Path:
    path = root / "m.toml"
    path.write_text(text)
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    for p in info.value.problems:
        assert "\n      fix: " in p, p
    return info.value.problems


def cli(argv: list[str], capsys) -> tuple[int, str]:
    rc = main(argv)
    return rc, " ".join(capsys.readouterr().err.split())


# --- 1. git arguments ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["vllm", "flashinfer"])
def test_upload_pack_in_git_url_runs_nothing(repo, tmp_path, capsys, which):
    marker = tmp_path / "pwned"
    evil = f'git = "--upload-pack=touch {marker};", commit = "{SHA}"'
    text = BASE.replace('vllm = { pypi = "0.33.0" }', f"vllm = {{ {evil} }}") if which == "vllm" else \
        BASE.replace('flashinfer = { version = "0.7.2.post1" }', f"flashinfer = {{ {evil} }}")
    path = write(repo, text)
    for argv in (["build", "--dry-run", "-m", str(path)], ["plan", "-m", str(path)]):
        rc, err = cli(argv, capsys)
        assert rc == 2 and f"stacks.s.{which}.git" in err and "starts with '-'" in err and "fix:" in err
    assert not marker.exists()


@pytest.mark.parametrize("url", [
    "ext::sh -c touch% /tmp/x", "file:///etc", "/srv/git/vllm", "http://github.com/vllm-project/vllm",
    "https://user:pw@github.com/x/y", "https://github.com/x y", "git@-oProxyCommand=x:y",
    "ssh://-oProxyCommand=touch/x", "https://github.com/x;touch", "",
])
def test_only_https_ssh_and_scp_git_urls(repo, url):
    path = write(repo, BASE.replace('vllm = { pypi = "0.33.0" }', f'vllm = {{ git = {json.dumps(url)}, commit = "{SHA}" }}'))
    assert any(p.startswith("stacks.s.vllm.git:") for p in problems_of(path))


@pytest.mark.parametrize("url", ["https://github.com/vllm-project/vllm", "https://github.com/vllm-project/vllm.git",
                                 "ssh://git@github.com/vllm-project/vllm.git", "git@github.com:vllm-project/vllm.git",
                                 "https://gitlab.example.com:8443/group/sub/vllm"])
def test_good_git_urls_load(repo, url):
    load_matrix(write(repo, BASE.replace('vllm = { pypi = "0.33.0" }', f'vllm = {{ git = "{url}", commit = "{SHA}" }}')))


def test_sources_checks_again_and_git_sees_double_dash(tmp_path):
    marker = tmp_path / "pwned"
    evil = sources.Source("vllm", "git", f"--upload-pack=touch {marker};", SHA)
    with pytest.raises(ConfigError, match="is not a git URL"):
        sources.tree(evil, cache=tmp_path / "cache")
    with pytest.raises(ConfigError, match="40-hex"):
        sources.tree(sources.Source("vllm", "git", "https://github.com/a/b", "HEAD"), cache=tmp_path / "cache")
    # below the check, `--` still keeps the string a repository name, never an option
    with pytest.raises(EnvironmentProblem, match="git fetch failed"):
        sources._git_checkout(evil, tmp_path / "dest")
    # and the transport allowlist refuses ext:: (it runs a command) and file://
    for url in (f"ext::sh -c touch% {marker}", f"file://{tmp_path}"):
        with pytest.raises(EnvironmentProblem, match="git fetch failed"):
            sources._git_checkout(sources.Source("vllm", "git", url, SHA), tmp_path / "dest2")
    assert not marker.exists() and not (tmp_path / "dest").exists()


# --- 1. patch paths --------------------------------------------------------------------------


def test_patches_dir_etc_is_refused(repo, capsys):
    path = write(repo, BASE.replace('patches_dir = "patches"', 'patches_dir = "/etc"').replace(
        'vllm = { pypi = "0.33.0" }', 'vllm = { pypi = "0.33.0", patches = ["passwd"] }'))
    (found,) = problems_of(path)
    assert found.startswith("stacks.s.vllm.patches[0]: 'passwd' resolves to /etc/passwd, outside the matrix's repository")
    rc, err = cli(["build", "--dry-run", "-m", str(path)], capsys)
    assert rc == 2 and "root:" not in err


def test_patches_dir_etc_is_refused_even_when_allowed_out(repo):
    path = write(repo, BASE.replace('patches_dir = "patches"', 'patches_dir = "/etc"').replace(
        'vllm = { pypi = "0.33.0" }', 'vllm = { pypi = "0.33.0", patches = [{ path = "passwd", allow_outside = true }] }'))
    (found,) = problems_of(path)
    assert "under the system folder /etc" in found


@pytest.mark.parametrize("entry", ['"../../outside/trusted.patch"', f'"{"/" + "tmp/x.patch"}"'])
def test_a_patch_outside_the_repository_is_refused(repo, entry):
    path = write(repo, BASE.replace('vllm = { pypi = "0.33.0" }', f'vllm = {{ pypi = "0.33.0", patches = [{entry}] }}'))
    assert "must be a relative path inside" in problems_of(path)[0]


def test_a_symlink_out_of_the_repository_is_refused(repo, tmp_path):
    (repo / "patches" / "vllm" / "link.patch").symlink_to(tmp_path / "outside" / "trusted.patch")
    path = write(repo, BASE.replace('vllm = { pypi = "0.33.0" }', 'vllm = { pypi = "0.33.0", patches = ["vllm/link.patch"] }'))
    assert "outside the matrix's repository" in problems_of(path)[0]


def test_allow_outside_lets_a_trusted_patch_in(repo, tmp_path, default_sources):
    trusted = tmp_path / "outside" / "trusted.patch"
    path = write(repo, BASE.replace('vllm = { pypi = "0.33.0" }', 'vllm = { pypi = "0.33.0", patches = ['
                                    f'"vllm/ok.patch", {{ path = "{trusted}", allow_outside = true }}] }}'))
    m = load_matrix(path)
    assert [m.patch_path(p) for p in m.spec.stacks["s"].vllm.patches] == [repo / "patches" / "vllm" / "ok.patch", trusted]
    from harness.image.dockerfile import render

    r = render(one(m, "s"))
    assert [p.data for p in r.patches] == [b"diff --git a/x b/x\n", b"diff --git a/y b/y\n"]


def test_plain_patch_entries_hash_as_before(repo):
    # a plain string entry dumps as that string: the image tags of existing matrices do not move
    m = load_matrix(write(repo, BASE.replace('vllm = { pypi = "0.33.0" }', 'vllm = { pypi = "0.33.0", patches = ["vllm/ok.patch"] }')))
    assert m.spec.stacks["s"].model_dump(mode="json")["vllm"]["patches"] == ["vllm/ok.patch"]


def test_the_repository_is_the_git_top_level(tmp_path):
    from harness.matrix.paths import repo_root

    (tmp_path / "r" / ".git").mkdir(parents=True)
    (tmp_path / "r" / "matrix").mkdir()
    assert repo_root(tmp_path / "r" / "matrix" / "m.toml") == tmp_path / "r"
    (tmp_path / "w" / "matrix").mkdir(parents=True)
    (tmp_path / "w" / ".git").write_text("gitdir: /elsewhere\n")  # a worktree's .git is a file
    assert repo_root(tmp_path / "w" / "matrix" / "m.toml") == tmp_path / "w"


# --- 1. checkpoints and mounts ---------------------------------------------------------------


def _model(root: Path, checkpoint: str, extra: str = "") -> Path:
    return write(root, BASE.replace('checkpoint = "org/model"', f"checkpoint = {json.dumps(checkpoint)}\n{extra}"))


def test_a_local_checkpoint_inside_the_repository_loads(repo):
    (repo / "models" / "m").mkdir(parents=True)
    load_matrix(_model(repo, "./models/m"))


@pytest.mark.parametrize("ckpt", ["../outside", "/tmp/models/x", "/etc"])
def test_a_checkpoint_outside_needs_allow_outside(repo, ckpt):
    found = problems_of(_model(repo, ckpt))
    assert found[0].startswith("models.m.checkpoint:") and "allow_outside = true" in found[0]


def test_allow_outside_checkpoint_loads(repo, tmp_path):
    load_matrix(_model(repo, str(tmp_path / "outside"), "allow_outside = true"))


@pytest.mark.parametrize("ckpt", ["/etc", "/", "/proc/self", "/var/run/docker.sock", "/dev/null", "/usr/lib"])
def test_system_folders_are_never_a_checkpoint(repo, ckpt):
    found = problems_of(_model(repo, ckpt, "allow_outside = true"))
    assert found[0].startswith("models.m.checkpoint:"), found


def test_a_symlink_to_a_system_folder_is_caught(repo, tmp_path):
    (tmp_path / "outside" / "sneaky").symlink_to("/etc")
    found = problems_of(_model(repo, str(tmp_path / "outside" / "sneaky"), "allow_outside = true"))
    assert "-> /etc" in found[0]


def test_a_socket_is_never_mounted(repo, tmp_path):
    sock_path = tmp_path / "outside" / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        found = problems_of(_model(repo, str(sock_path), "allow_outside = true"))
    assert "is a socket, not a folder" in found[0]


@pytest.mark.parametrize("ckpt", ["~/models/x", "-rf", "org/../etc", "a b", "org/name/extra", "org--x/y"])
def test_checkpoint_shapes(repo, ckpt):
    assert problems_of(_model(repo, ckpt))[0].startswith("models.m.checkpoint:")


@pytest.mark.parametrize(("cache", "why"), [
    ("/", "system folder /"), ("/etc/hf", "system folder /etc"), ("/var/run/docker.sock", "system folder /"),
    ("/run/user/0", "system folder /run"), ("relative/cache", "not an absolute path"), ("~/.cache", "not an absolute path"),
    ("/home", "system folder /home"),
])
def test_model_cache_mounts(repo, cache, why):
    found = problems_of(write(repo, BASE + f"\n[serve]\nmodel_cache = {json.dumps(cache)}\n"))
    assert found[0].startswith("serve.model_cache:") and why in found[0], found


def test_model_cache_that_does_not_exist_yet_loads(repo, tmp_path):
    # plan runs on machines without the cache; the name alone is judged
    load_matrix(write(repo, BASE + f'\n[serve]\nmodel_cache = "{tmp_path}/nowhere/hf"\n'))


def test_shipped_h200_matrix_says_its_checkpoints_are_outside(root):
    m = load_matrix(root / "matrix" / "h200-local.toml")
    assert all(model.allow_outside for model in m.spec.models.values())


# --- 5. values --------------------------------------------------------------------------------


BAD_VALUES = [
    ("[bench]\nconcurrency = [0]", "bench.concurrency[0]: Input should be greater than or equal to 1"),
    ("[bench]\nconcurrency = [-1, 2]", "bench.concurrency[0]: Input should be greater than or equal to 1"),
    ("[bench]\nconcurrency = []", "bench.concurrency: Tuple should have at least 1 item"),
    ("[bench]\nconcurrency = [5000]", "bench.concurrency[0]: Input should be less than or equal to 4096"),
    ("[bench]\nconcurrency = 8", "bench.concurrency: Input should be a valid tuple"),
    ("[bench]\nmax_tokens = 100000000000000000000000000", "bench.max_tokens:"),
    ("[bench]\nmax_tokens = 1000001", "bench.max_tokens: Input should be less than or equal to 1000000"),
    ("[bench]\nmax_tokens = 0", "bench.max_tokens: Input should be greater than or equal to 2"),
    ("[bench]\nprompt_tokens = 0", "bench.prompt_tokens: Input should be greater than or equal to 1"),
    ("[bench]\nprompt_tokens = 2000000", "bench.prompt_tokens: Input should be less than or equal to 1000000"),
    ("[bench]\nlong_prompt_tokens = 99999999", "bench.long_prompt_tokens: Input should be less than or equal"),
    ("[bench]\nrepeats = 0", "bench.repeats: Input should be greater than or equal to 1"),
    ("[bench]\nnoise_floor = nan", "bench.noise_floor: Input should be a finite number"),
    ("[serve]\nport = 0", "serve.port: Input should be greater than or equal to 1"),
    ("[serve]\nport = 70000", "serve.port: Input should be less than or equal to 65535"),
    ("[serve]\nhost_port = -1", "serve.host_port: Input should be greater than or equal to 1"),
    ("[serve]\nhost_port = 65536", "serve.host_port: Input should be less than or equal to 65535"),
    ('[serve]\ngpus = "banana"', "serve.gpus: 'banana' is not a GPU choice"),
    ('[serve]\ngpus = "0,0"', "serve.gpus: '0,0' names a GPU twice"),
    ('[serve]\ngpus = "-1"', "serve.gpus: '-1' is not a GPU choice"),
    ('[serve]\nshm_size = "lots"', "serve.shm_size: 'lots' is not a Docker size"),
    ('[serve]\nshm_size = "16GiB"', "serve.shm_size: '16GiB' is not a Docker size"),
    ('[serve]\nshm_size = "0"', "/dev/shm must be between 1m and 1024g"),
    ("[serve]\nstartup_timeout_s = 0", "serve.startup_timeout_s: Input should be greater than 0"),
    ("[serve]\nstartup_timeout_s = -1", "serve.startup_timeout_s: Input should be greater than 0"),
    ("[serve]\nstartup_timeout_s = inf", "serve.startup_timeout_s: Input should be a finite number"),
    ("[serve]\nquiet_period_s = nan", "serve.quiet_period_s: Input should be a finite number"),
]


@pytest.mark.parametrize(("table", "expected"), BAD_VALUES)
def test_bad_values_name_key_and_fix(repo, table, expected):
    found = problems_of(write(repo, BASE + "\n" + table + "\n"))
    assert any(expected in p for p in found), found


def test_pydantic_messages_get_a_fix_from_the_field(repo):
    (found,) = problems_of(write(repo, BASE + "\n[bench]\nconcurrency = 8\n"))
    assert found == ("bench.concurrency: Input should be a valid tuple\n      fix: write a list, e.g. [1, 8]: "
                     "Concurrency levels, each 1..4096, at least one (the matrices here use 1 and 8).")


@pytest.mark.parametrize("size", ["16g", "512m", "1.5g", "16gb", "1048576", "2G"])
def test_docker_sizes_load(repo, size):
    load_matrix(write(repo, BASE + f'\n[serve]\nshm_size = "{size}"\n'))


def test_docker_size_matches_docker_py():
    from docker.utils.utils import parse_bytes

    for size in ("16g", "512m", "1.5g", "16gb", "1048576", "2G", "64k", "10b"):
        assert docker_size(size) == parse_bytes(size), size


@pytest.mark.parametrize("gpus", ["all", "none", "0", "0,1", "3,1,2"])
def test_gpu_choices_load(repo, gpus):
    load_matrix(write(repo, BASE + f'\n[serve]\ngpus = "{gpus}"\n'))


def test_image_and_build_fields_exclude_each_other(repo):
    path = write(repo, BASE.replace("[stacks.s]\n", '[stacks.s]\nimage = "vllm/vllm-openai:v0.33.0"\n'))
    (found,) = problems_of(path)
    assert found.startswith("stacks.s: `image` (a prebuilt image) and the build field(s) base_image, torch, vllm, "
                            "flashinfer, torch_cuda_arch_list exclude each other")


def test_prebuilt_image_stack_plans(repo, capsys):
    text = BASE + '\n[stacks.img]\nimage = "vllm/vllm-openai:v0.33.0"\n'
    path = write(repo, text)
    assert main(["plan", "-m", str(path), "--json"]) == 0
    rows = {r["stack"]: r["image"] for r in json.loads(capsys.readouterr().out)}
    assert rows["img"] == "vllm/vllm-openai:v0.33.0" and rows["s"].startswith("vllm-bw:s-")
    # nothing to build for it: build only names the stack that builds
    rc, err = cli(["build", "--dry-run", "-m", str(path), "-k", "img"], capsys)
    assert rc == 2 and "no docker stack to build" in err


@pytest.mark.parametrize(("edit", "expected"), [
    (('image = "x"', 'image = "-v /:/host"'), "stacks.img.image: '-v /:/host' starts with '-'"),
    (('image = "x"', 'image = "Upper/Case"'), "is not an image reference"),
    (("[stacks.img]", '[stacks.img]\nrunner = "local"\nlocal = { python = "/usr/bin/python3" }'), "`image` needs runner"),
    (('[configs.auto]', '[configs.auto]\nmoe_backend = "--evil"'), "configs.auto.moe_backend: '--evil' starts with '-'"),
    (('[configs.auto]', '[configs.auto]\nenv = { "A B" = "1" }'), "is not an environment variable name"),
    (('[configs.auto]', '[configs.auto]\nargs = ["--x\\u0000y"]'), "contains a NUL character"),
    (('[models.m]', '[models.m]\nserved_name = "-x"'), "models.m.served_name: '-x' starts with '-'"),
    (('torch = { version = "2.14.0" }', 'torch = { version = "2.14.0", index_url = "http://evil/simple --trusted-host evil" }'),
     "stacks.s.torch.index_url:"),
    (('vllm = { pypi = "0.33.0" }', 'vllm = { pypi = "0.33.0 --pre" }'), "stacks.s.vllm.pypi: '0.33.0 --pre' is not a release version"),
    (('name = "hostile"', 'name = "../../etc"'), "matrix.name: String should match pattern"),
    (('base_image = { repository = "nvidia/cuda"', 'base_image = { repository = "nvidia/cuda --x"'), "stacks.s.base_image.repository"),
])
def test_values_that_reach_a_command(repo, edit, expected):
    text = (BASE + '\n[stacks.img]\nimage = "x"\n').replace(*edit)
    found = problems_of(write(repo, text))
    assert any(expected in p for p in found), found


def test_a_newline_in_a_key_cannot_forge_a_problem_line(repo):
    text = BASE + '\n[configs."x\\n  - stacks.s: all good"]\nbogus = 1\n'
    with pytest.raises(MatrixError) as info:
        load_matrix(write(repo, text))
    lines = str(info.value).splitlines()
    assert not any(line.startswith("  - stacks.s") for line in lines), lines
    assert info.value.problems[0].startswith('configs."x\\n  - stacks.s: all good"."[key]": String should match')
    assert "fix: a name is lowercase letters" in info.value.problems[0]


@pytest.mark.parametrize("depth", [5000, 600])
def test_deep_nesting_is_exit_2_not_a_traceback(repo, capsys, depth):
    path = write(repo, BASE + f"\n[bench]\nconcurrency = {'[' * depth}{']' * depth}\n")
    rc, err = cli(["plan", "-m", str(path)], capsys)
    assert rc == 2 and "nested too deep" in err and "fix:" in err and "Traceback" not in err


@pytest.mark.parametrize("make", ["dir", "fifo", "huge", "binary"])
def test_matrix_file_that_is_not_a_small_text_file(tmp_path, capsys, make):
    path = tmp_path / "m.toml"
    if make == "dir":
        path.mkdir()
    elif make == "fifo":
        os.mkfifo(path)  # reading it would block forever
    elif make == "huge":
        path.write_bytes(b"# " + b"x" * (5 << 20))
    else:
        path.write_bytes(b"\xff\xfe\x00garbage")
    rc, err = cli(["plan", "-m", str(path)], capsys)
    assert rc == 2 and "fix:" in err


@pytest.mark.parametrize(("kind", "what", "pin"), [
    ("git", "ext::sh -c touch% {marker}", SHA),
    ("git", "https://github.com/a/b", "HEAD"),
    ("pypi", "vllm", "0.33.0 --index-url http://evil"),
    ("pypi", "../../x", "1.0"),
])
def test_fetch_source_in_the_image_checks_its_arguments(tmp_path, kind, what, pin):
    # the build ARG reaches docker/fetch_source.py word-split by the shell: it checks again
    import subprocess
    import sys

    from harness.image.render import DOCKER_DIR

    marker = tmp_path / "pwned"
    argv = [sys.executable, str(DOCKER_DIR / "fetch_source.py"), kind, what.format(marker=marker), pin,
            "--dest", str(tmp_path / "dest")]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "fetch_source:" in r.stderr
    assert not marker.exists() and not (tmp_path / "dest").exists()


@pytest.mark.parametrize("field", ['python = "3.12"', "max_jobs = 4", 'torch_cuda_arch_list = "12.1a"'])
def test_any_build_field_set_beside_image_is_refused(repo, field):
    path = write(repo, BASE + f'\n[stacks.img]\nimage = "vllm/vllm-openai:v0.33.0"\n{field}\n')
    assert any(p.startswith("stacks.img: `image` (a prebuilt image) and the build field(s)") for p in problems_of(path))


def test_a_matrix_in_a_home_folder_cannot_reach_its_credentials(tmp_path):
    # no git: the matrix's folder is the repository, here a home folder with ~/.ssh in it
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    path = write(home, BASE.replace('patches_dir = "patches"', 'patches_dir = ".ssh"').replace(
        'vllm = { pypi = "0.33.0" }', 'vllm = { pypi = "0.33.0", patches = ["id_rsa"] }'))
    (found,) = problems_of(path)
    assert "in '.ssh' (credentials)" in found
    found = problems_of(write(home, BASE + f'\n[serve]\nmodel_cache = "{home / ".ssh"}"\n'))
    assert "a folder of credentials" in found[0]
    found = problems_of(_model(home, "./.ssh"))
    assert "a folder of credentials" in found[0]


def test_the_huggingface_cache_folder_is_fine(repo, tmp_path):
    load_matrix(write(repo, BASE + f'\n[serve]\nmodel_cache = "{tmp_path}/root/.cache/huggingface"\n'))
