// A tenant's IOPS (left axis) and hit rate (right axis) over time.
import { CartesianGrid, Legend, Line, LineChart, Tooltip, XAxis, YAxis } from "recharts";
import type { SeriesRow } from "../telemetry";
import { iops, percent } from "../telemetry";

const clock = (t: number) => new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });

export function SeriesChart({ rows, width = 560, height = 220 }: { rows: SeriesRow[]; width?: number; height?: number }) {
  if (rows.length < 2) {
    return (
      <p className="muted not-reported" data-testid="series-empty">
        Hit rate and IOPS over time: {rows.length ? "one sample so far" : "not reported yet"}
      </p>
    );
  }
  return (
    <figure className="series" data-testid="series">
      <LineChart width={width} height={height} data={rows} margin={{ top: 10, right: 20, bottom: 10, left: 10 }}>
        <CartesianGrid strokeDasharray="3 3" />
        <XAxis dataKey="t" type="number" domain={["dataMin", "dataMax"]} tickFormatter={clock} />
        <YAxis yAxisId="iops" tickFormatter={(v: number) => iops(v)} />
        <YAxis yAxisId="hit" orientation="right" domain={[0, 1]} tickFormatter={(v: number) => percent(v, 0)} />
        <Tooltip labelFormatter={(v) => clock(Number(v))} formatter={(v, name) => (name === "hit rate" ? percent(Number(v)) : iops(Number(v)))} />
        <Legend />
        <Line yAxisId="iops" name="IOPS" dataKey="iops" stroke="#2563eb" dot={false} isAnimationActive={false} />
        <Line yAxisId="hit" name="hit rate" dataKey="hit" stroke="#16a34a" dot={false} connectNulls isAnimationActive={false} />
      </LineChart>
    </figure>
  );
}
