"""The agent's Prometheus endpoint end to end: an agent started as `./lachesis up` starts it
(`LACHESIS_AGENT_METRICS_LISTEN`, a data path with a measuring flash device, eBPF attached)
serves `/metrics` in the OpenMetrics format (parsed by `prometheus_client`'s strict parser),
and for the same tenant, stage and device the values equal what the controller serves from the
agent's telemetry: per-tenant IO of a cgroup tenant, a cache stage's counters under IO through
the mount, the device's host and media bytes, and the generation the controller saw acked.
Needs root, kernel BTF and a cgroup2 mount (as `test_telemetry.py`; CI fails without them)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from conftest import HOST, Cluster, free_port, start_with_datapath, wait_for
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from test_telemetry import BLOCK, BLOCKS, ebpf_host, in_cgroup  # noqa: F401 (ebpf_host: a fixture)

STAGE = "cache/dd"


def scrape(addr: str) -> dict[tuple[str, frozenset], float]:
    """(sample name, labels) -> value of one scrape."""
    r = httpx.get(f"http://{addr}/metrics", timeout=5)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/openmetrics-text"), r.headers
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float | None:
    want = {("host", HOST), *labels.items()}
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


@pytest.fixture
def metrics_agent(monkeypatch: pytest.MonkeyPatch, ebpf_host: tuple[Path, Path], cluster: Cluster):  # noqa: F811
    """The agent with a data path, eBPF pinned into the test's bpffs, reporting every 300 ms and
    serving metrics where LACHESIS_AGENT_METRICS_LISTEN says, as `./lachesis up` runs it."""
    addr = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "300")
    monkeypatch.setenv("LACHESIS_BPF_PIN_DIR", str(ebpf_host[1]))
    monkeypatch.setenv("LACHESIS_AGENT_METRICS_LISTEN", addr)
    home = start_with_datapath(cluster, "64MiB")
    return cluster, home, ebpf_host[0], addr


def test_agent_metrics_agree_with_the_controllers_telemetry(metrics_agent) -> None:  # type: ignore[no-untyped-def]
    cluster, home, cgroup, addr = metrics_agent
    log = cluster.processes[f"agent-{HOST}"].text
    assert "eBPF metrics engine attached" in log() and f"addr={addr}" in log(), log()[-3000:]

    with cluster.api() as api:
        # One classifier for both: the kernel counts the cgroup's IO, the switch classifies the
        # opens of the cgroup's processes.
        tenant = {"name": "ddjob", "classifiers": [{"kind": "cgroup", "value": "/" + cgroup.name}]}
        assert api.post("/api/v1/tenants", json=tenant).status_code == 201
        stage = {
            "name": STAGE,
            "kind": "cache",
            "owner": "ddjob",
            "size_bytes": 16 << 20,
            "engine": "loc",
            "write_mode": "through",
        }
        assert api.post("/api/v1/stages", json=stage).status_code == 201
        rule = {
            "name": "dd",
            "priority": 5,
            "match": {"tenant": "ddjob"},
            "detours": [{"what": "io", "to": {"kind": "stage", "target": STAGE}}],
        }
        created = api.post("/api/v1/rules", json=rule)
        assert created.status_code == 201, created.text
        cluster.wait_rollout_done(created.json()["rollout_id"], timeout=60)

    # The generation the controller saw acked is the one the agent says it applied and the
    # desired key holds; nothing waits in the inbox.
    acked = cluster.host(HOST)["acked_generation"]

    def at_acked() -> dict | None:
        s = scrape(addr)
        return s if value(s, "lachesis_bus_applied_generation") == acked else None

    s = wait_for("the agent's metrics at the acked generation", at_acked)
    assert value(s, "lachesis_bus_desired_generation") == acked
    assert value(s, "lachesis_bus_inbox_backlog_entries") == 0
    assert value(s, "lachesis_bus_up") == 1

    # Tenant IO the kernel counts (the cgroup's O_DIRECT writes), and IO through the mount that
    # the stage serves: a file put behind the switch, read cold through it by the cgroup.
    data = Path(os.environ.get("LACHESIS_TEST_DIR", "/var/tmp")) / f"lachesis-e2e-metrics-{os.getpid()}.dat"
    try:
        in_cgroup(cgroup, "dd", "if=/dev/zero", f"of={data}", f"bs={BLOCK}", f"count={BLOCKS}", "oflag=direct")
    finally:
        data.unlink(missing_ok=True)
    (home / "data" / "cold.bin").write_bytes(os.urandom(1 << 20))
    in_cgroup(cgroup, "dd", f"if={home / 'mnt' / 'cold.bin'}", "of=/dev/null", f"bs={BLOCK}")

    def agreed() -> dict | None:
        s = scrape(addr)
        written = value(s, "lachesis_tenant_io_bytes_total", tenant="ddjob", op="write")
        if written != BLOCKS * BLOCK:
            return None
        with cluster.api() as api:
            stats = [h for h in api.get(f"/api/v1/stages/{STAGE}/stats").json() if h["host_id"] == HOST]
            device = [d for d in api.get("/api/v1/devices").json() if d["host"] == HOST and d["name"] == "flash0"]
        if not stats or not device or not stats[0]["misses"]:
            return None
        st, dev = stats[0], device[0]
        ours = {
            "misses": value(s, "lachesis_stage_misses_total", stage=STAGE, tenant="ddjob"),
            "hits": value(s, "lachesis_stage_hits_total", stage=STAGE, tenant="ddjob"),
            "installed_bytes": value(s, "lachesis_stage_installed_bytes", stage=STAGE, tenant="ddjob"),
            "host_bytes_written": value(s, "lachesis_device_host_written_bytes_total", device="flash0"),
            "media_bytes_written": value(s, "lachesis_device_media_written_bytes_total", device="flash0"),
            "dlwa": value(s, "lachesis_device_dlwa", device="flash0"),
        }
        theirs = {k: st[k] for k in ("misses", "hits", "installed_bytes")} | {
            k: dev[k] for k in ("host_bytes_written", "media_bytes_written", "dlwa")
        }
        return {"s": s, "ours": ours, "theirs": theirs} if ours == theirs else None

    got = wait_for("the agent's metrics and the controller's telemetry to agree", agreed, timeout=60)
    assert got["ours"]["misses"] >= 256, got  # 1 MiB read cold: every 4 KiB block missed
    assert got["ours"]["host_bytes_written"] > 0, got
    # The tenant's counters are the agent's last report, which the controller consumed too.
    s = got["s"]
    n = int(value(s, "lachesis_telemetry_reports_total"))
    report = cluster.agent_messages("telemetry", HOST)[n - 1]
    dd = next(t for t in report["tenants"] if t["name"] == "ddjob")
    assert value(s, "lachesis_tenant_io_ops_total", tenant="ddjob", op="write") == dd["ops_written"]
    assert value(s, "lachesis_tenant_io_bytes_total", tenant="ddjob", op="read") == dd["bytes_read"]
    assert dd["bytes_written"] == BLOCKS * BLOCK
