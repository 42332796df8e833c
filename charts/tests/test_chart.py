"""The Helm chart: helm lint and helm template with every value set in charts/lachesis/ci,
each rendered object checked against the Kubernetes API's schemas, and what the objects
say (replicas, probes, secrets, privileges, per-host agents) checked for each set."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from helm import CHART, KUBE_VERSION, Helm
from manifests import InvalidManifest, validate_manifest
from values_doc import readme_with_table

CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
EMBEDDED = CHART / "ci/embedded-redis-values.yaml"
EXTERNAL = CHART / "ci/external-values.yaml"
NO_INGRESS = CHART / "ci/no-ingress-values.yaml"
MONITORING = CHART / "ci/monitoring-values.yaml"


def test_the_ci_value_sets_are_there() -> None:
    assert {EMBEDDED, EXTERNAL, NO_INGRESS, MONITORING} <= set(CI_VALUES)


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name: str) -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def containers(doc: dict) -> list[dict]:
    spec = doc["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def workloads(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["kind"] in {"Deployment", "DaemonSet", "StatefulSet"}]


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.stem)
def test_lint_passes(helm: Helm, values: Path) -> None:
    result = helm.run("lint", values)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.stem)
def test_every_rendered_object_validates(helm: Helm, values: Path) -> None:
    docs = helm.render(values)
    assert docs
    for doc in docs:
        validate_manifest(doc, KUBE_VERSION)


def test_the_validator_refuses_what_kubernetes_would() -> None:
    """The check above proves something only if a wrong object fails it."""
    bad_type = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {"replicas": "two", "selector": {}, "template": {}},
    }
    with pytest.raises(InvalidManifest, match=r"Deployment/x: spec.replicas: 'two' is not of type 'integer'"):
        validate_manifest(bad_type, KUBE_VERSION)
    unknown_field = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80}], "selektor": {}},
    }
    with pytest.raises(InvalidManifest, match=r"Service/s: spec: .*'selektor'"):
        validate_manifest(unknown_field, KUBE_VERSION)
    with pytest.raises(InvalidManifest, match=r"Widget/w: no schema"):
        validate_manifest({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}, KUBE_VERSION)
    bad_monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "m"},
        "spec": {"selector": {}, "endpoints": [{"port": "http", "interval": "soon"}]},
    }
    with pytest.raises(InvalidManifest, match=r"ServiceMonitor/m: spec.endpoints.0.interval"):
        validate_manifest(bad_monitor, KUBE_VERSION)


def test_controller_replicas_probes_and_secrets(helm: Helm) -> None:
    docs = helm.render(EMBEDDED)
    deployment = one(docs, "Deployment", "lachesis-controller")
    assert deployment["spec"]["replicas"] == 2
    [controller] = containers(deployment)
    assert controller["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert controller["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    env = env_of(controller)
    # Credentials only by reference, to the Secret the chart made from the inline values.
    secret = one(docs, "Secret", "lachesis-controller")
    assert env["LACHESIS_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "lachesis-controller",
        "key": "database-url",
    }
    assert env["LACHESIS_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "lachesis-controller", "key": "api-token"}
    assert secret["stringData"] == {
        "database-url": "postgresql+psycopg://lachesis:secret@postgres.db.svc:5432/lachesis",
        "api-token": "ci-bootstrap-token",
    }
    assert "value" not in env["LACHESIS_DATABASE_URL"] and "value" not in env["LACHESIS_API_TOKEN"]
    assert env["LACHESIS_BIND"]["value"] == "0.0.0.0:8080"
    # Several replicas: each its own name (the pod's), one lease interval.
    assert env["LACHESIS_REPLICA_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["LACHESIS_LEASE_INTERVAL_S"]["value"] == "1"
    # Every other setting from values, as the controller's config.py reads it.
    assert env["LACHESIS_ROLLOUT_TIMEOUT_S"]["value"] == "30"
    assert env["LACHESIS_MAX_BODY_BYTES"]["value"] == "1048576"
    assert env["LACHESIS_ALLOCATION_GAIN"]["value"] == "0.01"
    assert env["LACHESIS_OTEL_CONSOLE"]["value"] == "0"
    budget = one(docs, "PodDisruptionBudget", "lachesis-controller")
    assert budget["spec"]["minAvailable"] == 1


# Controller settings the chart deliberately does not set: the API open to anyone is for a
# developer's machine, never a cluster.
NOT_FROM_THE_CHART = {"LACHESIS_INSECURE_NO_AUTH"}


def test_every_controller_setting_reaches_the_controller_from_values(helm: Helm) -> None:
    """config.py is where every LACHESIS_* setting is read; a new one fails here until the
    chart sets it (or it is listed above with the reason)."""
    config = (CHART.parents[1] / "controller/src/lachesis_controller/config.py").read_text()
    settings = set(re.findall(r'"(LACHESIS_[A-Z0-9_]+)"', config))
    assert "LACHESIS_ROLLOUT_TIMEOUT_S" in settings
    set_everything = (
        "controller.settings.endpointRoots={/srv}",
        "controller.settings.uiDir=/ui",
        "controller.settings.devsim=/usr/bin/lachesis-devsim",
    )
    env = env_of(containers(one(helm.render(EXTERNAL, sets=set_everything), "Deployment", "lachesis-controller"))[0])
    assert settings - NOT_FROM_THE_CHART - set(env) == set()


def test_every_agent_variable_reaches_the_agent_from_values(helm: Helm) -> None:
    """Each `lachesis-agent` flag that has an environment variable (cli.rs for `run`, main.rs
    for `top`) is set by the chart under some values (eBPF on or off, forwarding, endpoint
    roots)."""
    sources = [CHART.parents[1] / "agents/agent/src" / f for f in ("cli.rs", "main.rs")]
    variables = {v for f in sources for v in re.findall(r'env = "(LACHESIS_[A-Z0-9_]+)"', f.read_text())}
    assert "LACHESIS_HOST_ID" in variables
    seen: set[str] = set()
    for ebpf in ("true", "false"):
        docs = helm.render(EXTERNAL, sets=(f"agent.ebpf={ebpf}", "agent.endpointRoots={/srv}", "agent.servePort=7070"))
        for daemonset in by_kind(docs, "DaemonSet"):
            seen |= set(env_of(containers(daemonset)[0]))
    assert variables - seen == set()


def test_the_key_value_front_end_listens_on_kv_port_unless_it_is_0(helm: Helm) -> None:
    for port, listen in ((11311, "0.0.0.0:11311"), (11400, "0.0.0.0:11400"), (0, None)):
        (daemonset, *_) = by_kind(helm.render(EXTERNAL, sets=(f"agent.kvPort={port}",)), "DaemonSet")
        (agent, *_) = containers(daemonset)
        assert env_of(agent).get("LACHESIS_AGENT_KV_LISTEN", {}).get("value") == listen
        exposed = {p["name"]: p["containerPort"] for p in agent["ports"]}
        assert exposed.get("memcached") == (port or None)


def test_the_forwarding_server_listens_on_serve_port_over_its_node_directory_unless_it_is_0(helm: Helm) -> None:
    for port, listen in ((7070, "0.0.0.0:7070"), (0, None)):
        (daemonset, *_) = by_kind(helm.render(EXTERNAL, sets=(f"agent.servePort={port}",)), "DaemonSet")
        (agent, *_) = containers(daemonset)
        env = env_of(agent)
        assert env.get("LACHESIS_AGENT_SERVE_LISTEN", {}).get("value") == listen
        assert env.get("LACHESIS_AGENT_SERVE_ROOT", {}).get("value") == ("/var/lib/lachesis/serve" if port else None)
        assert {p["name"]: p["containerPort"] for p in agent["ports"]}.get("forwarding") == (port or None)
        volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
        assert ("serve-root" in volumes) == bool(port)


def test_existing_secrets_are_used_and_none_is_made(helm: Helm) -> None:
    docs = helm.render(EXTERNAL)
    deployment = one(docs, "Deployment", "lachesis-controller")
    assert deployment["spec"]["replicas"] == 3
    env = env_of(containers(deployment)[0])
    assert env["LACHESIS_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "lachesis-postgres", "key": "url"}
    assert env["LACHESIS_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "lachesis-admin", "key": "api-token"}
    assert env["LACHESIS_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "lachesis-redis", "key": "redis-url"}
    assert env["LACHESIS_ROLLOUT_TIMEOUT_S"]["value"] == "60"
    assert env["LACHESIS_ENDPOINT_ROOTS"]["value"] == "/srv/endpoints:/var/lib/lachesis/data"
    assert env["OTEL_RESOURCE_ATTRIBUTES"]["value"] == "deployment.environment=ci"
    assert by_kind(docs, "Secret") == []
    # External Redis: nothing of Redis is deployed.
    assert by_kind(docs, "StatefulSet") == []
    assert [c["metadata"]["name"] for c in by_kind(docs, "ConfigMap")] in ([], ["lachesis-grafana-dashboard"])


def test_an_inline_external_redis_url_goes_into_the_chart_secret(helm: Helm) -> None:
    url = "redis://lachesis-controller:pw@redis.example:6379/0"
    docs = helm.render(EMBEDDED, sets=("redis.external.enabled=true", f"redis.external.url={url}"))
    assert one(docs, "Secret", "lachesis-controller")["stringData"]["redis-url"] == url
    env = env_of(containers(one(docs, "Deployment", "lachesis-controller"))[0])
    assert env["LACHESIS_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "lachesis-controller", "key": "redis-url"}
    assert "LACHESIS_REDIS_PASSWORD" not in env
    assert by_kind(docs, "StatefulSet") == []


def test_embedded_redis_has_persistence_a_password_and_acl_users(helm: Helm) -> None:
    docs = helm.render(EMBEDDED)
    redis = one(docs, "StatefulSet", "lachesis-redis")
    [claim] = redis["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    [container] = containers(redis)
    script = container["args"][0]
    assert "user default off" in script and "user %s on >%s ~* &* +@all" in script
    assert "user probe on >%s -@all +ping" in script
    passwords = one(docs, "Secret", "lachesis-redis")["data"]
    assert set(passwords) == {"controller-password", "probe-password"}
    config = one(docs, "ConfigMap", "lachesis-redis")["data"]["redis.conf"]
    assert "appendonly yes" in config and "include /run/redis/users.conf" in config
    # The controller connects as its ACL user, with the password from that Secret.
    env = env_of(containers(one(docs, "Deployment", "lachesis-controller"))[0])
    assert env["LACHESIS_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "lachesis-redis",
        "key": "controller-password",
    }
    assert env["LACHESIS_REDIS_URL"]["value"] == (
        "redis://lachesis-controller:$(LACHESIS_REDIS_PASSWORD)@lachesis-redis.storage.svc:6379/0"
    )
    # Declared before the URL that refers to it, or the kubelet leaves $(...) as it is.
    names = [e["name"] for e in containers(one(docs, "Deployment", "lachesis-controller"))[0]["env"]]
    assert names.index("LACHESIS_REDIS_PASSWORD") < names.index("LACHESIS_REDIS_URL")


def test_redis_without_persistence_keeps_its_data_in_an_empty_dir(helm: Helm) -> None:
    redis = one(helm.render(NO_INGRESS), "StatefulSet", "lachesis-redis")
    assert "volumeClaimTemplates" not in redis["spec"]
    volumes = {v["name"]: v for v in redis["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "emptyDir": {}}


def test_one_agent_daemonset_per_host_reading_only_its_enrolment_secret(helm: Helm) -> None:
    docs = helm.render(EMBEDDED)
    daemonsets = {d["metadata"]["name"]: d for d in by_kind(docs, "DaemonSet")}
    assert set(daemonsets) == {"lachesis-agent-node-a", "lachesis-agent-node-b"}
    for host in ("node-a", "node-b"):
        pod = daemonsets[f"lachesis-agent-{host}"]["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"kubernetes.io/hostname": host}
        [agent] = pod["containers"]
        env = env_of(agent)
        assert env["LACHESIS_HOST_ID"]["value"] == host
        assert env["LACHESIS_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
            "name": f"lachesis-agent-{host}",
            "key": "redis-url",
        }
        assert env["LACHESIS_AGENT_METRICS_LISTEN"]["value"] == "0.0.0.0:9464"
        assert {"name": "metrics", "containerPort": 9464, "protocol": "TCP"} in agent["ports"]
        # No API token in any pod: nothing calls the Kubernetes API.
        assert pod["automountServiceAccountToken"] is False
    external = helm.render(EXTERNAL)
    [daemonset] = by_kind(external, "DaemonSet")
    env = env_of(containers(daemonset)[0])
    assert (
        env["LACHESIS_REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == "lachesis-enroll-storage-1.example.internal"
    )


def test_agent_devices_mounts_and_host_paths(helm: Helm) -> None:
    [daemonset] = by_kind(helm.render(EXTERNAL), "DaemonSet")
    [agent] = containers(daemonset)
    assert agent["args"] == [
        "run",
        "--heartbeat-interval-ms=5000",
        "--device=flash0=/var/lib/lachesis/devices/flash0/flash0.img:8GiB",
        "--device=nvme1=uring:/dev/lachesis/nvme1:100GiB",
        "--mount=/var/lib/lachesis/data:/var/lib/lachesis/mnt",
    ]
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    assert volumes["device-flash0"]["hostPath"] == {"path": "/var/lib/lachesis", "type": "DirectoryOrCreate"}
    assert volumes["device-nvme1"]["persistentVolumeClaim"] == {"claimName": "lachesis-nvme1"}
    assert agent["volumeDevices"] == [{"name": "device-nvme1", "devicePath": "/dev/lachesis/nvme1"}]
    assert volumes["dev-fuse"]["hostPath"] == {"path": "/dev/fuse", "type": "CharDevice"}
    assert volumes["bpffs"]["hostPath"]["path"] == "/sys/fs/bpf"
    assert volumes["cgroup"]["hostPath"]["path"] == "/sys/fs/cgroup"
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    assert mounts["cgroup"]["readOnly"] is True
    assert mounts["forward-key"]["mountPath"] == "/etc/lachesis/forward-key"
    assert env_of(agent)["LACHESIS_FORWARD_KEY_FILE"]["value"] == "/etc/lachesis/forward-key/key"


@pytest.mark.parametrize("values", [EMBEDDED, EXTERNAL, NO_INGRESS], ids=lambda p: p.stem)
def test_no_container_is_privileged_unless_a_value_says_so(helm: Helm, values: Path) -> None:
    for workload in workloads(helm.render(values)):
        for container in containers(workload):
            context = container.get("securityContext", {})
            assert context.get("privileged", False) is False, f"{workload['metadata']['name']}/{container['name']}"


def test_the_agent_gets_the_capabilities_it_needs_and_no_more(helm: Helm) -> None:
    [daemonset, _] = by_kind(helm.render(EMBEDDED), "DaemonSet")
    context = containers(daemonset)[0]["securityContext"]
    assert context["capabilities"]["drop"] == ["ALL"]
    assert context["capabilities"]["add"] == [
        "SYS_ADMIN",
        "BPF",
        "PERFMON",
        "SYS_RESOURCE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
    ]
    assert context["appArmorProfile"] == {"type": "Unconfined"}
    # The other workloads run as non-root with nothing added.
    docs = helm.render(EMBEDDED)
    for name, kind in (("lachesis-controller", "Deployment"), ("lachesis-redis", "StatefulSet")):
        workload = one(docs, kind, name)
        assert workload["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
        for container in containers(workload):
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_without_ebpf_the_agent_has_no_bpf_capability_nor_mount(helm: Helm) -> None:
    [daemonset] = by_kind(helm.render(NO_INGRESS, sets=("agent.hosts={h1}",)), "DaemonSet")
    [agent] = containers(daemonset)
    assert not {"BPF", "PERFMON", "SYS_RESOURCE"} & set(agent["securityContext"]["capabilities"]["add"])
    assert {"bpffs", "cgroup"}.isdisjoint(m["name"] for m in agent["volumeMounts"])
    assert env_of(agent)["LACHESIS_NO_EBPF"]["value"] == "1"


def test_privileged_only_when_asked_and_then_the_mount_propagates(helm: Helm) -> None:
    docs = helm.render(MONITORING)
    privileged = [
        (w["metadata"]["name"], c["name"])
        for w in workloads(docs)
        for c in containers(w)
        if c.get("securityContext", {}).get("privileged")
    ]
    assert privileged == [("lachesis-agent-node-a", "agent")]
    [agent] = containers(one(docs, "DaemonSet", "lachesis-agent-node-a"))
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    assert mounts["/srv/lachesis"]["mountPropagation"] == "Bidirectional"
    # /dev/fuse from the device plugin's resource instead of a hostPath.
    assert agent["resources"]["limits"]["smarter-devices/fuse"] == 1
    assert "dev-fuse" not in {m["name"] for m in agent["volumeMounts"]}


def test_ingress_only_when_enabled_and_it_reaches_the_controller(helm: Helm) -> None:
    [ingress] = by_kind(helm.render(EMBEDDED), "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["lachesis.ci.example"], "secretName": "lachesis-tls"}]
    [path] = ingress["spec"]["rules"][0]["http"]["paths"]
    assert path["backend"]["service"] == {"name": "lachesis-controller", "port": {"name": "http"}}
    for values in (EXTERNAL, NO_INGRESS, MONITORING):
        assert by_kind(helm.render(values), "Ingress") == []


def test_service_monitors_only_when_enabled_and_they_select_the_services(helm: Helm) -> None:
    for values in (EMBEDDED, EXTERNAL, NO_INGRESS):
        assert by_kind(helm.render(values), "ServiceMonitor") == []
    docs = helm.render(MONITORING)
    monitors = {m["metadata"]["name"]: m for m in by_kind(docs, "ServiceMonitor")}
    assert set(monitors) == {"lachesis-controller", "lachesis-agent"}
    services = {
        "lachesis-controller": one(docs, "Service", "lachesis-controller"),
        "lachesis-agent": one(docs, "Service", "lachesis-agent-metrics"),
    }
    for name, monitor in monitors.items():
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
        service = services[name]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        [endpoint] = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert one(docs, "Service", "lachesis-agent-metrics")["spec"]["ports"][0]["port"] == 9464
    # Traces: the standard OTLP variables on the controller and the agent.
    for workload in workloads(docs):
        env = env_of(containers(workload)[0])
        if workload["kind"] in {"Deployment", "DaemonSet"}:
            assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == "http://otel-collector.observability.svc:4318"
            assert env["OTEL_EXPORTER_OTLP_PROTOCOL"]["value"] == "http/protobuf"


def test_grafana_dashboard_config_map_follows_the_file(helm: Helm, tmp_path: Path) -> None:
    chart = tmp_path / "lachesis"
    shutil.copytree(CHART, chart)
    dashboard = chart / "files/grafana-agent-dashboard.json"
    dashboard.unlink(missing_ok=True)
    copy = Helm(helm.binary, chart)
    assert by_kind(copy.render(EMBEDDED), "ConfigMap") == [one(copy.render(EMBEDDED), "ConfigMap", "lachesis-redis")]
    dashboard.write_text('{"title": "Lachesis agents", "panels": []}\n')
    config_map = one(copy.render(EMBEDDED), "ConfigMap", "lachesis-grafana-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["data"]["lachesis-agent.json"] == '{"title": "Lachesis agents", "panels": []}'


def test_every_value_is_documented_and_in_the_schema() -> None:
    import json

    import yaml

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(value: object, node: dict, path: str) -> None:
        assert "description" in node or path == "", f"{path}: no description in values.schema.json"
        if isinstance(value, dict) and node.get("type") == "object" and "properties" in node:
            for key, child in value.items():
                assert key in node["properties"], f"{path}.{key}: not in values.schema.json"
                walk(child, node["properties"][key], f"{path}.{key}")

    walk(values, schema, "")
    assert undocumented_keys((CHART / "values.yaml").read_text()) == []


# Maps whose keys are Kubernetes' or the user's own (resources, labels, ...), not the chart's.
FREE_FORM = {
    "resources",
    "requests",
    "limits",
    "labels",
    "annotations",
    "podAnnotations",
    "podLabels",
    "nodeSelector",
    "affinity",
    "appArmorProfile",
    "seccompProfile",
}


def undocumented_keys(text: str) -> list[str]:
    """values.yaml keys without a comment on the line above (free-form maps' keys aside)."""
    missing, parents = [], []  # parents: (indent, key) of the keys enclosing this line
    lines = text.splitlines()
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)(- )?([A-Za-z_][\w.-]*):", line)
        if not match:
            continue
        indent = len(match.group(1)) + len(match.group(2) or "")
        while parents and parents[-1][0] >= indent:
            parents.pop()
        previous = next((l.strip() for l in reversed(lines[:number]) if l.strip()), "")
        commented = previous.startswith("#") or previous.startswith("- #")
        if not commented and not (parents and parents[-1][1] in FREE_FORM):
            missing.append(f"line {number + 1}: {line.strip()}")
        parents.append((indent, match.group(3)))
    return missing


def test_the_readme_values_table_is_made_from_values_yaml() -> None:
    readme = (CHART / "README.md").read_text()
    assert readme == readme_with_table(readme, (CHART / "values.yaml").read_text()), (
        "charts/lachesis/README.md's values table is stale: run .lachesis/venv/bin/python charts/tests/values_doc.py"
    )
    assert '| `agent.devices[0].size` | `"1GiB"` |' in readme


def test_the_documentation_check_finds_an_undocumented_key() -> None:
    assert undocumented_keys("# -- a\na: 1\nb: 2\nresources:\n  limits: {}\n") == ["line 3: b: 2", "line 4: resources:"]


# Value sets that helm refuses, with what its error must say: (--set assignments on top of a
# valid set, message). The first are values.schema.json's, which `helm lint` reports too;
# the others are the templates' checks of values against each other (lachesis.checks and the
# secret references), which `helm template` and `helm install` report (`helm lint` only logs a
# template's `fail`).
SCHEMA_BROKEN = [
    (("controller.replicas=0",), "at '/controller/replicas': minimum: got 0, want 1"),
    (("controller.replica=3",), "additional properties 'replica' not allowed"),
    (("agent.hosts={Node_A}",), "at '/agent/hosts/0': 'Node_A' does not match pattern"),
    (
        ("agent.devices[0].name=flash0", "agent.devices[0].size=lots"),
        "at '/agent/devices/0/size': 'lots' does not match pattern",
    ),
    (
        ("agent.mounts[0].backing=data", "agent.mounts[0].mountpoint=/mnt", "agent.mounts[0].propagation=None"),
        "at '/agent/mounts/0/backing': 'data' does not match pattern '^/'",
    ),
]
TEMPLATE_BROKEN = [
    (
        ("controller.database.url=",),
        "controller.database: set controller.database.existingSecret (the name of a Secret holding it) or controller.database.url",
    ),
    (("controller.auth.apiToken=",), "controller.auth: set controller.auth.existingSecret"),
    (
        ("agent.mounts[0].backing=/a", "agent.mounts[0].mountpoint=/b", "agent.mounts[0].propagation=Bidirectional"),
        "agent.mounts[0].propagation: Bidirectional mount propagation needs agent.privileged=true",
    ),
    (
        ("controller.database.url=sqlite:///tmp/l.db",),
        "controller.database.url: SQLite cannot be shared by several controllers",
    ),
    (("redis.external.enabled=true",), "redis.external: set redis.external.existingSecret"),
]


def message_id(value: object) -> str | None:
    return value if isinstance(value, str) else None


@pytest.mark.parametrize(("sets", "message"), SCHEMA_BROKEN + TEMPLATE_BROKEN, ids=message_id)
def test_a_broken_value_set_fails_to_render_naming_the_value(helm: Helm, sets: tuple[str, ...], message: str) -> None:
    result = helm.run("template", EMBEDDED, sets=sets)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(("sets", "message"), SCHEMA_BROKEN, ids=message_id)
def test_a_value_against_the_schema_fails_lint(helm: Helm, sets: tuple[str, ...], message: str) -> None:
    result = helm.run("lint", EMBEDDED, sets=sets)
    assert result.returncode != 0
    assert message in result.stdout, result.stdout
