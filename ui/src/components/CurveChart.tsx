// A tenant's miss-ratio curve (miss ratio against cache size) with its allocated size marked.
import { CartesianGrid, Line, LineChart, ReferenceLine, Tooltip, XAxis, YAxis } from "recharts";
import type { Curve } from "../api/types";
import { bytes } from "./common";
import { missAt, normalPoints } from "../telemetry";

/** Points sorted by size, with miss ratios clamped to [0, 1]; invalid points dropped. */
export function curvePoints(curve: Curve | null | undefined) {
  return normalPoints(curve?.points);
}

export { missAt };

/**
 * Ticks for a log-scale size axis: powers of two from `min` or below to `max` or above, every
 * `stride` doublings so that there are at most `most` of them.
 */
export function logTicks(min: number, max: number, most = 7): number[] {
  const lo = Math.floor(Math.log2(min));
  const hi = Math.ceil(Math.log2(max));
  const stride = Math.max(1, Math.ceil((hi - lo) / (most - 1)));
  const out: number[] = [];
  for (let e = lo; ; e += stride) {
    out.push(2 ** e);
    if (e >= hi) return out; // the last tick covers max, so the domain does too
  }
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
  const proposed = curve?.proposed_bytes ?? null;
  const expected = allocated != null ? missAt(points, allocated) : null;
  const expectedProposed = proposed != null && proposed !== allocated ? missAt(points, proposed) : null;
  // Markers outside the curve's sizes would be clipped away: widen the axis to show them.
  const xs = [points[0].size, points[points.length - 1].size, ...(allocated != null ? [allocated] : []), ...(expectedProposed != null ? [proposed as number] : [])];
  const [lo, hi] = [Math.min(...xs), Math.max(...xs)];
  // Cache sizes span decades (SHARDS reports 1 MiB to 1 TiB): a log axis shows every knee.
  const log = lo > 0;
  const ticks = log ? logTicks(lo, hi) : undefined;
  const domain = ticks ? [ticks[0], ticks[ticks.length - 1]] : [lo, hi];
  return (
    <figure className="curve" data-testid="curve">
      <LineChart width={width} height={height} data={points} margin={{ top: 20, right: 30, bottom: 20, left: 10 }}>
        <CartesianGrid strokeDasharray="3 3" />
        <XAxis dataKey="size" type="number" scale={log ? "log" : "linear"} domain={domain} ticks={ticks} tickFormatter={(v: number) => bytes(v)} />
        <YAxis domain={[0, 1]} tickFormatter={(v: number) => `${Math.round(v * 100)}%`} />
        <Tooltip formatter={(v) => `${(Number(v) * 100).toFixed(1)}% miss`} labelFormatter={(v) => bytes(Number(v))} />
        {/* linear between measured points: a smoothed line would invent a shape between them */}
        <Line type="linear" dataKey="miss" stroke="#2563eb" dot={{ r: 2 }} isAnimationActive={false} />
        {allocated != null ? (
          <ReferenceLine x={allocated} stroke="#dc2626" label={{ value: `allocated ${bytes(allocated)}`, position: "insideTopRight", fill: "#dc2626" }} />
        ) : null}
        {expectedProposed != null ? (
          <ReferenceLine
            x={proposed as number}
            stroke="#16a34a"
            strokeDasharray="4 4"
            label={{ value: `proposed ${bytes(proposed as number)}`, position: "insideBottomRight", fill: "#16a34a" }}
          />
        ) : null}
      </LineChart>
      <figcaption data-testid="curve-caption">
        {allocated != null && expected != null
          ? `Allocated ${bytes(allocated)}: expected hit rate ${((1 - expected) * 100).toFixed(1)}%`
          : "No cache allocated to this tenant yet"}
        {expectedProposed != null ? `; proposed ${bytes(proposed as number)}: ${((1 - expectedProposed) * 100).toFixed(1)}%` : ""}
      </figcaption>
    </figure>
  );
}
