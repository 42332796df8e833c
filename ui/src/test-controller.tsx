// Unit tests' stand-in for the controller: a fetch answering from a table of GET paths, 401
// without the token "good", 403 to a viewer's writes, and 404 (problem+json) for the rest.
import { vi } from "vitest";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import type { ReactNode } from "react";
import { SessionProvider } from "./api/session";
import type { DeviceOut, PlacedStream, Placement, StageOut, TenantShare } from "./api/types";

export const HOST = {
  id: "host-a",
  agent_version: "0.1.0",
  capabilities: {
    cpus: 2,
    devices: [{ name: "flash0", path: "/tmp/f.img", kind: "file", size_bytes: 67108864, fdp: false, placement_handles: 0 }],
    kernel: { release: "6.1.0", btf: true, io_uring: true, fuse: false },
  },
  enrolled_at: "2026-01-01T00:00:00Z",
  registered_at: "2026-01-01T00:00:00Z",
  last_seen: new Date().toISOString(),
  alive: true,
  desired_generation: 2,
  acked_generation: 2,
};

const MiB = 1 << 20;
const at = (s: number) => new Date(Date.UTC(2026, 10, 21, 10, 0, s)).toISOString();

/**
 * GET /api/v1/stages: cache/analytics (a policy's, 64 MiB allocated; installed and measured on
 * host-a, whose series shows a resize from 32 MiB), cache/db (made through the API, allocated
 * and not reported yet) and a rate limit. Their shapes are checked against openapi.json.
 */
export const STAGES: StageOut[] = [
  {
    name: "cache/analytics",
    kind: "cache",
    owner: "analytics",
    source: "policy/analytics-cache",
    declared: { name: "cache/analytics", kind: "cache", owner: "analytics", size_bytes: 32 * MiB, engine: "loc", write_mode: "through", eviction: "lru", level: 1, shared_with: [] },
    hosts: [
      {
        host_id: "host-a",
        allocated_bytes: 64 * MiB,
        reported_at: new Date().toISOString(),
        installed_bytes: 64 * MiB,
        hits: 600,
        misses: 200,
        hit_ratio: 0.75,
        bytes_read_hit: 600 * 4096,
        bytes_read_miss: 200 * 4096,
        bytes_written: 0,
        evictions: 12,
        writebacks: 0,
        dirty_bytes: 0,
        demoted_blocks: 40,
        demotion_hits: 12,
        front_end: "kv",
        parts: [
          { part: "kangaroo", handles: [1, 2], objects: 500, gets: 700, hits: 500, flash_bytes_written: 4 * MiB },
          { part: "loc", handles: [3], objects: 20, gets: 100, hits: 100, flash_bytes_written: 8 * MiB },
        ],
        series: [
          { at: at(0), size_bytes: 32 * MiB, installed_bytes: 32 * MiB, hit_ratio: 0.5 },
          { at: at(5), size_bytes: 64 * MiB, installed_bytes: 32 * MiB, hit_ratio: 0.55 },
          { at: at(10), size_bytes: 64 * MiB, installed_bytes: 64 * MiB, hit_ratio: 0.8 },
        ],
      },
    ],
  },
  {
    name: "cache/db",
    kind: "cache",
    owner: "db",
    source: "api",
    declared: { name: "cache/db", kind: "cache", owner: "db", size_bytes: 16 * MiB, engine: "dram", write_mode: "back", eviction: "lru", level: 1, shared_with: ["analytics"] },
    hosts: [
      {
        host_id: "host-a",
        allocated_bytes: 16 * MiB,
        reported_at: null,
        installed_bytes: null,
        hits: null,
        misses: null,
        hit_ratio: null,
        bytes_read_hit: null,
        bytes_read_miss: null,
        bytes_written: null,
        evictions: null,
        writebacks: null,
        dirty_bytes: null,
        demoted_blocks: null,
        demotion_hits: null,
        front_end: null,
        parts: null,
        series: [],
      },
    ],
  },
  { name: "qos/db", kind: "qos", owner: "db", source: "api", declared: { name: "qos/db", kind: "qos", owner: "db", max_iops: 500 }, hosts: [] },
];

/** GET /api/v1/devices: host-a's flash0, a measuring device with two handles and a prediction. */
export const DEVICES: DeviceOut[] = [
  {
    host: "host-a",
    name: "flash0",
    kind: "measured",
    path: "/tmp/f.img",
    size_bytes: 64 * MiB,
    placement_handles: 2,
    reclaim_unit_bytes: 4 * MiB,
    host_bytes_written: 100 * MiB,
    media_bytes_written: 126 * MiB,
    dlwa: 1.26,
    predicted_dlwa: 1.1,
    predicted_by: "simulator",
    handles: [
      { handle: 0, host_bytes_written: 60 * MiB, media_bytes_written: 66 * MiB, dlwa: 1.1 },
      { handle: 1, host_bytes_written: 40 * MiB, media_bytes_written: 60 * MiB, dlwa: 1.5 },
    ],
    series: [
      { at: at(0), write_bytes_per_s: 4 * MiB, dlwa: null },
      { at: at(5), write_bytes_per_s: 8 * MiB, dlwa: 1.2 },
      { at: at(10), write_bytes_per_s: 8 * MiB, dlwa: 1.3 },
    ],
  },
];

/** A tenant's share of the cache: `size_bytes`, where its curve expects `hit_ratio`. */
export const share = (size_bytes: number, hit_ratio = 0.5): TenantShare => ({
  size_bytes,
  reserved_bytes: 0,
  hit_ratio,
  weight: 1,
  idle: false,
  curve_point: { size_bytes, miss_ratio: 1 - hit_ratio, index: 0 },
});

/** The broker's placement of `streams` on host-a's `device` with `handles` handles (DLWA 1.1 predicted by the simulator). */
export const placement = (device: string, handles: number, streams: PlacedStream[]): Placement => ({
  host_id: "host-a",
  device,
  handles,
  overprovisioning: 0.07,
  streams,
  shared: [],
  predicted_dlwa: 1.1,
  predicted_by: "simulator",
  model_dlwa: 1.2,
  warnings: [],
  computed_at: "2026-11-21T10:00:00Z",
});

export const tenant = (name: string) => ({ name, classifiers: [], description: null, created_at: "", updated_at: "" });

export function fakeController({
  viewer = false,
  routes = {} as Record<string, unknown>,
  refusals = {} as Record<string, { status: number; detail: string }>,
} = {}) {
  const table: Record<string, unknown> = {
    "/openapi.json": { paths: Object.fromEntries(Object.keys(routes).map((p) => [p.split("?")[0], {}])) },
    "/api/v1/hosts": [HOST],
    "/api/v1/tenants": [tenant("analytics")],
    "/api/v1/rules": [],
    ...routes,
  };
  return vi.fn(async (url: RequestInfo | URL, init?: RequestInit) => {
    const u = String(url);
    const auth = (init?.headers as Record<string, string> | undefined)?.Authorization;
    const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
    if (u.startsWith("/api/") && auth !== "Bearer good") return json(401, { title: "Unauthorized", status: 401, detail: "missing or wrong bearer token" });
    const method = init?.method ?? "GET";
    if (method !== "GET") {
      if (viewer) return json(403, { title: "Forbidden", status: 403, detail: "token:v (viewer) may not change anything" });
      return json(201, { name: "x", rollout_id: "r9" });
    }
    if (u in refusals) return json(refusals[u].status, { title: "Refused", ...refusals[u] });
    if (u in table) return json(200, table[u]);
    if (u.startsWith("/api/v1/rollouts")) return json(200, []);
    return json(404, { title: "Not Found", status: 404, detail: u });
  });
}

export function wrap(children: ReactNode, fetchImpl: ReturnType<typeof fakeController>) {
  const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  return (
    <QueryClientProvider client={qc}>
      <SessionProvider fetchImpl={fetchImpl as unknown as typeof fetch}>{children}</SessionProvider>
    </QueryClientProvider>
  );
}
