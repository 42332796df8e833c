import { describe, expect, it } from "vitest";
import type { HostOut, TelemetrySummary, TenantTelemetry } from "./api/types";
import { placement, share } from "./test-controller";
import { allocationFor, deviceRows, handleStreams, iops, latest, percent, seriesRows, tenantCurve, visibleTenants } from "./telemetry";

const TELEMETRY: TenantTelemetry = {
  tenant: "web",
  updated_at: "2026-11-21T10:00:05Z",
  curve: { policy: "lru", algorithm: "shards-fixed-size", unit: "bytes", points: [{ size_bytes: 1 << 20, miss_ratio: 0.9 }, { size_bytes: 1 << 28, miss_ratio: 0.05 }], references: 12300 },
  series: [
    { at: "2026-11-21T10:00:05Z", read_iops: 200, write_iops: 5, read_bytes_per_s: 1, write_bytes_per_s: 1, hit_ratio: 0.8 },
    { at: "2026-11-21T10:00:00Z", read_iops: 100, write_iops: 0, read_bytes_per_s: 1, write_bytes_per_s: 0, hit_ratio: null },
    { at: "not a time", read_iops: 1, write_iops: 1, read_bytes_per_s: 1, write_bytes_per_s: 1, hit_ratio: 1 },
  ],
};

/** A placement whose streams are [tenant, part, handle], each a tenth of the space and writes. */
const placed = (device: string, handles: number, streams: [string, string, number][]) =>
  placement(device, handles, streams.map(([tenant, part, handle]) => ({ tenant, part, space: 0.1, writes: 0.1, trimmed: false, handle })));

const HOST = {
  id: "host-a",
  capabilities: {
    cpus: 2,
    devices: [
      { name: "nvme0", path: "/dev/nvme0n1", kind: "nvme", size_bytes: 1 << 30, fdp: true, placement_handles: 2 },
      { name: "flash1", path: "/f.img", kind: "file", size_bytes: 1 << 26, fdp: false, placement_handles: 0 },
    ],
  },
} as unknown as HostOut;

describe("tenantCurve", () => {
  it("marks the allocated and proposed sizes on the reported curve", () => {
    const allocation = allocationFor(
      [
        { tenant: "db", current: share(1), proposed: share(2), guarantee: null },
        { tenant: "web", current: share(1 << 26), proposed: share(1 << 27), guarantee: null },
      ],
      "web",
    );
    expect(tenantCurve(TELEMETRY, allocation)).toEqual({ points: TELEMETRY.curve!.points, allocated_bytes: 1 << 26, proposed_bytes: 1 << 27 });
  });

  it("falls back to the cache stages the tenant owns when the allocator reports nothing", () => {
    const stages = [
      { name: "cache/web", kind: "cache", owner: "web", size_bytes: 1 << 26 },
      { name: "cache/shared", kind: "cache", owner: null, shared_with: ["web"], size_bytes: 1 << 30 },
      { name: "cache/db", kind: "cache", owner: "db", size_bytes: 1 << 20 },
    ];
    expect(tenantCurve(TELEMETRY, null, stages)?.allocated_bytes).toBe(1 << 26);
    expect(tenantCurve(TELEMETRY, { tenant: "web", current: share(5), proposed: null, guarantee: null }, stages)?.allocated_bytes).toBe(5);
  });

  it("draws no curve without one, and no marker without an allocation", () => {
    expect(tenantCurve(null, null)).toBeNull();
    expect(tenantCurve({ ...TELEMETRY, curve: null }, null)).toBeNull();
    expect(tenantCurve(TELEMETRY, allocationFor(null, "web"))).toMatchObject({ allocated_bytes: null, proposed_bytes: null });
  });
});

describe("seriesRows", () => {
  it("sorts samples oldest first, adds reads and writes, drops unparsable times", () => {
    const rows = seriesRows(TELEMETRY.series);
    expect(rows.map((r) => [r.iops, r.hit])).toEqual([
      [100, null],
      [205, 0.8],
    ]);
    expect(latest(rows)?.iops).toBe(205);
    expect(latest(seriesRows(undefined))).toBeNull();
  });
});

describe("deviceRows", () => {
  const summary: TelemetrySummary = {
    total_iops: 1,
    hit_ratio: 0.5,
    tenants: [],
    devices: [
      { host_id: "host-a", name: "nvme0", write_bytes_per_s: 4096, dlwa: 1.2 },
      { host_id: "host-b", name: "flash1", write_bytes_per_s: 99, dlwa: 9 },
    ],
  };
  it("joins measured rates and DLWA and the placements by host and device name", () => {
    const rows = deviceRows(HOST, summary, [placed("nvme0", 2, [["web", "loc", 0]])]);
    expect(rows[0]).toMatchObject({
      name: "nvme0",
      write_bytes_per_s: 4096,
      dlwa: 1.2,
      predicted_dlwa: 1.1,
      handles: [
        { handle: 0, streams: ["web/loc"] },
        { handle: 1, streams: [] },
      ],
    });
    // flash1 of host-b is another device: host-a's flash1 has nothing measured
    expect(rows[1]).toMatchObject({ name: "flash1", write_bytes_per_s: null, dlwa: null, predicted_dlwa: null, handles: null });
  });
  it("keeps the registered devices when nothing is reported", () => {
    expect(deviceRows(HOST, null, null).map((d) => d.name)).toEqual(["nvme0", "flash1"]);
  });
});

describe("handleStreams", () => {
  it("groups streams by handle, listing unused handles too", () => {
    expect(handleStreams(placed("d", 3, [["a", "klog", 2], ["b", "kset", 0], ["a", "kset", 2]]))).toEqual([
      { handle: 0, streams: ["b/kset"] },
      { handle: 1, streams: [] },
      { handle: 2, streams: ["a/klog", "a/kset"] },
    ]);
  });
});

describe("visibleTenants and formats", () => {
  it("shows a tenant token only its tenant", () => {
    const summary = { total_iops: 3, hit_ratio: null, tenants: [{ name: "a", iops: 1, hit_ratio: null }, { name: "b", iops: 2, hit_ratio: 0.5 }], devices: [] };
    expect(visibleTenants(summary, null).map((t) => t.name)).toEqual(["a", "b"]);
    expect(visibleTenants(summary, "b").map((t) => t.name)).toEqual(["b"]);
    expect(visibleTenants(null, null)).toEqual([]);
  });
  it("formats ratios and rates", () => {
    expect(percent(0.8123)).toBe("81.2%");
    expect(percent(null)).toBe("—");
    expect(iops(2.25)).toBe("2.3");
    expect(iops(0)).toBe("0");
    expect(iops(1500)).toBe("1.5k");
    expect(iops(2_500_000)).toBe("2.5M");
    expect(iops(undefined)).toBe("—");
  });
});
