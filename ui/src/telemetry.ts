// What the pages show of the controller's telemetry, allocations and placements: joins and
// derived figures, kept apart from the components so they are tested without a DOM.
import type { Allocation, Curve, CurvePoint, Device, HostOut, Placement, TelemetrySample, TelemetrySummary, TenantTelemetry } from "./api/types";

export function allocationFor(allocations: Allocation[] | null | undefined, tenant: string): Allocation | null {
  return (allocations ?? []).find((a) => a.tenant === tenant) ?? null;
}

/**
 * The curve chart's input: the reported curve with the allocated (and proposed) size marked.
 * The allocated size is the allocator's when it reports one, else what the policies in force
 * give the tenant: the sizes of the cache stages it owns.
 */
export function tenantCurve(
  telemetry: TenantTelemetry | null | undefined,
  allocation: Allocation | null,
  ownedCaches: { kind: string; owner?: string | null; size_bytes?: number }[] = [],
): Curve | null {
  if (!telemetry?.curve) return null;
  const declared = ownedCaches
    .filter((s) => s.kind === "cache" && s.owner === telemetry.tenant && typeof s.size_bytes === "number")
    .reduce<number | null>((sum, s) => (sum ?? 0) + (s.size_bytes as number), null);
  return {
    points: telemetry.curve.points,
    allocated_bytes: allocation?.current?.size_bytes ?? declared,
    proposed_bytes: allocation?.proposed?.size_bytes ?? null,
  };
}

export type SeriesRow = { t: number; iops: number; read_iops: number; write_iops: number; hit: number | null };

/** A tenant's samples as chart rows: oldest first, unparsable times dropped. */
export function seriesRows(series: TelemetrySample[] | null | undefined): SeriesRow[] {
  return (series ?? [])
    .map((s) => ({
      t: Date.parse(s.at),
      read_iops: s.read_iops,
      write_iops: s.write_iops,
      iops: s.read_iops + s.write_iops,
      hit: typeof s.hit_ratio === "number" && Number.isFinite(s.hit_ratio) ? s.hit_ratio : null,
    }))
    .filter((r) => Number.isFinite(r.t) && Number.isFinite(r.iops))
    .sort((a, b) => a.t - b.t);
}

/** The latest sample, for "now" figures next to the chart. */
export function latest(rows: SeriesRow[]): SeriesRow | null {
  return rows.length ? rows[rows.length - 1] : null;
}

/** Per-tenant figures a token may see: a tenant-scoped token only its own tenant's. */
export function visibleTenants(summary: TelemetrySummary | null | undefined, scope: string | null) {
  return (summary?.tenants ?? []).filter((t) => scope === null || t.name === scope);
}

export type DeviceRow = Device & {
  write_bytes_per_s: number | null;
  dlwa: number | null;
  predicted_dlwa: number | null;
  predicted_by: string | null;
  /** Each placement handle and the streams (tenant/part) writing with it; null: not placed. */
  handles: { handle: number; streams: string[] }[] | null;
};

/** A placement's streams grouped by handle, every handle listed (unused ones empty). */
export function handleStreams(p: Placement): { handle: number; streams: string[] }[] {
  const count = Math.max(p.handles, ...p.streams.map((s) => s.handle + 1), 0);
  return Array.from({ length: count }, (_, handle) => ({
    handle,
    streams: p.streams.filter((s) => s.handle === handle).map((s) => `${s.tenant}/${s.part}`),
  }));
}

/** A host's registered devices joined with what telemetry measured and placement predicts. */
export function deviceRows(host: HostOut, summary: TelemetrySummary | null | undefined, placements: Placement[] | null | undefined): DeviceRow[] {
  return host.capabilities.devices.map((d) => {
    const measured = (summary?.devices ?? []).find((x) => x.host_id === host.id && x.name === d.name);
    const placed = (placements ?? []).find((p) => p.host_id === host.id && p.device === d.name);
    return {
      ...d,
      write_bytes_per_s: measured?.write_bytes_per_s ?? null,
      dlwa: measured?.dlwa ?? null,
      predicted_dlwa: placed?.predicted_dlwa ?? null,
      predicted_by: placed?.predicted_by ?? null,
      handles: placed ? handleStreams(placed) : null,
    };
  });
}

export function percent(ratio: number | null | undefined, digits = 1): string {
  return typeof ratio === "number" && Number.isFinite(ratio) ? `${(ratio * 100).toFixed(digits)}%` : "—";
}

/** IOPS with a k/M suffix past a thousand. */
export function iops(n: number | null | undefined): string {
  if (typeof n !== "number" || !Number.isFinite(n)) return "—";
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return n >= 10 || Number.isInteger(n) ? String(Math.round(n)) : n.toFixed(1);
}

/** A curve's points sorted by size, miss ratios clamped to [0, 1]; invalid points dropped. */
export function normalPoints(points: CurvePoint[] | null | undefined): { size: number; miss: number }[] {
  if (!Array.isArray(points)) return [];
  return points
    .filter((p) => Number.isFinite(p.size_bytes) && Number.isFinite(p.miss_ratio) && p.size_bytes >= 0)
    .map((p) => ({ size: p.size_bytes, miss: Math.min(1, Math.max(0, p.miss_ratio)) }))
    .sort((a, b) => a.size - b.size);
}

/** Miss ratio at `size` by linear interpolation between the curve's points. */
export function missAt(points: { size: number; miss: number }[], size: number): number | null {
  if (!points.length) return null;
  if (size <= points[0].size) return points[0].miss;
  for (let i = 1; i < points.length; i++) {
    const a = points[i - 1];
    const b = points[i];
    if (size <= b.size) return a.miss + ((b.miss - a.miss) * (size - a.size)) / (b.size - a.size || 1);
  }
  return points[points.length - 1].miss;
}
