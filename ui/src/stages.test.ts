import { describe, expect, it } from "vitest";
import type { HostOut, ReportedCurve, StageOut } from "./api/types";
import {
  cacheStages,
  deviceHandles,
  dlwaGap,
  dlwaRows,
  installState,
  otherStages,
  ownedCacheSizes,
  ownerBytesOnHost,
  predictedHitRatio,
  servesTenant,
  stageRegionBytes,
  stageRows,
  stageTraits,
  tenantCacheSummaries,
} from "./stages";
import { DEVICES, STAGES, placement, share } from "./test-controller";
import { tenantCurve } from "./telemetry";

const MiB = 1 << 20;
const CURVE: ReportedCurve = {
  policy: "lru",
  algorithm: "shards-fixed-size",
  unit: "bytes",
  references: 1000,
  points: [
    { size_bytes: 16 * MiB, miss_ratio: 0.8 },
    { size_bytes: 64 * MiB, miss_ratio: 0.4 },
    { size_bytes: 128 * MiB, miss_ratio: 0.2 },
  ],
};

/** A cache stage of `owner` on hosts given as [host, allocated, installed, hits, misses]. */
const cache = (name: string, owner: string | null, hosts: [string, number | null, number | null, number | null, number | null][], declared: Record<string, unknown> = {}): StageOut => ({
  name,
  kind: "cache",
  owner,
  source: "api",
  declared: { name, kind: "cache", owner, size_bytes: 32 * MiB, level: 1, ...declared },
  hosts: hosts.map(([host_id, allocated_bytes, installed_bytes, hits, misses]) => ({
    ...STAGES[1].hosts[0],
    host_id,
    allocated_bytes,
    installed_bytes,
    hits,
    misses,
  })),
});

describe("cache stages", () => {
  it("lists cache stages by owner (shared last) then name, and those serving a tenant", () => {
    const stages = [cache("cache/z", "b", []), cache("cache/shared", null, [], { shared_with: ["a"] }), cache("cache/y", "a", []), ...STAGES];
    expect(cacheStages(stages).map((s) => s.name)).toEqual(["cache/y", "cache/analytics", "cache/z", "cache/db", "cache/shared"]);
    expect(cacheStages(stages, "a").map((s) => s.name)).toEqual(["cache/y", "cache/shared"]);
    // cache/db is db's and shared with analytics
    expect(cacheStages(STAGES, "analytics").map((s) => s.name)).toEqual(["cache/analytics", "cache/db"]);
    expect(servesTenant(STAGES[1], "db")).toBe(true);
    expect(otherStages(STAGES).map((s) => s.name)).toEqual(["qos/db"]);
    expect(cacheStages(null)).toEqual([]);
  });

  it("describes a stage's declaration", () => {
    expect(stageTraits(STAGES[0])).toEqual(["loc engine", "write-through", "LRU", "declared 32 MiB"]);
    expect(stageTraits({ ...STAGES[0], declared: {} })).toEqual(["default engine"]);
  });

  it("adds up the owner's level-1 caches on a host: the size its curve is read at", () => {
    const stages = [
      cache("cache/a-1", "a", [["h1", 24 * MiB, null, null, null], ["h2", 8 * MiB, null, null, null]]),
      cache("cache/a-2", "a", [["h1", 40 * MiB, null, null, null]]),
      cache("cache/a-l2", "a", [["h1", 512 * MiB, null, null, null]], { level: 2 }),
      cache("cache/b", "b", [["h1", 1 * MiB, null, null, null]]),
    ];
    expect(ownerBytesOnHost(stages, "a", "h1")).toBe(64 * MiB);
    expect(ownerBytesOnHost(stages, "a", "h2")).toBe(8 * MiB);
    expect(ownerBytesOnHost(stages, "a", "h3")).toBeNull();
  });
});

describe("ownedCacheSizes", () => {
  it("gives the curve the size shipped to the hosts, else the declared one", () => {
    const stages = [
      cache("cache/a", "a", [["h1", 48 * MiB, null, null, null], ["h2", 40 * MiB, null, null, null]]),
      cache("cache/a-new", "a", []),
      cache("cache/a-l2", "a", [["h1", 512 * MiB, null, null, null]], { level: 2 }),
      cache("cache/b", "b", [["h1", 8 * MiB, null, null, null]]),
    ];
    expect(ownedCacheSizes(stages, "a")).toEqual([
      { kind: "cache", owner: "a", size_bytes: 48 * MiB },
      { kind: "cache", owner: "a", size_bytes: 32 * MiB },
    ]);
    const telemetry = { tenant: "a", updated_at: null, curve: CURVE, series: [] };
    expect(tenantCurve(telemetry, null, ownedCacheSizes(stages, "a"))?.allocated_bytes).toBe(80 * MiB);
  });
});

describe("predictedHitRatio", () => {
  it("reads the tenant's curve at the size", () => {
    expect(predictedHitRatio(CURVE, null, 64 * MiB)).toEqual({ hit_ratio: expect.closeTo(0.6), size_bytes: 64 * MiB, source: "curve" });
    expect(predictedHitRatio(CURVE, null, 96 * MiB)?.hit_ratio).toBeCloseTo(0.7);
    expect(predictedHitRatio(CURVE, null, 0)?.hit_ratio).toBe(0); // nothing installed: every read misses
  });

  it("falls back to the allocation's expectation at the size it allocated, else nothing", () => {
    const allocation = { tenant: "a", current: share(64 * MiB, 0.55), proposed: null, guarantee: null };
    expect(predictedHitRatio(null, allocation, 64 * MiB)).toEqual({ hit_ratio: 0.55, size_bytes: 64 * MiB, source: "allocation" });
    expect(predictedHitRatio({ ...CURVE, points: [] }, allocation, 32 * MiB)).toBeNull();
    expect(predictedHitRatio(CURVE, allocation, null)).toBeNull();
  });
});

describe("installState", () => {
  it("says whether the engine installed what was allocated, to one region", () => {
    expect(installState(64 * MiB, 64 * MiB)).toBe("installed");
    expect(installState(66 * MiB, 64 * MiB, 4 * MiB)).toBe("whole-regions");
    expect(installState(68 * MiB, 64 * MiB, 4 * MiB)).toBe("differs");
    expect(installState(64 * MiB + 1000, 64 * MiB)).toBe("whole-regions"); // a region is at least 1 MiB
    expect(installState(32 * MiB, 64 * MiB, 4 * MiB)).toBe("differs");
    expect(installState(64 * MiB, null)).toBe("not-reported");
  });

  it("takes the region from the stage's device on that host", () => {
    const host = {
      id: "h",
      capabilities: {
        devices: [
          { name: "a", reclaim_unit_bytes: 2 * MiB },
          { name: "b", reclaim_unit_bytes: 8 * MiB },
        ],
      },
    } as unknown as HostOut;
    expect(stageRegionBytes(cache("c", "t", []), host)).toBe(2 * MiB);
    expect(stageRegionBytes(cache("c", "t", [], { device: "b" }), host)).toBe(8 * MiB);
    expect(stageRegionBytes(cache("c", "t", [], { engine: "dram" }), host)).toBeNull();
    expect(stageRegionBytes(cache("c", "t", []), undefined)).toBeNull();
  });
});

describe("series", () => {
  it("orders a stage's intervals oldest first and keeps gaps as null", () => {
    const rows = stageRows([
      { at: "2026-11-21T10:00:05Z", size_bytes: 64, installed_bytes: null, hit_ratio: 0.5 },
      { at: "2026-11-21T10:00:00Z", size_bytes: 32, installed_bytes: 32, hit_ratio: null },
      { at: "nonsense", size_bytes: 1, installed_bytes: 1, hit_ratio: 1 },
    ]);
    expect(rows.map((r) => [r.requested, r.installed, r.hit])).toEqual([
      [32, 32, null],
      [64, null, 0.5],
    ]);
    expect(stageRows(undefined)).toEqual([]);
  });

  it("orders a device's intervals and keeps intervals without DLWA", () => {
    expect(dlwaRows(DEVICES[0].series).map((r) => r.dlwa)).toEqual([null, 1.2, 1.3]);
    expect(dlwaRows([{ at: "x", write_bytes_per_s: 1, dlwa: 1 }])).toEqual([]);
  });
});

describe("tenantCacheSummaries", () => {
  it("adds up each owner's stages on every host, the hit ratio by requests", () => {
    const stages = [
      cache("cache/a-1", "a", [["h1", 32 * MiB, 32 * MiB, 90, 10], ["h2", 32 * MiB, 30 * MiB, 10, 90]]),
      cache("cache/a-2", "a", [["h1", 16 * MiB, null, null, null]]),
      cache("cache/b", "b", [["h1", 8 * MiB, null, null, null]]),
      cache("cache/shared", null, [["h1", 8 * MiB, 8 * MiB, 5, 5]]),
    ];
    expect(tenantCacheSummaries(stages)).toEqual([
      { tenant: "a", stages: 2, allocated_bytes: 80 * MiB, installed_bytes: 62 * MiB, hits: 100, misses: 100, hit_ratio: 0.5 },
      { tenant: "b", stages: 1, allocated_bytes: 8 * MiB, installed_bytes: null, hits: 0, misses: 0, hit_ratio: null },
    ]);
  });
});

describe("devices", () => {
  it("lists every handle with its bytes and the streams placed on it", () => {
    const placed = placement("flash0", 3, [
      { tenant: "analytics", part: "loc", space: 0.5, writes: 0.5, trimmed: false, handle: 1 },
      { tenant: "db", part: "klog", space: 0.5, writes: 0.5, trimmed: false, handle: 1 },
    ]);
    expect(deviceHandles(DEVICES[0], [placed])).toEqual([
      { handle: 0, host_bytes_written: 60 * MiB, media_bytes_written: 66 * MiB, dlwa: 1.1, streams: [] },
      { handle: 1, host_bytes_written: 40 * MiB, media_bytes_written: 60 * MiB, dlwa: 1.5, streams: ["analytics/loc", "db/klog"] },
      { handle: 2, host_bytes_written: null, media_bytes_written: null, dlwa: null, streams: [] },
    ]);
    // no placement known: streams unknown (null), the device's handles still listed
    expect(deviceHandles({ ...DEVICES[0], handles: [] }, null).map((h) => [h.handle, h.streams])).toEqual([
      [0, null],
      [1, null],
    ]);
    expect(deviceHandles({ ...DEVICES[0], placement_handles: 0, handles: [] }, null)).toEqual([]);
  });

  it("says how far the measured DLWA is from the prediction", () => {
    expect(dlwaGap(1.25, 1.1)).toBe("+14%");
    expect(dlwaGap(1.0, 1.25)).toBe("−20%");
    expect(dlwaGap(1.1, 1.1)).toBe("±0%");
    expect(dlwaGap(null, 1.1)).toBeNull();
  });
});
