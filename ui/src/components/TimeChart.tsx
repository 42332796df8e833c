// Figures over time (one row per reporting interval): lines on a left and, if given, a right
// axis, with horizontal reference lines (a predicted value beside the measured one).
import { CartesianGrid, Legend, Line, LineChart, ReferenceLine, Tooltip, XAxis, YAxis } from "recharts";

export const clock = (t: number) => new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });

type Domain = [number | "auto" | "dataMin" | "dataMax", number | "auto" | "dataMin" | "dataMax"];

export type TimeAxis = { format: (v: number) => string; domain?: Domain; ticks?: number[] };
export type TimeLine = {
  key: string;
  name: string;
  color: string;
  axis?: "left" | "right";
  dashed?: boolean;
  /** A value that holds until the next row (a size asked for), not one that moves between rows. */
  step?: boolean;
};
export type TimeRef = {
  y: number;
  label: string;
  color: string;
  axis?: "left" | "right";
  /** Where the label sits: above the line (default) or below it (a line near the top). */
  labelBelow?: boolean;
};

export function TimeChart<R extends { t: number }>({
  rows,
  lines,
  left,
  right,
  refs = [],
  testId,
  what,
  width = 560,
  height = 220,
}: {
  rows: R[];
  lines: TimeLine[];
  left: TimeAxis;
  right?: TimeAxis;
  refs?: TimeRef[];
  testId: string;
  /** What the chart shows, for the line that says it has nothing to show yet. */
  what: string;
  width?: number;
  height?: number;
}) {
  if (rows.length < 2) {
    return (
      <p className="muted not-reported" data-testid={`${testId}-empty`}>
        {what}: {rows.length ? "one sample so far" : "not reported yet"}
      </p>
    );
  }
  // A line or reference on the right axis goes on the left one when the chart has no right axis.
  const axisId = (axis: "left" | "right" | undefined) => (axis === "right" && right ? "right" : "left");
  const axisOf = (name: unknown) => (axisId(lines.find((l) => l.name === name)?.axis) === "right" && right) || left;
  return (
    <figure className="series" data-testid={testId}>
      <LineChart width={width} height={height} data={rows} margin={{ top: 10, right: 20, bottom: 10, left: 10 }}>
        <CartesianGrid strokeDasharray="3 3" />
        <XAxis dataKey="t" type="number" domain={["dataMin", "dataMax"]} tickFormatter={clock} />
        <YAxis yAxisId="left" domain={left.domain ?? ["auto", "auto"]} ticks={left.ticks} tickFormatter={(v: number) => left.format(v)} width={80} />
        {right ? <YAxis yAxisId="right" orientation="right" domain={right.domain ?? ["auto", "auto"]} ticks={right.ticks} tickFormatter={(v: number) => right.format(v)} width={80} /> : null}
        <Tooltip labelFormatter={(v) => clock(Number(v))} formatter={(v, name) => (v == null ? "—" : axisOf(name).format(Number(v)))} />
        <Legend />
        {lines.map((l) => (
          <Line
            key={l.key}
            yAxisId={axisId(l.axis)}
            name={l.name}
            dataKey={l.key}
            stroke={l.color}
            strokeDasharray={l.dashed ? "5 4" : undefined}
            type={l.step ? "stepAfter" : "linear"}
            dot={false}
            connectNulls
            isAnimationActive={false}
          />
        ))}
        {refs.map((r) => (
          <ReferenceLine
            key={r.label}
            yAxisId={axisId(r.axis)}
            y={r.y}
            stroke={r.color}
            strokeDasharray="6 4"
            ifOverflow="extendDomain"
            label={{ value: r.label, position: r.labelBelow ? "insideTopLeft" : "insideBottomLeft", fill: r.color, fontSize: 12 }}
          />
        ))}
      </LineChart>
    </figure>
  );
}
