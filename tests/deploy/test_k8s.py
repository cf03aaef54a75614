"""deploy/k8s: every manifest passes `kubernetes-validate --strict`, both overlays render, and what they say about
each service matches the CLI, the config schema, the health checks, the GPU and the sandbox's isolation."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from services.sandbox.jail import CONTAINER_CAPABILITIES
from tests.deploy.deployment import (
    CONFIG_PATH,
    K8S,
    OVERLAYS,
    ROOT,
    SECRET_NAME,
    SECRET_PLACEHOLDERS,
    SERVICES,
    Container,
    by_kind,
    check_container,
    kubectl_kustomize,
    kustomize,
    pod_containers,
    pod_spec,
    tool,
)

POPULORA_WORKLOADS = (*SERVICES, "coordinator")
GPU = "nvidia.com/gpu"


@functools.cache
def _render(overlay: str) -> str:
    return yaml.safe_dump_all(kustomize(K8S / "overlays" / overlay), sort_keys=True)


def rendered(overlay: str) -> list[dict]:
    return list(yaml.safe_load_all(_render(overlay)))


def test_kubernetes_validate_strict(tmp_path):
    """Every resource file of the base, and each overlay as rendered, against the Kubernetes schemas."""
    # resource files (kustomizations and JSON patches are not resources; they are checked through the overlays)
    files = [p for p in sorted(K8S.rglob("*.yaml"))
             if p.name != "kustomization.yaml" and all(isinstance(d, dict) and "kind" in d
                                                       for d in yaml.safe_load_all(p.read_text()) if d)]
    for overlay in OVERLAYS:
        out = tmp_path / f"{overlay}.yaml"
        out.write_text(_render(overlay))
        files.append(out)
    proc = subprocess.run([tool("kubernetes-validate"), "--strict", *map(str, files)], capture_output=True,
                          text=True, timeout=300)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"kubernetes-validate --strict failed:\n{report}"
    assert "Couldn't find schema" not in report, f"a resource kind or apiVersion is unknown:\n{report}"
    validated = len(re.findall(r"passed for resource", report))
    assert validated >= 30, f"only {validated} resources validated:\n{report}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_renderer_agrees_with_kubectl(overlay):
    """When kubectl is installed, its kustomize renders the overlay exactly as the tests' renderer does."""
    theirs = kubectl_kustomize(K8S / "overlays" / overlay)
    ours = rendered(overlay)
    assert ours, f"overlay {overlay} renders nothing"
    if theirs is not None:
        key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
        assert sorted(ours, key=key) == sorted(theirs, key=key)


def _config_file(docs: list[dict], tmp_path: Path, overlay: str) -> Path:
    configmaps = by_kind(docs, "ConfigMap")
    assert "populora-config" in configmaps, f"overlay {overlay}: no ConfigMap populora-config"
    path = tmp_path / f"{overlay}-config.yaml"
    path.write_text(configmaps["populora-config"]["data"]["config.yaml"])
    return path


def _argv(container: dict) -> list[str]:
    """What the container runs: its command (set only where the image's tini is replaced), then its args."""
    return [*container.get("command", []), *container.get("args", [])]


def _env(container: dict, where: str) -> dict[str, str]:
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        assert not var["name"].endswith("_FILE"), f"{where}: {var['name']} names a file; it is no secret itself"
        ref = var["valueFrom"]["secretKeyRef"]
        assert ref["name"] == SECRET_NAME, f"{where}: secrets come from {SECRET_NAME}, not {ref['name']}"
        assert var["name"] in SECRET_PLACEHOLDERS, f"{where}: unexpected secret variable {var['name']}"
        env[var["name"]] = SECRET_PLACEHOLDERS[var["name"]]
    return env


def _probe_ports(container: dict, where: str) -> list[int]:
    ports = []
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container.get(kind)
        if probe is None:
            continue
        # the gRPC health service over mutual TLS: populora.healthcheck (the kubelet's own grpc probe has no TLS)
        command = probe.get("exec", {}).get("command", [])
        assert command[:3] == ["python", "-m", "populora.healthcheck"], \
            f"{where}: {kind} must ask the gRPC health service with populora.healthcheck, not {probe}"
        address = command[3]
        assert address.startswith("127.0.0.1:"), f"{where}: {kind} must ask 127.0.0.1"
        assert probe.get("timeoutSeconds", 1) >= 3, f"{where}: {kind} runs Python; give it seconds (timeoutSeconds)"
        ports.append(int(address.rsplit(":", 1)[1]))
    assert {"readinessProbe", "livenessProbe"} <= set(container) or "populora train" in " ".join(_argv(container)), \
        f"{where}: needs readiness and liveness probes"
    return ports


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_matches_cli_and_config(overlay, tmp_path):
    docs = rendered(overlay)
    config_file = _config_file(docs, tmp_path, overlay)
    workloads = {d["metadata"]["name"]: d for d in docs if pod_spec(d) is not None}
    services = by_kind(docs, "Service")
    for name in POPULORA_WORKLOADS:
        assert name in workloads, f"overlay {overlay}: no workload {name}"
        (container,) = pod_spec(workloads[name])["containers"]
        where = f"overlay {overlay}: {workloads[name]['kind']}/{name}"
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod_spec(workloads[name]).get("volumes", [])}
        assert volumes[mounts["/etc/populora"]]["configMap"]["name"] == "populora-config", \
            f"{where}: {CONFIG_PATH} must come from the ConfigMap populora-config"
        ports = {int(p["containerPort"]) for p in container.get("ports", [])}
        health = [] if name == "coordinator" else _probe_ports(container, where)
        cfg = check_container(Container(where, name, _argv(container), _env(container, where), config_file,
                                        ports, health))
        if name == "coordinator":
            continue
        # The Service of the same name, which is the host every client is configured with, routes both ports.
        assert name in services, f"overlay {overlay}: no Service {name} (clients dial services.{name}.host)"
        named = {p["name"]: int(p["containerPort"]) for p in container["ports"]}
        routed = {named.get(p["targetPort"], p["targetPort"]) for p in services[name]["spec"]["ports"]}
        assert ports <= routed, f"overlay {overlay}: Service {name} does not route ports {sorted(ports - routed)}"
        endpoint = getattr(cfg.services, name)
        assert {p["port"] for p in services[name]["spec"]["ports"]} >= {endpoint.port}
        if name in ("inference", "trainer", "evolver"):
            assert volumes[mounts["/data"]]["persistentVolumeClaim"]["claimName"] == "populora-data"


def test_no_secret_values_anywhere():
    """Secrets are referenced (secretKeyRef), never written into the manifests."""
    for overlay in OVERLAYS:
        docs = rendered(overlay)
        assert not by_kind(docs, "Secret"), f"overlay {overlay} contains a Secret"
        for d in docs:
            for c in pod_containers(d):
                for var in c.get("env", []):
                    if re.search(r"PASSWORD|TOKEN|DB_URL", var["name"]) and not var["name"].endswith("_FILE"):
                        assert "valueFrom" in var, f"{d['metadata']['name']}: {var['name']} has a literal value"
    for path in K8S.rglob("*.yaml"):
        text = path.read_text()
        assert not re.search(r"(postgresql|rediss?)[^\s:]*://[^\s@/]+:[^\s@/]+@", text), f"{path}: a password in a URL"


def test_resources_everywhere():
    for overlay in OVERLAYS:
        for d in rendered(overlay):
            for c in pod_containers(d):
                res = c.get("resources", {})
                for part in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(res.get(part, {})), \
                        f"overlay {overlay}: {d['metadata']['name']}/{c['name']} has no cpu and memory {part}"


def test_gpu_requests_only_in_the_gpu_overlay(tmp_path):
    gpu = rendered("gpu")
    workloads = by_kind(gpu, "StatefulSet")
    for name in ("inference", "trainer"):
        spec = pod_spec(workloads[name])
        (c,) = spec["containers"]
        assert int(c["resources"]["limits"][GPU]) >= 1 and c["resources"]["limits"][GPU] == \
            c["resources"]["requests"][GPU], f"gpu overlay: {name} must request and limit {GPU}"
        assert spec.get("nodeSelector"), f"gpu overlay: {name} has no node selector"
        assert any(t.get("key") == GPU for t in spec.get("tolerations", [])), f"gpu overlay: {name} tolerates no GPU taint"
        assert c["image"].endswith("-cuda"), f"gpu overlay: {name} must run the cuda image"
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        assert "/models" in mounts, f"gpu overlay: {name} does not mount /models"
    claims = by_kind(gpu, "PersistentVolumeClaim")
    assert "populora-models" in claims
    from populora.config import load_config

    cfg = load_config(path=_config_file(gpu, tmp_path, "gpu"), env=False)
    assert cfg.model.name.startswith("/models/") and cfg.generation.backend == "vllm" and cfg.model.device == "cuda"
    cpu = rendered("cpu")
    assert GPU not in yaml.safe_dump_all(cpu), "cpu overlay must not request GPUs"
    cfg = load_config(path=_config_file(cpu, tmp_path, "cpu"), env=False)
    assert cfg.model.name == "tiny" and cfg.model.device == "cpu"


# The capabilities Pod Security `baseline` lets a container add (Kubernetes' Pod Security Standards).
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


def test_sandbox_isolation():
    for overlay in OVERLAYS:
        docs = rendered(overlay)
        spec = pod_spec(by_kind(docs, "Deployment")["sandbox"])
        assert spec.get("runtimeClassName") == "gvisor", f"overlay {overlay}: sandbox must run under gVisor"
        runtime = by_kind(docs, "RuntimeClass").get("gvisor")
        assert runtime and runtime["handler"] == "runsc", "RuntimeClass gvisor with handler runsc is missing"
        (c,) = spec["containers"]
        sc = c["securityContext"]
        assert sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        # root, but only inside gVisor and with exactly the capabilities the service's profile was tested with,
        # each of them one that Pod Security `baseline` (the namespace's level) allows
        assert sorted(sc["capabilities"].get("add", [])) == sorted(CONTAINER_CAPABILITIES)
        assert set(CONTAINER_CAPABILITIES) <= BASELINE_CAPABILITIES
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env.get("POPULORA__SANDBOX__ISOLATION") == "gvisor", "the in-gVisor profile, as tested in runsc"
        assert c.get("command") == ["populora"], "the sandbox service must be pid 1 (no tini): it blanks its env"
        assert spec["securityContext"].get("seccompProfile", {}).get("type") == "RuntimeDefault"
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        for path in ("/tmp", "/dev/shm"):
            assert "emptyDir" in volumes[mounts[path]], f"sandbox {path} must be an emptyDir"
        # emptyDirs are world-writable: an init container makes them root's only, as Compose's tmpfs mode=755
        chmods = [i for i in spec.get("initContainers", []) if i["args"][:2] == ["chmod", "0755"]]
        assert chmods and {"/tmp", "/dev/shm"} <= set(chmods[0]["args"][2:]), "sandbox /tmp, /dev/shm not chmod 0755"
        init_mounts = {m["mountPath"]: m["name"] for m in chmods[0]["volumeMounts"]}
        assert all(init_mounts.get(p) == mounts[p] for p in chmods[0]["args"][2:]), "init container mounts differ"

        policies = [p for p in by_kind(docs, "NetworkPolicy").values()
                    if p["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name") == "sandbox"]
        assert policies, f"overlay {overlay}: no NetworkPolicy selects the sandbox"
        for policy in policies:
            assert "Egress" in policy["spec"]["policyTypes"], "the sandbox policy must restrict egress"
            for rule in policy["spec"].get("egress", []):
                peers = rule.get("to")
                assert peers, "an egress rule without `to` would let the sandbox reach anything"
                for peer in peers:
                    assert "ipBlock" not in peer, "the sandbox may not reach addresses outside the cluster"
                    assert set(peer) <= {"podSelector", "namespaceSelector"} and peer.get("podSelector"), \
                        "every egress peer of the sandbox must name specific pods"
            sources = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
            allowed = {v for peer in sources for e in peer.get("podSelector", {}).get("matchExpressions", [])
                       for v in e["values"]}
            assert allowed == {"coordinator", "league"}, f"sandbox ingress from {sorted(allowed)}"

        # no secret in any environment of the pod: files from the Secret, readable by root only
        for container in spec["containers"] + spec.get("initContainers", []):
            assert not [v for v in container.get("env", []) if "valueFrom" in v], \
                f"overlay {overlay}: a secret in the sandbox's environment (a job could read it from /proc)"
        env = {e["name"]: e.get("value") for e in c["env"]}
        secret = next(v["secret"] for v in spec["volumes"] if v.get("secret", {}).get("secretName") == SECRET_NAME)
        assert secret["defaultMode"] == 0o400
        mount = next(m for m in c["volumeMounts"] if volumes[m["name"]].get("secret", {}).get("secretName") == SECRET_NAME)
        files = {f"{mount['mountPath']}/{i['path']}": i["key"] for i in secret["items"]}
        assert files == {env.get("POPULORA__SANDBOX__DB_URL_FILE"): "sandbox-db-url"} and mount.get("readOnly") is True

        hpa = by_kind(docs, "HorizontalPodAutoscaler")["sandbox"]
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "sandbox"}
        assert "replicas" not in by_kind(docs, "Deployment")["sandbox"]["spec"], "the HPA owns the replica count"


def test_references_resolve():
    """Every PVC and ConfigMap a pod mounts exists, and every namespaced resource is in the populora namespace."""
    for overlay in OVERLAYS:
        docs = rendered(overlay)
        claims, configmaps = by_kind(docs, "PersistentVolumeClaim"), by_kind(docs, "ConfigMap")
        for d in docs:
            if d["kind"] not in ("Namespace", "RuntimeClass"):
                assert d["metadata"].get("namespace") == "populora", f"{d['kind']}/{d['metadata']['name']}"
            spec = pod_spec(d)
            if spec is None:
                continue
            templates = {t["metadata"]["name"] for t in d["spec"].get("volumeClaimTemplates", [])}
            for v in spec.get("volumes", []):
                if "persistentVolumeClaim" in v:
                    assert v["persistentVolumeClaim"]["claimName"] in claims
                if "configMap" in v:
                    assert v["configMap"]["name"] in configmaps
            for c in spec["containers"]:
                names = {v["name"] for v in spec.get("volumes", [])} | templates
                for m in c.get("volumeMounts", []):
                    assert m["name"] in names, f"{d['metadata']['name']}: mount of unknown volume {m['name']}"


def test_compose_and_k8s_cpu_configs_agree(tmp_path):
    """docker-compose.cpu.yml and the cpu overlay run the same configuration (apart from the run id)."""
    k8s = yaml.safe_load(by_kind(rendered("cpu"), "ConfigMap")["populora-config"]["data"]["config.yaml"])
    compose = yaml.safe_load((ROOT / "deploy" / "compose" / "cpu-distributed.yaml").read_text())
    for tree in (k8s, compose):
        tree["run"].pop("run_id")
    assert k8s == compose


def test_populora_pods_meet_the_restricted_pod_security_profile():
    """Non-root, no privilege escalation, no capabilities, the runtime's seccomp profile (Pod Security
    Standards `restricted`), for every PopuLoRA pod but the sandbox (root inside gVisor, see
    test_sandbox_isolation) and for Redis."""
    for overlay in OVERLAYS:
        for d in rendered(overlay):
            spec = pod_spec(d)
            if spec is None or d["metadata"]["name"] in ("postgres", "sandbox"):  # sandbox: test_sandbox_isolation
                continue
            where = f"overlay {overlay}: {d['kind']}/{d['metadata']['name']}"
            pod_sc = spec.get("securityContext", {})
            assert pod_sc.get("runAsNonRoot") is True and pod_sc.get("runAsUser", 0) != 0, f"{where}: runs as root"
            assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{where}: no seccomp profile"
            assert spec.get("automountServiceAccountToken") is False, f"{where}: mounts an API token it never uses"
            for c in spec["containers"]:
                sc = c.get("securityContext", {})
                assert sc.get("allowPrivilegeEscalation") is False, f"{where}: allows privilege escalation"
                assert sc.get("capabilities", {}).get("drop") == ["ALL"], f"{where}: keeps capabilities"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_placed_services_are_statefulsets_behind_headless_services(overlay, tmp_path):
    """Each trainer and inference pod has a stable name, and the coordinator resolves the Service's name to every
    ready pod (services.<name>.resolve), placing each adapter on one of them (coordinator.clients.replicas)."""
    from populora.config import load_config

    docs = rendered(overlay)
    cfg = load_config(path=_config_file(docs, tmp_path, overlay), env=False)
    sets, services = by_kind(docs, "StatefulSet"), by_kind(docs, "Service")
    for name in ("trainer", "inference"):
        assert sets[name]["spec"]["serviceName"] == name, f"overlay {overlay}: {name} is not a StatefulSet of {name}"
        assert services[name]["spec"].get("clusterIP") == "None", f"overlay {overlay}: Service {name} is not headless"
        assert getattr(cfg.services, name).resolve, f"overlay {overlay}: services.{name}.resolve is off"
