// A tenant's miss-ratio curve (miss ratio against cache size) with its allocated size marked.
import { CartesianGrid, Line, LineChart, ReferenceLine, Tooltip, XAxis, YAxis } from "recharts";
import type { Curve } from "../api/types";
import { bytes } from "./common";

/** Points sorted by size, with miss ratios clamped to [0, 1]; invalid points dropped. */
export function curvePoints(curve: Curve | null | undefined) {
  if (!curve || !Array.isArray(curve.points)) return [];
  return curve.points
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

export function CurveChart({ curve, width = 560, height = 260 }: { curve: Curve | null | undefined; width?: number; height?: number }) {
  const points = curvePoints(curve);
  if (points.length < 2) {
    return (
      <div className="curve empty" data-testid="curve-empty">
        No miss-ratio curve reported yet for this tenant.
      </div>
    );
  }
  const allocated = curve?.allocated_bytes ?? null;
  const expected = allocated != null ? missAt(points, allocated) : null;
  return (
    <figure className="curve" data-testid="curve">
      <LineChart width={width} height={height} data={points} margin={{ top: 10, right: 20, bottom: 20, left: 10 }}>
        <CartesianGrid strokeDasharray="3 3" />
        <XAxis dataKey="size" type="number" domain={["dataMin", "dataMax"]} tickFormatter={(v: number) => bytes(v)} />
        <YAxis domain={[0, 1]} tickFormatter={(v: number) => `${Math.round(v * 100)}%`} />
        <Tooltip formatter={(v) => `${(Number(v) * 100).toFixed(1)}% miss`} labelFormatter={(v) => bytes(Number(v))} />
        <Line type="monotone" dataKey="miss" stroke="#2563eb" dot={false} isAnimationActive={false} />
        {allocated != null ? <ReferenceLine x={allocated} stroke="#dc2626" label={`allocated ${bytes(allocated)}`} /> : null}
      </LineChart>
      <figcaption>
        {allocated != null && expected != null
          ? `Allocated ${bytes(allocated)}: expected hit rate ${((1 - expected) * 100).toFixed(1)}%`
          : "No allocation yet"}
      </figcaption>
    </figure>
  );
}
