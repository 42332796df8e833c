import { describe, expect, it } from "vitest";
import { render, screen, waitFor, within } from "@testing-library/react";
import { App } from "../App";
import { DEVICES, HOST, STAGES, fakeController, placement, share, tenant, wrap } from "../test-controller";

const TELEMETRY = {
  tenant: "analytics",
  updated_at: new Date().toISOString(),
  curve: {
    policy: "lru",
    algorithm: "shards-fixed-size",
    unit: "bytes",
    points: [
      { size_bytes: 1 << 20, miss_ratio: 0.9 },
      { size_bytes: 1 << 24, miss_ratio: 0.4 },
      { size_bytes: 1 << 28, miss_ratio: 0.05 },
    ],
    references: 12300,
  },
  series: [
    { at: "2026-11-21T10:00:00Z", read_iops: 100, write_iops: 10, read_bytes_per_s: 409600, write_bytes_per_s: 40960, hit_ratio: 0.5 },
    { at: "2026-11-21T10:00:05Z", read_iops: 1200, write_iops: 300, read_bytes_per_s: 4915200, write_bytes_per_s: 1228800, hit_ratio: 0.75 },
  ],
};

const SUMMARY = {
  total_iops: 2500,
  hit_ratio: 0.6,
  tenants: [
    { name: "analytics", iops: 1500, hit_ratio: 0.75 },
    { name: "db", iops: 1000, hit_ratio: 0.4 },
  ],
  devices: [{ host_id: "host-a", name: "flash0", write_bytes_per_s: 1048576, dlwa: 1.25 }],
};

function signedIn(hash: string) {
  sessionStorage.setItem("lachesis.token", "good");
  window.location.hash = hash;
}

describe("tenant page", () => {
  it("draws the reported curve with the allocated size marked, and IOPS and hit rate now", async () => {
    signedIn("#/tenants/analytics");
    const routes = {
      "/api/v1/tenants/analytics": tenant("analytics"),
      "/api/v1/tenants/analytics/telemetry": TELEMETRY,
      "/api/v1/allocations": [
        {
          tenant: "analytics",
          current: { size_bytes: 1 << 24, reserved_bytes: 0, hit_ratio: 0.6, weight: 1, idle: false, curve_point: { size_bytes: 1 << 24, miss_ratio: 0.4, index: 1 } },
          proposed: { size_bytes: 1 << 26, reserved_bytes: 0, hit_ratio: 0.7, weight: 1, idle: false, curve_point: { size_bytes: 1 << 26, miss_ratio: 0.3, index: 1 } },
          guarantee: null,
        },
      ],
    };
    render(wrap(<App />, fakeController({ routes })));
    expect((await screen.findByTestId("curve-caption")).textContent).toMatch(/^Allocated 16 MiB: expected hit rate 60.0%; proposed 64 MiB/);
    expect(screen.getByTestId("curve").querySelector("svg")).toBeTruthy();
    expect(screen.getByTestId("curve-source").textContent).toMatch(/LRU curve \(shards-fixed-size\) over 12,300 4 KiB references/);
    expect(screen.getByTestId("tenant-now").textContent).toMatch(/1.5k IOPS \(1.2k read, 300 write\), hit rate 75.0%/);
    expect(screen.getByTestId("series").querySelector("svg")).toBeTruthy();
    expect(screen.getByTestId("allocation").textContent).toBe("Allocated 16 MiB (expected hit rate 60.0%); proposed 64 MiB (expected hit rate 70.0%)");
  });

  it("marks a key-prefix tenant as the key-value front end's, its curve over requests, in the list and on its page", async () => {
    signedIn("#/tenants/sessions");
    const sessions = { ...tenant("sessions"), classifiers: [{ kind: "key_prefix", value: "sess:" }] };
    const routes = {
      "/api/v1/tenants": [tenant("analytics"), sessions],
      "/api/v1/tenants/sessions": sessions,
      "/api/v1/tenants/sessions/telemetry": { ...TELEMETRY, tenant: "sessions" },
    };
    render(wrap(<App />, fakeController({ routes })));
    expect((await screen.findByTestId("tenant-front-end")).textContent).toMatch(/key-value front end/);
    expect((await screen.findByTestId("curve-source")).textContent).toMatch(/over 12,300 key-value requests/);
    const marks = await screen.findAllByTestId("front-end");
    expect(marks.map((m) => m.closest("li")?.querySelector("a")?.textContent)).toEqual(["sessions"]);
  });

  it("reads endpoints that are not there yet (404) as no data, without an error", async () => {
    signedIn("#/tenants/analytics");
    render(wrap(<App />, fakeController({ routes: { "/api/v1/tenants/analytics": tenant("analytics") } })));
    expect((await screen.findByTestId("curve-empty")).textContent).toMatch(/No miss-ratio curve reported yet/);
    await waitFor(() => expect(screen.getByTestId("series-empty").textContent).toMatch(/not reported yet/));
    expect(screen.queryByRole("alert")).toBeNull();
  });

  it("opens a tenant token's own tenant, and says who is signed in", async () => {
    signedIn("#/tenants");
    const routes = {
      "/api/v1/whoami": { actor: "token:a-viewer", role: "viewer", tenant: "analytics", write_refusal: "token:a-viewer (viewer scoped to tenant 'analytics') may not change anything" },
      "/api/v1/tenants/analytics": tenant("analytics"),
    };
    render(wrap(<App />, fakeController({ routes })));
    expect(await screen.findByTestId("tenant-detail")).toBeTruthy();
    expect(screen.getByRole("heading", { level: 1 }).textContent).toBe("analytics");
    await waitFor(() => expect(screen.getByTestId("who").textContent).toMatch(/token:a-viewer: viewer of analytics/));
  });
});

describe("overview", () => {
  it("shows total IOPS and hit rate and each tenant's", async () => {
    signedIn("#/");
    const routes = { "/api/v1/telemetry/summary": SUMMARY, "/api/v1/tenants": [tenant("analytics"), tenant("db")] };
    render(wrap(<App />, fakeController({ routes })));
    await waitFor(() => expect(screen.getByTestId("total-iops").textContent).toBe("2.5k"));
    expect(screen.getByTestId("total-hit-rate").textContent).toBe("60.0%");
    expect(within(await screen.findByTestId("tenant-row-db")).getByText("40.0%")).toBeTruthy();
  });

  it("shows a tenant token its own tenant's figures, not everyone's", async () => {
    signedIn("#/");
    const routes = {
      "/api/v1/whoami": { actor: "token:a", role: "operator", tenant: "analytics", write_refusal: null },
      "/api/v1/telemetry/summary": SUMMARY,
    };
    render(wrap(<App />, fakeController({ routes })));
    await waitFor(() => expect(screen.getByTestId("total-iops").textContent).toBe("1.5k"));
    expect(screen.getByTestId("total-hit-rate").textContent).toBe("75.0%");
  });
});

describe("hosts page", () => {
  it("shows each device's write rate, DLWA measured and predicted, and the streams per handle", async () => {
    signedIn("#/hosts");
    const host = { ...HOST, capabilities: { ...HOST.capabilities, devices: [{ ...HOST.capabilities.devices[0], fdp: true, placement_handles: 2 }] } };
    const routes = {
      "/api/v1/hosts": [host],
      "/api/v1/telemetry/summary": SUMMARY,
      "/api/v1/placements": [placement("flash0", 2, [{ tenant: "analytics", part: "klog", space: 0.5, writes: 0.9, trimmed: true, handle: 0 }])],
    };
    render(wrap(<App />, fakeController({ routes })));
    const row = await screen.findByTestId("device-row-flash0");
    await waitFor(() => expect(within(row).getByTestId("device-write-rate").textContent).toBe("1 MiB/s"));
    expect(within(row).getByTestId("device-dlwa").textContent).toBe("1.25");
    expect(row.textContent).toMatch(/#0: analytics\/klog/);
    expect(row.textContent).toMatch(/#1: unused/);
    expect(within(row).getByTestId("device-dlwa-predicted").textContent).toBe("1.10 (simulator)");
    expect(screen.queryByTestId("not-reported")).toBeNull();
  });
});

describe("viewer", () => {
  it("finds the editor's Apply off before trying, with the controller's reason", async () => {
    signedIn("#/editor");
    const refusal = "token:v (viewer) may not change anything (read-only role)";
    const routes = { "/api/v1/whoami": { actor: "token:v", role: "viewer", tenant: null, write_refusal: refusal } };
    render(wrap(<App />, fakeController({ viewer: true, routes })));
    await waitFor(() => expect((screen.getByTestId("apply") as HTMLButtonElement).disabled).toBe(true));
    expect(screen.getByTestId("write-disabled-reason").textContent).toBe(refusal);
  });
});

describe("a tenant operator", () => {
  it("is refused another tenant's page without losing its right to write", async () => {
    signedIn("#/tenants/db");
    const routes = { "/api/v1/whoami": { actor: "token:a-op", role: "operator", tenant: "analytics", write_refusal: null } };
    const refusals = { "/api/v1/tenants/db": { status: 403, detail: "token:a-op (operator scoped to tenant 'analytics') may not read tenant 'db'" } };
    render(wrap(<App />, fakeController({ routes, refusals })));
    expect((await screen.findByRole("alert")).textContent).toMatch(/may not read tenant 'db'/);
    window.location.hash = "#/editor";
    await waitFor(() => expect((screen.getByTestId("apply") as HTMLButtonElement).disabled).toBe(false));
    expect(screen.queryByTestId("write-disabled-reason")).toBeNull();
  });
});

describe("rollout detail", () => {
  it("shows a two-phase rollout's phase per agent", async () => {
    signedIn("#/rules/rollouts/r1");
    const target = (host_id: string, phase: string, status: string) => ({
      host_id,
      generation: 3,
      status,
      phase,
      drained_at: phase === "quiesce" ? null : "2026-11-21T10:00:01Z",
      acked_at: status === "applied" ? "2026-11-21T10:00:02Z" : null,
      reason: null,
    });
    const rollout = {
      id: "r1",
      state: "pending",
      reason: null,
      cause: "rule r changed",
      phase: "quiesce",
      rolled_back_by: null,
      traceparent: null,
      created_at: "2026-11-21T10:00:00Z",
      deadline: "2026-11-21T10:01:00Z",
      completed_at: null,
      targets: [target("host-a", "drained", "pending"), target("host-b", "quiesce", "pending")],
    };
    render(wrap(<App />, fakeController({ routes: { "/api/v1/rollouts/r1": rollout } })));
    expect((await screen.findByTestId("rollout-phase")).textContent).toBe("two-phase: quiesce");
    expect(within(screen.getByTestId("target-host-a")).getByTestId("target-phase").textContent).toBe("drained");
    expect(within(screen.getByTestId("target-host-b")).getByTestId("target-phase").textContent).toBe("quiesce");
  });
});

const MiB = 1 << 20;
/** The stage fixtures with a curve for analytics (30% misses at 64 MiB) and an allocation for db (45% expected). */
const LOOP = {
  "/api/v1/hosts": [{ ...HOST, capabilities: { ...HOST.capabilities, devices: [{ ...HOST.capabilities.devices[0], reclaim_unit_bytes: 4 * MiB }] } }],
  "/api/v1/tenants": [tenant("analytics"), tenant("db")],
  "/api/v1/stages": STAGES,
  "/api/v1/devices": DEVICES,
  "/api/v1/tenants/analytics/telemetry": {
    ...TELEMETRY,
    curve: { ...TELEMETRY.curve, points: [{ size_bytes: 16 * MiB, miss_ratio: 0.8 }, { size_bytes: 64 * MiB, miss_ratio: 0.3 }, { size_bytes: 256 * MiB, miss_ratio: 0.1 }] },
  },
  "/api/v1/allocations": [
    { tenant: "analytics", current: share(64 * MiB, 0.69), proposed: null, guarantee: null },
    { tenant: "db", current: share(16 * MiB, 0.45), proposed: null, guarantee: null },
  ],
};

describe("cache stages page", () => {
  it("marks a stage whose owner's curve the controller found off its measured hit ratio", async () => {
    const check = { installed_bytes: 64 * MiB, measured_hit_ratio: 0.75, predicted_hit_ratio: 0.4, references: 20000, off: true, reason: "measured 0.750, curve 0.400: off 0.1" };
    const routes = { ...LOOP, "/api/v1/allocations": [{ ...LOOP["/api/v1/allocations"][0], curve_check: check }, LOOP["/api/v1/allocations"][1]] };
    signedIn("#/stages");
    render(wrap(<App />, fakeController({ routes })));
    const stage = await screen.findByTestId("stage-cache/analytics");
    const row = within(stage).getByTestId("stage-host-host-a");
    await waitFor(() => expect(within(row).getByTestId("stage-curve-off").textContent).toBe("curve off: measured 0.750, curve 0.400: off 0.1"));
    expect(within(screen.getByTestId("stage-cache/db")).queryByTestId("stage-curve-off")).toBeNull();
  });

  it("shows per tenant and per host the allocated and installed size, the measured and predicted hit ratio, and their history", async () => {
    signedIn("#/stages");
    render(wrap(<App />, fakeController({ routes: LOOP })));
    const analytics = await screen.findByTestId("stage-tenant-analytics");
    await waitFor(() => expect(within(analytics).getByTestId("tenant-predicted").textContent).toBe("70.0%"));
    expect(within(analytics).getByTestId("tenant-allocated").textContent).toBe("64 MiB");
    expect(within(analytics).getByTestId("tenant-installed").textContent).toBe("64 MiB");
    expect(within(analytics).getByTestId("tenant-hit").textContent).toBe("75.0%");
    expect(within(screen.getByTestId("stage-tenant-db")).getByTestId("tenant-hit").textContent).toBe("—");

    // cache/analytics on host-a: installed as allocated, the curve's prediction at 64 MiB
    const stage = screen.getByTestId("stage-cache/analytics");
    const row = within(stage).getByTestId("stage-host-host-a");
    expect(within(row).getByTestId("stage-allocated").textContent).toBe("64 MiB");
    expect(within(row).getByTestId("stage-installed").textContent).toBe("64 MiB");
    expect(within(row).getByTestId("stage-install-state").textContent).toBe("= allocated");
    expect(within(row).getByTestId("stage-hit").textContent).toBe("75.0%");
    expect(within(row).getByTestId("stage-predicted").textContent).toBe("70.0% (curve at 64 MiB)");
    expect(within(stage).getByTestId("stage-source").textContent).toBe("policy/analytics-cache");
    const charts = within(stage).getByTestId("stage-charts-host-a");
    expect(within(charts).getByTestId("stage-hit-chart").querySelector("svg")).toBeTruthy();
    expect(within(charts).getByTestId("stage-size-chart").querySelector("svg")).toBeTruthy();

    // cache/db: allocated, nothing reported yet; without a curve the allocation's expectation
    const db = screen.getByTestId("stage-cache/db");
    expect(within(db).getByTestId("stage-allocated").textContent).toBe("16 MiB");
    expect(within(db).getByTestId("stage-install-state").textContent).toBe("not reported");
    await waitFor(() => expect(within(db).getByTestId("stage-predicted").textContent).toBe("45.0% (allocation)"));
    expect(within(db).getByTestId("not-reported").textContent).toBe("What the agents installed and measured, and its history: not reported yet");
    expect(within(db).queryByTestId("stage-hit-chart")).toBeNull();
    expect(within(screen.getByTestId("other-stages")).getByText("qos/db")).toBeTruthy();
    expect(screen.queryByRole("alert")).toBeNull();
  });

  it("is not offered by a controller without /api/v1/stages", async () => {
    signedIn("#/");
    render(wrap(<App />, fakeController()));
    await screen.findByTestId("host-row-host-a");
    expect(screen.queryByTestId("nav-stages")).toBeNull();
    expect(screen.queryByTestId("nav-devices")).toBeNull();
  });
});

describe("tenant page with stages", () => {
  it("shows the cache stages serving the tenant with what each host installed and measured", async () => {
    signedIn("#/tenants/analytics");
    render(wrap(<App />, fakeController({ routes: { ...LOOP, "/api/v1/tenants/analytics": tenant("analytics") } })));
    const stages = await screen.findByTestId("tenant-stages");
    // its own cache and db's, which is shared with it
    expect(within(stages).getByTestId("stage-cache/analytics")).toBeTruthy();
    expect(within(stages).getByTestId("stage-cache/db")).toBeTruthy();
    const row = within(within(stages).getByTestId("stage-cache/analytics")).getByTestId("stage-host-host-a");
    expect(within(row).getByTestId("stage-installed").textContent).toBe("64 MiB");
    await waitFor(() => expect(within(row).getByTestId("stage-predicted").textContent).toBe("70.0% (curve at 64 MiB)"));
  });
});

describe("devices page", () => {
  it("shows each device's DLWA measured beside the prediction, per handle and over time", async () => {
    signedIn("#/devices");
    const placed = placement("flash0", 2, [{ tenant: "analytics", part: "loc", space: 0.5, writes: 0.9, trimmed: false, handle: 1 }]);
    render(wrap(<App />, fakeController({ routes: { ...LOOP, "/api/v1/placements": [placed] } })));
    const row = await screen.findByTestId("device-row-host-a-flash0");
    expect(within(row).getByTestId("row-dlwa").textContent).toBe("1.26");
    expect(within(row).getByTestId("row-dlwa-predicted").textContent).toBe("1.10 (simulator)");
    const device = screen.getByTestId("device-host-a-flash0");
    expect(within(device).getByTestId("device-kind").textContent).toBe("measured");
    expect(device.textContent).toMatch(/\(\+15% measured over predicted\)/);
    expect(within(device).getByTestId("device-host-bytes").textContent).toBe("100 MiB");
    expect(within(device).getByTestId("device-media-bytes").textContent).toBe("126 MiB");
    expect(within(device).getByTestId("dlwa-chart").querySelector("svg")).toBeTruthy();
    const handle1 = within(device).getByTestId("handle-1");
    expect(within(handle1).getByTestId("handle-dlwa").textContent).toBe("1.50");
    await waitFor(() => expect(handle1.textContent).toMatch(/analytics\/loc/));
    expect(within(device).getByTestId("handle-0").textContent).toMatch(/unused/);
    expect(screen.getByTestId("nav-devices").className).toBe("current");
  });

  it("is not offered to a tenant's token, and shows the controller's refusal if opened", async () => {
    signedIn("#/devices");
    const routes = { ...LOOP, "/api/v1/whoami": { actor: "token:a", role: "viewer", tenant: "analytics", write_refusal: "read-only" } };
    const refusals = { "/api/v1/devices": { status: 403, detail: "token:a (viewer scoped to tenant 'analytics') may not read devices (they are shared by all tenants)" } };
    render(wrap(<App />, fakeController({ routes, refusals })));
    expect((await screen.findByRole("alert")).textContent).toMatch(/may not read devices/);
    await waitFor(() => expect(screen.getByTestId("nav-stages")).toBeTruthy());
    expect(screen.queryByTestId("nav-devices")).toBeNull();
  });
});

describe("a read of the controller", () => {
  // As the browser does when the tab comes back: every stale query refetches now.
  const refetchAll = () => window.dispatchEvent(new Event("visibilitychange"));

  it("keeps what was last read under the error, so an outage does not blank the page", async () => {
    signedIn("#/");
    const refusals: Record<string, { status: number; detail: string }> = {};
    render(wrap(<App />, fakeController({ refusals })));
    await screen.findByTestId("host-row-host-a");
    refusals["/api/v1/hosts"] = { status: 503, detail: "database unavailable" };
    refetchAll();
    expect((await screen.findByRole("alert")).textContent).toMatch(/database unavailable/);
    expect(screen.getByTestId("host-row-host-a")).toBeTruthy();
  });

  it("is said once on the hosts page, not by the host table and the page both", async () => {
    signedIn("#/hosts");
    const refusals = { "/api/v1/hosts": { status: 503, detail: "database unavailable" } };
    render(wrap(<App />, fakeController({ refusals })));
    expect((await screen.findByRole("alert")).textContent).toMatch(/database unavailable/);
    expect(screen.getAllByRole("alert")).toHaveLength(1);
    expect(screen.queryByText("Loading hosts…")).toBeNull();
  });

  it("is loading, not empty, until the controller answers", async () => {
    signedIn("#/");
    const controller = fakeController();
    const tenantsNeverAnswer = ((url: RequestInfo | URL, init?: RequestInit) =>
      String(url) === "/api/v1/tenants" ? new Promise<Response>(() => {}) : controller(url, init)) as typeof controller;
    render(wrap(<App />, tenantsNeverAnswer));
    await screen.findByTestId("host-row-host-a");
    expect(screen.getByText("Loading tenants…")).toBeTruthy();
    expect(screen.queryByText("No tenants yet.")).toBeNull();
  });
});
