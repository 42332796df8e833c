// What the Stages and Devices views show of the closed loop: each cache stage per host with the
// size the controller allocated beside the size the agent installed, the hit ratio the real
// stage measured beside the one the tenant's curve predicts at that size, and each device's
// DLWA measured beside the placement broker's prediction. Kept apart from the components so it
// is tested without a DOM.
import type { Allocation, DeviceOut, DevicePoint, HostOut, Placement, ReportedCurve, StageHost, StageOut, StagePoint } from "./api/types";
import { bytes } from "./components/common";
import { handleStreams, missAt, normalPoints } from "./telemetry";

const finite = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x);
const MIB = 1 << 20;

/** Whether `tenant` may send IO through a stage: it owns it or the stage is shared with it. */
export function servesTenant(stage: StageOut, tenant: string): boolean {
  const shared = stage.declared.shared_with;
  return stage.owner === tenant || (Array.isArray(shared) && shared.includes(tenant));
}

/** Cache stages, by owner (shared ones last) then name; only those serving `tenant` if given. */
export function cacheStages(stages: StageOut[] | null | undefined, tenant?: string): StageOut[] {
  return (stages ?? [])
    .filter((s) => s.kind === "cache" && (tenant === undefined || servesTenant(s, tenant)))
    .sort((a, b) => {
      const oa = a.owner ?? "\uffff";
      const ob = b.owner ?? "\uffff";
      return oa < ob ? -1 : oa > ob ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
    });
}

/** Stages of every other kind (rate limits, log writers, ...), by name. */
export function otherStages(stages: StageOut[] | null | undefined): StageOut[] {
  return (stages ?? []).filter((s) => s.kind !== "cache").sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** What a cache stage was declared as, in words: engine, write mode, eviction, declared size. */
export function stageTraits(stage: StageOut): string[] {
  const d = stage.declared;
  const out = [typeof d.engine === "string" ? `${d.engine} engine` : "default engine"];
  if (typeof d.write_mode === "string") out.push(`write-${d.write_mode}`);
  if (typeof d.eviction === "string") out.push(String(d.eviction).toUpperCase());
  if (d.level === 2) out.push("level 2");
  if (finite(d.size_bytes)) out.push(`declared ${bytes(d.size_bytes)}`);
  return out;
}

/**
 * The cache size the owner has on a host: its level-1 cache stages' allocated sizes summed (the
 * controller splits a tenant's allocation among them in proportion to their declared sizes).
 * Its miss-ratio curve is for all of its IO, so this is the size to read the curve at.
 */
export function ownerBytesOnHost(stages: StageOut[] | null | undefined, owner: string, hostId: string): number | null {
  let sum: number | null = null;
  for (const s of stages ?? []) {
    if (s.kind !== "cache" || s.owner !== owner || (s.declared.level ?? 1) !== 1) continue;
    const h = s.hosts.find((x) => x.host_id === hostId);
    if (h && finite(h.allocated_bytes)) sum = (sum ?? 0) + h.allocated_bytes;
  }
  return sum;
}

/**
 * The cache stages a tenant owns with the size in force: the largest size shipped to a host
 * (the allocation's share while one is in force), else the declared size. What the tenant's
 * curve marks as its allocated size when the allocator reports nothing.
 */
export function ownedCacheSizes(stages: StageOut[] | null | undefined, tenant: string): { kind: string; owner: string; size_bytes?: number }[] {
  return cacheStages(stages)
    .filter((s) => s.owner === tenant && (s.declared.level ?? 1) === 1)
    .map((s) => {
      const shipped = s.hosts.map((h) => h.allocated_bytes).filter(finite);
      const size = shipped.length ? Math.max(...shipped) : finite(s.declared.size_bytes) ? s.declared.size_bytes : undefined;
      return { kind: "cache", owner: tenant, size_bytes: size };
    });
}

export type Prediction = { hit_ratio: number; size_bytes: number; source: "curve" | "allocation" };

/**
 * The hit ratio expected of a tenant's cache of `sizeBytes`: its measured miss-ratio curve read
 * at that size; without a curve, the allocation's own expectation when the allocation in force
 * is that size; else nothing.
 */
export function predictedHitRatio(
  curve: ReportedCurve | null | undefined,
  allocation: Allocation | null | undefined,
  sizeBytes: number | null | undefined,
): Prediction | null {
  if (!finite(sizeBytes)) return null;
  const points = normalPoints(curve?.points);
  if (points.length >= 2) {
    const miss = sizeBytes <= 0 ? 1 : missAt(points, sizeBytes);
    if (miss !== null) return { hit_ratio: 1 - miss, size_bytes: sizeBytes, source: "curve" };
  }
  const current = allocation?.current;
  if (current && finite(current.hit_ratio) && current.size_bytes === sizeBytes) {
    return { hit_ratio: current.hit_ratio, size_bytes: sizeBytes, source: "allocation" };
  }
  return null;
}

export type InstallState = "not-reported" | "installed" | "whole-regions" | "differs";

/**
 * Installed against allocated: the same, less by under one region (flash engines hold whole
 * regions of the device's reclaim unit, at least 1 MiB), or different (a resize under way).
 */
export function installState(allocated: number | null | undefined, installed: number | null | undefined, regionBytes?: number | null): InstallState {
  if (!finite(installed) || !finite(allocated)) return "not-reported";
  if (installed === allocated) return "installed";
  const region = Math.max(finite(regionBytes) ? regionBytes : 0, MIB);
  return Math.abs(installed - allocated) < region ? "whole-regions" : "differs";
}

/** The region a stage's flash engine sizes in on a host: its device's reclaim unit (null: DRAM, or unknown). */
export function stageRegionBytes(stage: StageOut, host: HostOut | undefined): number | null {
  if (stage.declared.engine === "dram" || !host) return null;
  const devices = host.capabilities.devices;
  const named = typeof stage.declared.device === "string" ? devices.find((d) => d.name === stage.declared.device) : devices[0];
  return named && finite(named.reclaim_unit_bytes) ? named.reclaim_unit_bytes : null;
}

export type StageRow = { t: number; requested: number | null; installed: number | null; hit: number | null };

/** A stage's series on one host as chart rows: oldest first, unparsable times dropped. */
export function stageRows(series: StagePoint[] | null | undefined): StageRow[] {
  return (series ?? [])
    .map((p) => ({
      t: Date.parse(p.at),
      requested: finite(p.size_bytes) ? p.size_bytes : null,
      installed: finite(p.installed_bytes) ? p.installed_bytes : null,
      hit: finite(p.hit_ratio) ? p.hit_ratio : null,
    }))
    .filter((r) => Number.isFinite(r.t))
    .sort((a, b) => a.t - b.t);
}

export type TenantCacheSummary = {
  tenant: string;
  stages: number;
  allocated_bytes: number | null;
  installed_bytes: number | null;
  hits: number;
  misses: number;
  /** Hits over reads of all its stages on all hosts (null: no read yet). */
  hit_ratio: number | null;
};

/**
 * Per owner: what its cache stages on every host add up to (allocated, installed, hits and
 * misses), the hit ratio aggregated by requests as `./lachesis demo` reports it.
 */
export function tenantCacheSummaries(stages: StageOut[] | null | undefined): TenantCacheSummary[] {
  const by = new Map<string, TenantCacheSummary>();
  for (const s of cacheStages(stages)) {
    if (!s.owner) continue;
    const t = by.get(s.owner) ?? { tenant: s.owner, stages: 0, allocated_bytes: null, installed_bytes: null, hits: 0, misses: 0, hit_ratio: null };
    t.stages += 1;
    for (const h of s.hosts) {
      if (finite(h.allocated_bytes)) t.allocated_bytes = (t.allocated_bytes ?? 0) + h.allocated_bytes;
      if (finite(h.installed_bytes)) t.installed_bytes = (t.installed_bytes ?? 0) + h.installed_bytes;
      t.hits += finite(h.hits) ? h.hits : 0;
      t.misses += finite(h.misses) ? h.misses : 0;
    }
    by.set(s.owner, t);
  }
  return [...by.values()]
    .map((t) => ({ ...t, hit_ratio: t.hits + t.misses > 0 ? t.hits / (t.hits + t.misses) : null }))
    .sort((a, b) => (a.tenant < b.tenant ? -1 : 1));
}

/** A host's figure of a stage (undefined: the stage does not apply to that host). */
export function stageOnHost(stage: StageOut, hostId: string): StageHost | undefined {
  return stage.hosts.find((h) => h.host_id === hostId);
}

// ------------------------------------------------------------------------------------ devices

export type DlwaRow = { t: number; dlwa: number | null; write: number };

/** A device's series as chart rows: oldest first; unparsable times and rates dropped. */
export function dlwaRows(series: DevicePoint[] | null | undefined): DlwaRow[] {
  return (series ?? [])
    .map((p) => ({ t: Date.parse(p.at), dlwa: finite(p.dlwa) ? p.dlwa : null, write: p.write_bytes_per_s }))
    .filter((r) => Number.isFinite(r.t) && finite(r.write))
    .sort((a, b) => a.t - b.t);
}

export type HandleRow = {
  handle: number;
  host_bytes_written: number | null;
  media_bytes_written: number | null;
  dlwa: number | null;
  /** Streams (tenant/part) the broker placed on this handle; null: no placement known. */
  streams: string[] | null;
};

/**
 * Every placement handle of a device, with the bytes measured on it and the streams placed on
 * it: the handles the device has, plus any that reported bytes or carry a stream.
 */
export function deviceHandles(device: DeviceOut, placements: Placement[] | null | undefined): HandleRow[] {
  const placed = (placements ?? []).find((p) => p.host_id === device.host && p.device === device.name);
  const streams = placed ? handleStreams(placed) : null;
  const count = Math.max(device.placement_handles, ...device.handles.map((h) => h.handle + 1), streams?.length ?? 0, 0);
  return Array.from({ length: count }, (_, handle) => {
    const m = device.handles.find((h) => h.handle === handle);
    return {
      handle,
      host_bytes_written: m?.host_bytes_written ?? null,
      media_bytes_written: m?.media_bytes_written ?? null,
      dlwa: m?.dlwa ?? null,
      streams: streams ? (streams[handle]?.streams ?? []) : null,
    };
  });
}

/** Measured over predicted DLWA, as "+12%" / "−3%" (null when either is missing). */
export function dlwaGap(measured: number | null | undefined, predicted: number | null | undefined): string | null {
  if (!finite(measured) || !finite(predicted) || predicted <= 0) return null;
  const pct = Math.round((measured / predicted - 1) * 100);
  return pct === 0 ? "±0%" : pct > 0 ? `+${pct}%` : `−${-pct}%`;
}
