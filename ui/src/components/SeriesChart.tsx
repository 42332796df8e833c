// A tenant's IOPS (left axis) and hit rate (right axis) over time.
import type { SeriesRow } from "../telemetry";
import { iops, percent } from "../telemetry";
import { TimeChart } from "./TimeChart";

export function SeriesChart({ rows, width = 560, height = 220 }: { rows: SeriesRow[]; width?: number; height?: number }) {
  return (
    <TimeChart
      rows={rows}
      testId="series"
      what="Hit rate and IOPS over time"
      width={width}
      height={height}
      left={{ format: (v) => iops(v) }}
      right={{ format: (v) => percent(v, 0), domain: [0, 1] }}
      lines={[
        { key: "iops", name: "IOPS", color: "#2563eb" },
        { key: "hit", name: "hit rate", color: "#16a34a", axis: "right" },
      ]}
    />
  );
}
