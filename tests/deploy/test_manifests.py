"""Offline validation of everything under deploy/docker, deploy/compose and deploy/k8s.

Nothing here needs Docker, a cluster or the network: YAML must parse, Kubernetes resources (each
file and each rendered overlay) must validate against the Kubernetes OpenAPI schemas shipped by
``kubernetes-validate``, compose files against the compose specification schema shipped by
``check-jsonschema``, and the pieces must agree with each other and with the code: commands and
flags exist in the ``agl-stream`` CLI, consumer groups are not sized past their partitions,
Services reach their pods, referenced Secrets and ConfigMaps are the documented ones, the image
installs with the Makefile targets the README uses, and no secret value is committed.
"""

from __future__ import annotations

import ast
import copy
import importlib.resources
import json
import re
import shlex
import shutil
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.kustomize import containers, key, render

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "compose"
DOCKER = DEPLOY / "docker"
GRAFANA = DEPLOY / "grafana"

#: the oldest Kubernetes minor the manifests promise to work on (autoscaling/v2, policy/v1 GA)
K8S_VERSION = "1.30"
OVERLAYS = ["base", "overlays/local", "overlays/production"]
COMPOSE_FILES = ["compose.small.yaml", "compose.full.yaml"]
#: consumer groups whose useful size is bounded by the partitions of their topics
CONSUMER_GROUP_WORKLOADS = ("agl-processors", "agl-runners")
#: the store front door: each of its uvicorn workers joins agl-runners while upstream runners dequeue through it
STORE_WORKLOAD = "agl-ingest-store"
#: ConfigMaps created from files outside kustomize (documented next to the workloads using them)
OUT_OF_BAND_CONFIGMAPS = {"agl-grafana-datasources", "agl-grafana-providers", "agl-grafana-dashboards"}
SECRET_NAME = re.compile(r"(PASSWORD|TOKEN|SECRET|API_KEY|JAAS_CONFIG)$")
PLACEHOLDER = re.compile(r"^(change-me|<[a-z -]+>$)")


# ------------------------------------------------------------------------------------ helpers


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def load_all(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@lru_cache(maxsize=None)
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(K8S / overlay))


def fresh(overlay: str) -> list[dict[str, Any]]:
    return copy.deepcopy(list(rendered(overlay)))


def validate_k8s(doc: dict[str, Any], where: str) -> None:
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        pytest.fail(f"{where}: {doc['kind']}/{doc['metadata']['name']} at {path}: {exc.message}")
    except kubernetes_validate.SchemaNotFoundError as exc:
        pytest.fail(f"{where}: {exc.message}")


def kustomization_resource_files(directory: Path) -> Iterator[Path]:
    """Plain resource files a kustomization lists (recursively through directory resources)."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    for entry in spec.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            yield from kustomization_resource_files(path)
        else:
            yield path


def kustomization_patch_files(directory: Path) -> list[Path]:
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return [directory / p["path"] for p in spec.get("patches", []) if "path" in p]


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet", "Job")]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


def settings(docs: list[dict[str, Any]]) -> dict[str, str]:
    return next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "agl-settings")["data"]


@lru_cache(maxsize=None)
def compose(name: str) -> dict[str, Any]:
    return yaml.safe_load((COMPOSE / name).read_text())


@lru_cache(maxsize=1)
def compose_schema() -> dict[str, Any]:
    resource = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    return json.loads(resource.read_text())


def compose_errors(doc: dict[str, Any]) -> list[str]:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]


def env_file_keys(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, value = line.partition("=")
            assert sep, f"{rel(path)}: {line!r} is not NAME=value"
            values[name.strip()] = value.strip()
    return values


def compose_env_files(service: dict[str, Any]) -> list[str]:
    return [e["path"] if isinstance(e, dict) else e for e in service.get("env_file", [])]


def agl_command_lines() -> list[tuple[str, list[str]]]:
    """Every ``agl-stream ...`` command line the compose files and rendered overlays run."""
    lines: list[tuple[str, list[str]]] = []
    for name in COMPOSE_FILES:
        for service_name, service in compose(name)["services"].items():
            command = service.get("command")
            if isinstance(command, str):
                command = shlex.split(command)
            if command and command[0] == "agl-stream":
                lines.append((f"{name}:{service_name}", [str(c) for c in command]))
    for overlay in OVERLAYS:
        for doc in rendered(overlay):
            for container in containers(doc):
                command = list(container.get("command", [])) + list(container.get("args", []))
                if command and command[0] == "agl-stream":
                    lines.append((f"{overlay}:{doc['metadata']['name']}/{container['name']}", command))
    return lines


# ------------------------------------------------------------------------------------ YAML


@pytest.mark.parametrize("path", yaml_files(), ids=rel)
def test_every_yaml_file_parses(path: Path) -> None:
    docs = load_all(path)
    assert docs, f"{rel(path)} holds no document"


# ------------------------------------------------------------------------------------ Kubernetes


def all_k8s_resource_files() -> list[Path]:
    files = {p for overlay in OVERLAYS for p in kustomization_resource_files(K8S / overlay)}
    return sorted(files)


@pytest.mark.parametrize("path", all_k8s_resource_files(), ids=rel)
def test_each_k8s_manifest_validates(path: Path) -> None:
    for doc in load_all(path):
        validate_k8s(doc, rel(path))


def test_every_k8s_yaml_is_used() -> None:
    """A manifest no kustomization lists would silently never be applied."""
    used = set(all_k8s_resource_files())
    used |= {p for overlay in OVERLAYS for p in kustomization_patch_files(K8S / overlay)}
    used |= {K8S / overlay / "kustomization.yaml" for overlay in OVERLAYS}
    orphans = [rel(p) for p in K8S.rglob("*.yaml") if p not in used]
    assert not orphans, f"not referenced by any kustomization: {orphans}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_validates(overlay: str) -> None:
    docs = fresh(overlay)
    assert docs
    for doc in docs:
        validate_k8s(doc, f"rendered {overlay}")


def test_schema_validation_rejects_a_broken_manifest() -> None:
    """The validator is strict: a misspelled field or a wrong type fails."""
    deployment = next(d for d in fresh("base") if d["metadata"]["name"] == "agl-processors")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/health"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None,
                    reason="kubectl is not installed: the offline renderer alone is checked")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_renderer_matches_kubectl_kustomize(overlay: str) -> None:
    out = subprocess.run(["kubectl", "kustomize", str(K8S / overlay)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    theirs = {key(d): d for d in yaml.safe_load_all(out.stdout) if d}
    ours = {key(d): d for d in fresh(overlay)}
    assert ours.keys() == theirs.keys()
    for k in ours:
        assert ours[k] == theirs[k], f"{overlay}: {k} renders differently from kubectl kustomize"


def flag_value(command: list[str], flag: str, default: int) -> int:
    return int(command[command.index(flag) + 1]) if flag in command else default


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_consumer_groups_do_not_exceed_partitions(overlay: str) -> None:
    docs = fresh(overlay)
    partitions = int(settings(docs)["AGL_PARTITIONS"])
    by_name = {d["metadata"]["name"]: d for d in workloads(docs)}
    for name in CONSUMER_GROUP_WORKLOADS:
        replicas = by_name[name]["spec"].get("replicas", 1)
        assert replicas <= partitions, f"{overlay}: {name} has {replicas} replicas for {partitions} partitions"
    runner = by_name["agl-runners"]
    command = pod_spec(runner)["containers"][0]["command"]
    per_pod = int(command[command.index("--n-runners") + 1])
    store = by_name[STORE_WORKLOAD]
    store_members = store["spec"].get("replicas", 1) * flag_value(pod_spec(store)["containers"][0]["command"],
                                                                  "--workers", 1)
    runner_members = runner["spec"].get("replicas", 1) * per_pod
    controller = by_name.get("agl-controller")  # the rollout controller joins agl-runners too, one member per pod
    runner_members += controller["spec"].get("replicas", 1) if controller is not None else 0
    assert runner_members + store_members <= partitions, \
        f"{overlay}: agl-runners has {runner_members} runners + {store_members} store members for {partitions} partitions"
    for hpa in (d for d in docs if d["kind"] == "HorizontalPodAutoscaler"):
        assert hpa["spec"]["scaleTargetRef"]["name"] == "agl-runners"
        assert hpa["spec"]["maxReplicas"] * per_pod + store_members <= partitions, \
            f"{overlay}: HPA can add idle group members"
        selector = hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]["matchLabels"]
        assert selector == {"consumergroup": "agl-runners", "topic": f"{settings(docs)['AGL_TOPIC_PREFIX']}.tasks"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_http_workloads_have_probes_and_services_reach_them(overlay: str) -> None:
    docs = fresh(overlay)
    for doc in workloads(docs):
        if doc["kind"] == "Job":
            continue
        for container in pod_spec(doc)["containers"]:
            if container.get("ports"):
                for probe in ("readinessProbe", "livenessProbe"):
                    assert probe in container, f"{overlay}: {doc['metadata']['name']}/{container['name']} lacks {probe}"
    for service in (d for d in docs if d["kind"] == "Service"):
        selector = service["spec"]["selector"]
        targets = [w for w in workloads(docs)
                   if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert targets, f"{overlay}: Service {service['metadata']['name']} selects no pod"
        port_names = {p.get("name") for w in targets for c in pod_spec(w)["containers"] for p in c.get("ports", [])}
        for port in service["spec"].get("ports", []):
            target = port.get("targetPort", port["port"])
            assert not isinstance(target, str) or target in port_names, \
                f"{overlay}: Service {service['metadata']['name']} targets unknown port {target}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scaled_workloads_have_disruption_budgets(overlay: str) -> None:
    docs = fresh(overlay)
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    for name in ("agl-processors", "agl-runners", "agl-ingest-otlp", "agl-ingest-proxy", STORE_WORKLOAD):
        workload = next(w for w in workloads(docs) if w["metadata"]["name"] == name)
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert any(b["spec"]["selector"]["matchLabels"].items() <= labels.items() for b in budgets), \
            f"{overlay}: no PodDisruptionBudget covers {name}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_agl_pods_run_unprivileged(overlay: str) -> None:
    for doc in workloads(fresh(overlay)):
        spec = pod_spec(doc)
        for container in spec["containers"]:
            if not container["image"].startswith("agl-stream"):
                continue
            where = f"{overlay}: {doc['metadata']['name']}/{container['name']}"
            ctx = {**spec.get("securityContext", {}), **container.get("securityContext", {})}
            assert ctx.get("runAsNonRoot") is True, where
            assert ctx.get("allowPrivilegeEscalation") is False, where
            assert ctx.get("readOnlyRootFilesystem") is True, where
            assert re.fullmatch(r"agl-stream(-cuda)?:\d+\.\d+\.\d+", container["image"]), f"{where}: untagged image"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_let_in_every_agl_service_port(overlay: str) -> None:
    """Default-deny covers agl-stream pods: a Service port no policy opens would be silently closed."""
    docs = fresh(overlay)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]

    def selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
        selector = policy["spec"]["podSelector"]
        if not selector.get("matchLabels", {}).items() <= labels.items():
            return False
        for expression in selector.get("matchExpressions", []):
            assert expression["operator"] == "In", "only In expressions are checked here"
            if labels.get(expression["key"]) not in expression["values"]:
                return False
        return True

    for service in (d for d in docs if d["kind"] == "Service"):
        pods = [w for w in workloads(docs)
                if service["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        for workload in pods:
            labels = workload["spec"]["template"]["metadata"]["labels"]
            if labels.get("app.kubernetes.io/part-of") != "agl-stream":
                continue
            ports = {p["containerPort"]: p.get("name") for c in pod_spec(workload)["containers"] for p in c.get("ports", [])}
            open_ports = {p["port"] for policy in policies if selects(policy, labels)
                          for rule in policy["spec"].get("ingress", []) for p in rule.get("ports", [])}
            for port in service["spec"].get("ports", []):
                target = port.get("targetPort", port["port"])
                number = next((n for n, name in ports.items() if name == target), target)
                assert number in open_ports or target in open_ports, \
                    f"{overlay}: no NetworkPolicy lets traffic into {service['metadata']['name']}:{port['port']}"


def test_store_front_door_is_cluster_internal_and_reads_clickhouse_read_only() -> None:
    """Upstream's clients send no token: the store door is reachable from cluster pods only, with least privilege."""
    docs = fresh("base")
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"
                and d["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name") == STORE_WORKLOAD]
    assert policies, "no NetworkPolicy for the store front door"
    for policy in policies:
        for rule in policy["spec"]["ingress"]:
            assert rule.get("from"), f"{policy['metadata']['name']}: the store door must not take traffic from anywhere"
            assert all("ipBlock" not in peer for peer in rule["from"])
    anywhere = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "agl-ingest-from-anywhere")
    assert STORE_WORKLOAD not in str(anywhere["spec"]["podSelector"])
    store = next(w for w in workloads(docs) if w["metadata"]["name"] == STORE_WORKLOAD)
    secrets = {s["secretRef"]["name"] for c in pod_spec(store)["containers"] for s in c.get("envFrom", []) if "secretRef" in s}
    assert secrets == {"agl-store"}
    env = env_file_keys(K8S / "secrets" / "store.env.example")
    assert env["AGL_CLICKHOUSE_DSN"].split("://")[1].startswith("agl_reader:")
    assert env["AGL_KAFKA_SASL_USERNAME"] == "agl-store"


def test_learner_requests_a_gpu_except_locally() -> None:
    def gpus(overlay: str) -> dict[str, Any]:
        learner = next(w for w in fresh(overlay) if w["metadata"]["name"] == "agl-learner")
        assert learner["kind"] == "StatefulSet" and learner["spec"]["replicas"] == 1
        return pod_spec(learner)["containers"][0]["resources"].get("limits", {})

    assert gpus("base").get("nvidia.com/gpu") == "1"
    assert gpus("overlays/production").get("nvidia.com/gpu") == "1"
    assert "nvidia.com/gpu" not in gpus("overlays/local")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_referenced_configmaps_and_secrets_are_provided(overlay: str) -> None:
    docs = fresh(overlay)
    configmaps = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"} | OUT_OF_BAND_CONFIGMAPS
    script = (K8S / "create-secrets.sh").read_text()
    roles = re.search(r"for role in ([a-z -]+); do", script)
    assert roles, "create-secrets.sh lists the roles it creates"
    secrets = {f"agl-{role}" for role in roles.group(1).split()} | {"agl-kafka-ca"}
    for role in roles.group(1).split():
        assert (K8S / "secrets" / f"{role}.env.example").is_file(), f"no template for Secret agl-{role}"
    for doc in workloads(docs):
        spec = pod_spec(doc)
        refs: list[tuple[str, str]] = []
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                refs += [("ConfigMap", source["configMapRef"]["name"])] if "configMapRef" in source else []
                refs += [("Secret", source["secretRef"]["name"])] if "secretRef" in source else []
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                refs += [("Secret", ref["name"])] if ref else []
        for volume in spec.get("volumes", []):
            refs += [("ConfigMap", volume["configMap"]["name"])] if "configMap" in volume else []
            refs += [("Secret", volume["secret"]["secretName"])] if "secret" in volume else []
        for kind, name in refs:
            known = configmaps if kind == "ConfigMap" else secrets
            assert name in known, f"{overlay}: {doc['metadata']['name']} needs {kind} {name}, which nothing creates"


# ------------------------------------------------------------------------------------ compose


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_file_validates_against_the_compose_spec(name: str) -> None:
    errors = compose_errors(compose(name))
    assert not errors, f"{name}: {errors}"


def test_compose_schema_rejects_a_broken_file() -> None:
    broken = copy.deepcopy(compose("compose.small.yaml"))
    broken["services"]["processors"]["restart_policy"] = "always"
    assert compose_errors(broken)


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_references_resolve(name: str) -> None:
    doc = compose(name)
    services = doc["services"]
    volumes = set(doc.get("volumes", {}))
    for service_name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{service_name} depends on unknown {dependency}"
        for env_file in compose_env_files(service):
            example = COMPOSE / f"{env_file}.example"
            assert env_file.endswith(".env") and example.is_file(), f"{service_name}: no {example.name} template"
        for mount in service.get("volumes", []):
            # ${VAR:-default} resolves to its default: the file used when the variable is unset
            source = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", mount).split(":")[0]
            if source.startswith((".", "/")):
                assert (COMPOSE / source).exists(), f"{service_name}: bind mount {source} does not exist"
            elif not source.startswith("$"):
                assert source in volumes, f"{service_name}: volume {source} is not declared"
        if "build" in service:
            context = (COMPOSE / service["build"]["context"]).resolve()
            assert (context / service["build"]["dockerfile"]).is_file()


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_defaults_respect_partitions(name: str) -> None:
    """Default runner processes (one container) and processors fit the default partition count."""
    services = compose(name)["services"]

    def default(text: str, variable: str) -> int:
        match = re.search(r"\$\{" + variable + r":-(\d+)\}", text)
        assert match, f"{name}: {variable} has no default"
        return int(match.group(1))

    partitions = default(services["processors"]["environment"]["AGL_PARTITIONS"], "AGL_PARTITIONS")
    runner = services["runners"]["command"]
    store = services["ingest-store"]["command"]
    store_members = flag_value(store, "--workers", 1)  # each worker joins agl-runners when it serves dequeues
    assert default(runner[runner.index("--n-runners") + 1], "AGL_N_RUNNERS") + store_members <= partitions
    assert "deploy" not in services["processors"] or services["processors"]["deploy"].get("replicas", 1) <= partitions


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_ports_bind_loopback_by_default(name: str) -> None:
    """Every published port is on 127.0.0.1 unless the operator sets a bind variable."""
    for service_name, service in compose(name)["services"].items():
        for port in service.get("ports", []):
            host = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(port))
            assert host.startswith("127.0.0.1:"), f"{name}: {service_name} publishes {port} beyond loopback"


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_profiles_hold_the_learners_and_inference(name: str) -> None:
    services = compose(name)["services"]
    gpu = {n for n, s in services.items() if "gpu" in s.get("profiles", [])}
    cpu = {n for n, s in services.items() if "cpu" in s.get("profiles", [])}
    assert gpu == {"learner", "vllm", "model-download"}
    assert cpu == {"learner-cpu", "inference-cpu"}
    for service_name in ("learner", "vllm"):
        devices = services[service_name]["deploy"]["resources"]["reservations"]["devices"]
        assert any("gpu" in d["capabilities"] for d in devices)
    assert services["learner"]["build"]["dockerfile"].endswith("Dockerfile.cuda")


def test_compose_files_share_the_agl_services() -> None:
    """The full file differs from the small one only in Kafka: brokers, bootstrap, replication."""
    small, full = compose("compose.small.yaml"), compose("compose.full.yaml")
    brokers = {n for n in full["services"] if n.startswith("kafka-")}
    assert len(brokers) == 3 and "kafka" in small["services"]

    def normalized(doc: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, service in copy.deepcopy(doc["services"]).items():
            if name.startswith("kafka"):
                continue
            env = service.get("environment", {})
            if isinstance(env, dict):
                env.pop("AGL_KAFKA_BOOTSTRAP", None)
                env.pop("AGL_REPLICATION_FACTOR", None)
            for dep in [d for d in service.get("depends_on", {}) if d.startswith("kafka")]:
                del service["depends_on"][dep]
            out[name] = service
        return out

    assert normalized(small) == normalized(full)
    env = full["services"]["processors"]["environment"]
    assert env["AGL_REPLICATION_FACTOR"] == "3"
    assert env["AGL_KAFKA_BOOTSTRAP"] == ",".join(f"{b}:9092" for b in sorted(brokers))
    for broker in brokers:
        assert full["services"]["topics"]["depends_on"][broker]["condition"] == "service_healthy"


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_wires_kafka_sasl_and_clickhouse_credentials(name: str) -> None:
    """Services authenticate to Kafka with the users the broker defines, and to ClickHouse with its role users."""
    services = compose(name)["services"]
    agl_env = env_file_keys(COMPOSE / "agl.env.example")
    kafka_env = env_file_keys(COMPOSE / "kafka.env.example")
    clickhouse_env = env_file_keys(COMPOSE / "clickhouse.env.example")
    for service_name in ("processors", "runners", "ingest-otlp", "ingest-proxy", "ingest-store", "topics", "learner"):
        env = services[service_name]["environment"]
        assert env["AGL_KAFKA_SECURITY_PROTOCOL"].startswith("SASL_")
        assert "agl.env" in compose_env_files(services[service_name])
    user, password = agl_env["AGL_KAFKA_SASL_USERNAME"], agl_env["AGL_KAFKA_SASL_PASSWORD"]
    for listener in ("INTERNAL", "EXTERNAL"):
        assert f'user_{user}="{password}"' in kafka_env[f"KAFKA_LISTENER_NAME_{listener}_PLAIN_SASL_JAAS_CONFIG"]
    users = {u.tag: u.find("password").get("from_env") for u in
             ET.parse(COMPOSE / "clickhouse" / "agl-users.xml").getroot().find("users")}
    migrate_env = env_file_keys(COMPOSE / "clickhouse-migrate.env.example")
    store_env = env_file_keys(COMPOSE / "store.env.example")
    for dsn in (agl_env["AGL_CLICKHOUSE_DSN"], migrate_env["AGL_CLICKHOUSE_DSN"], store_env["AGL_CLICKHOUSE_DSN"]):
        match = re.match(r"https?://([^:]+):([^@]+)@", dsn)
        assert match and match.group(1) in users, dsn
        assert clickhouse_env[users[match.group(1)]] == match.group(2), f"{match.group(1)}'s password differs"
    assert services["clickhouse-migrate"]["env_file"][-1]["path"] == "clickhouse-migrate.env"
    # The store front door reads spans only (agl_reader), and its upstream clients send no token.
    assert services["ingest-store"]["env_file"][-1]["path"] == "store.env"
    assert store_env["AGL_CLICKHOUSE_DSN"].split("://")[1].startswith("agl_reader:")
    assert store_env["AGL_INGEST_TOKEN"] == ""


def test_clickhouse_users_match_between_compose_and_k8s() -> None:
    def grants(root: ET.Element) -> dict[str, list[str]]:
        return {u.tag: [q.text or "" for q in u.iter("query")] for u in root.find("users")}

    compose_users = ET.parse(COMPOSE / "clickhouse" / "agl-users.xml").getroot()
    configmap = next(d for d in load_all(K8S / "overlays" / "local" / "clickhouse.yaml") if d["kind"] == "ConfigMap")
    k8s_users = ET.fromstring(configmap["data"]["agl-users.xml"].encode())
    assert grants(compose_users) == grants(k8s_users)
    assert set(grants(compose_users)) == {"agl_migrator", "agl_writer", "agl_reader"}


def trainer_configs() -> list[tuple[str, str, set[str]]]:
    """(where, trainer.yaml text, hosts that exist there) for compose and every overlay."""
    configs = []
    for name in COMPOSE_FILES:
        hosts = set(compose(name)["services"])
        configs += [(f"{name}:{f}", (COMPOSE / f).read_text(), hosts) for f in ("trainer.yaml", "trainer-cpu.yaml")]
    for overlay in OVERLAYS:
        docs = fresh(overlay)
        hosts = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
        configmap = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "agl-trainer-config")
        configs.append((overlay, configmap["data"]["trainer.yaml"], hosts))
    return configs


def test_trainer_configs_are_valid_and_reach_their_engine() -> None:
    """The shipped trainer.yaml files load in the real TrainerConfig and attach to a server that exists."""
    from agl_stream_trainer.config import TrainerConfig

    for where, text, hosts in trainer_configs():
        config = TrainerConfig.model_validate(yaml.safe_load(text))
        assert config.engine.attach_url, f"{where}: the learner should publish to the inference service"
        host = re.match(r"https?://([^:/]+)", config.engine.attach_url)
        assert host and host.group(1) in hosts, f"{where}: {config.engine.attach_url} names no service"
        assert config.engine.model_name == "policy", f"{where}: the proxy forwards to the model named policy"
        if config.scheduler and config.scheduler.dataset:
            assert (ROOT / config.scheduler.dataset).is_file(), f"{where}: no dataset {config.scheduler.dataset}"


# ------------------------------------------------------------------------------------ Grafana wiring


def grafana_provisioning() -> tuple[list[Path], list[Path]]:
    return (sorted((GRAFANA / "provisioning" / "datasources").glob("*.y*ml")),
            sorted((GRAFANA / "provisioning" / "dashboards").glob("*.y*ml")))


def test_grafana_gets_what_its_provisioning_reads() -> None:
    datasources, providers = grafana_provisioning()
    if not datasources or not providers:
        pytest.skip("deploy/grafana/provisioning has no datasource or dashboard provider yet")
    wanted = {v for p in datasources for v in re.findall(r"\$\{?([A-Z][A-Z0-9_]*)\}?", p.read_text())}
    paths = {p["options"]["path"] for f in providers for p in yaml.safe_load(f.read_text())["providers"]}

    for name in COMPOSE_FILES:
        grafana = compose(name)["services"]["grafana"]
        given = set(grafana["environment"])
        for env_file in compose_env_files(grafana):
            given |= set(env_file_keys(COMPOSE / f"{env_file}.example"))
        assert wanted <= given, f"{name}: grafana lacks {sorted(wanted - given)}"
        mounts = {m.split(":")[1] for m in grafana["volumes"] if m.startswith("../grafana/dashboards")}
        assert paths <= mounts, f"{name}: dashboards are mounted at {mounts}, the provider reads {paths}"

    grafana = next(w for w in fresh("overlays/local") if w["metadata"]["name"] == "grafana")
    container = pod_spec(grafana)["containers"][0]
    given = {e["name"] for e in container["env"]} | set(env_file_keys(K8S / "secrets" / "grafana.env.example"))
    assert wanted <= given, f"k8s grafana lacks {sorted(wanted - given)}"
    assert paths <= {m["mountPath"] for m in container["volumeMounts"]}


# ------------------------------------------------------------------------------------ the CLI


def test_commands_and_flags_exist_in_the_cli() -> None:
    """Every ``agl-stream`` command line in compose and k8s names a real sub-command and real flags."""
    import click
    import typer

    from agl_stream.cli import main as cli

    app = typer.Typer()
    cli._register(app)
    root = typer.main.get_command(app)
    problems = []
    for where, line in agl_command_lines():
        command: Any = root
        tokens = line[1:]
        while hasattr(command, "list_commands") and tokens and not tokens[0].startswith("-"):
            name, tokens = tokens[0], tokens[1:]
            sub = command.get_command(click.Context(command), name)
            if sub is None:
                problems.append(f"{where}: 'agl-stream ... {name}' is not a command")
                break
            command = sub
        else:
            flags = {o for p in command.params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
            for token in tokens:
                if token == "--":  # what follows is another program's command line (the controller's agent)
                    break
                if token.startswith("--") and token.split("=", 1)[0] not in flags:
                    problems.append(f"{where}: {' '.join(line[:3])} has no option {token}")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------------ images


def makefile_targets() -> dict[str, list[str]]:
    targets: dict[str, list[str]] = {}
    for line in (ROOT / "Makefile").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.$()/-]+)\s*:(?!=)\s*(.*)$", line)
        if match and not match.group(1).startswith("."):
            targets[match.group(1)] = match.group(2).split()
    return targets


def readme_make_targets() -> set[str]:
    """Targets the README tells users to run, plus everything those depend on."""
    targets = makefile_targets()
    todo = set(re.findall(r"\bmake ([a-z][a-z0-9_-]*)", (ROOT / "README.md").read_text()))
    seen: set[str] = set()
    while todo:
        target = todo.pop()
        if target in seen:
            continue
        seen.add(target)
        todo |= {t for t in targets.get(target, []) if t in targets}
    return seen


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, rest = line.partition(" ")
            out.append((instruction.upper(), rest.strip()))
    return out


DOCKERFILES = sorted(p for p in DOCKER.glob("Dockerfile*") if not p.name.endswith(".dockerignore"))


def test_there_are_cpu_and_cuda_dockerfiles() -> None:
    assert {p.name for p in DOCKERFILES} == {"Dockerfile", "Dockerfile.cuda"}
    assert "nvidia/cuda" in (DOCKER / "Dockerfile.cuda").read_text()


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_installs_with_the_readme_make_targets(path: Path) -> None:
    instructions = dockerfile_instructions(path)
    runs = [rest for instruction, rest in instructions if instruction == "RUN"]
    make_calls = [m for run in runs for m in re.findall(r"(?:^|&&|;|\|\|)\s*make\s+([a-z][a-z0-9_-]*)", run)]
    assert make_calls, f"{path.name} does not install through make"
    targets, documented = makefile_targets(), readme_make_targets()
    for target in make_calls:
        assert target in targets, f"{path.name}: make {target} is not a Makefile target"
        assert target in documented, f"{path.name}: make {target} is not a step of the README's make commands"
    for run in runs:
        assert not re.search(r"\b(pip|pip3|uv)\b[^&;|]*\binstall\b", run), f"{path.name}: installs outside make: {run}"


def packaged_folders() -> list[str]:
    """The repository folders setup.py installs (its ``FOLDERS`` mapping, read without running setup())."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FOLDERS" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no FOLDERS mapping")


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_is_multistage_unprivileged_and_health_checked(path: Path) -> None:
    instructions = dockerfile_instructions(path)
    stages = [rest for instruction, rest in instructions if instruction == "FROM"]
    assert len(stages) >= 2, f"{path.name} is not multi-stage"
    users = [rest for instruction, rest in instructions if instruction == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), f"{path.name} runs as root"
    assert any(instruction == "HEALTHCHECK" for instruction, _ in instructions)
    packages = ["agl_stream", *packaged_folders()]
    copied = set()
    for instruction, rest in instructions:
        if instruction == "COPY" and "--from" not in rest:
            *sources, _destination = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), f"{path.name}: COPY {source} does not exist"
                copied.add(source.rstrip("/"))
    assert set(packages) <= copied, f"{path.name} misses packages {set(packages) - copied}"
    for needed in ("Makefile", "pyproject.toml", "setup.py", "README.md", "requirements"):
        assert needed in copied, f"{path.name}: make setup needs {needed}"


def test_healthcheck_script_checks_the_url() -> None:
    script = DOCKER / "healthcheck.py"
    ok = subprocess.run(["python3", str(script)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, timeout=30)
    assert ok.returncode == 0
    env = {"PATH": "/usr/bin:/bin", "AGL_HEALTH_URL": "http://127.0.0.1:9/health", "AGL_HEALTH_TIMEOUT": "1"}
    bad = subprocess.run(["python3", str(script)], env=env, capture_output=True, timeout=30)
    assert bad.returncode == 1 and b"unhealthy" in bad.stderr


# ------------------------------------------------------------------------------------ secrets


def test_only_env_templates_are_committable() -> None:
    for folder in (COMPOSE, K8S / "secrets"):
        ignore = (folder / ".gitignore").read_text().split()
        assert "*.env" in ignore and "!*.env.example" in ignore, f"{rel(folder)}/.gitignore must keep .env files out"
    for path in (DOCKER / "Dockerfile.dockerignore", DOCKER / "Dockerfile.cuda.dockerignore"):
        assert "**/.venv" in path.read_text().split(), f"{path.name} must keep a local .venv out of the image"


def env_templates() -> list[Path]:
    return sorted(DEPLOY.rglob("*.env.example"))


@pytest.mark.parametrize("path", env_templates(), ids=rel)
def test_env_templates_hold_no_secret_values(path: Path) -> None:
    for name, value in env_file_keys(path).items():
        if SECRET_NAME.search(name):
            secrets = re.findall(r'(?:password|user_[a-z0-9_-]+)="([^"]*)"', value) if "JAAS" in name else [value]
            for secret in secrets:
                assert secret == "" or PLACEHOLDER.match(secret), f"{rel(path)}: {name} holds a value"
        for password in re.findall(r"://[^:/@\s]+:([^@\s]+)@", value):
            assert PLACEHOLDER.match(password), f"{rel(path)}: {name} embeds a password"


def committable_files() -> list[Path]:
    files = [*DOCKER.iterdir(), *COMPOSE.rglob("*"), *K8S.rglob("*")]
    return sorted(p for p in files if p.is_file() and not p.name.endswith(".env"))


def test_no_secret_values_in_manifests() -> None:
    problems = []
    for path in committable_files():
        text = path.read_text()
        for password in re.findall(r"://[^:/@\s$]+:([^@\s]+)@", text):
            if not PLACEHOLDER.match(password):
                problems.append(f"{rel(path)}: credentials in a URL")
        if path.suffix in (".yaml", ".yml"):
            for doc in load_all(path):
                if isinstance(doc, dict) and doc.get("kind") == "Secret" and (doc.get("data") or doc.get("stringData")):
                    problems.append(f"{rel(path)}: Secret {doc['metadata']['name']} carries values")
                problems += [f"{rel(path)}: {n} set inline" for n in _inline_secret_env(doc)]
        if path.name.startswith("Dockerfile") and not path.name.endswith(".dockerignore"):
            for instruction, rest in dockerfile_instructions(path):
                names = re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", rest) if instruction in ("ENV", "ARG") else []
                problems += [f"{rel(path)}: {instruction} {n}" for n in names if SECRET_NAME.search(n)]
    assert not problems, "\n".join(problems)


def _inline_secret_env(node: Any) -> Iterator[str]:
    """Names of secret-looking variables given a literal value (compose maps or k8s env lists)."""
    if isinstance(node, dict):
        if isinstance(node.get("name"), str) and "value" in node and SECRET_NAME.search(node["name"]):
            yield node["name"]
        env = node.get("environment")
        if isinstance(env, dict):
            yield from (k for k, v in env.items() if SECRET_NAME.search(k) and v not in (None, ""))
        for value in node.values():
            yield from _inline_secret_env(value)
    elif isinstance(node, list):
        for value in node:
            yield from _inline_secret_env(value)
