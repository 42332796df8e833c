// The closed loop over time: a cache stage's measured hit ratio beside the curve's prediction,
// its size asked for beside the size installed, and a device's DLWA beside the broker's.
import type { DlwaRow, StageRow } from "../stages";
import { percent } from "../telemetry";
import { bytes } from "./common";
import { TimeChart } from "./TimeChart";

const W = 520;
const H = 210;

/** Hit ratio per reporting interval, the predicted hit ratio as a dashed reference line. */
export function StageHitChart({ rows, predicted, width = W }: { rows: StageRow[]; predicted: number | null; width?: number }) {
  return (
    <TimeChart
      rows={rows}
      testId="stage-hit-chart"
      what="Hit ratio over time"
      width={width}
      height={H}
      left={{ format: (v) => percent(v, 0), domain: [0, 1] }}
      lines={[{ key: "hit", name: "measured hit ratio", color: "#16a34a" }]}
      refs={predicted == null ? [] : [{ y: predicted, label: `predicted ${percent(predicted)}`, color: "#7c3aed", labelBelow: predicted > 0.5 }]}
    />
  );
}

/** Ticks for a size axis from 0: a power-of-two step (in bytes) giving at most five intervals. */
export function sizeTicks(max: number): number[] {
  const top = Math.max(max, 1);
  const step = Math.max(1, 2 ** Math.ceil(Math.log2(top / 5)));
  const n = Math.max(1, Math.ceil(top / step));
  return Array.from({ length: n + 1 }, (_, i) => i * step);
}

/** The size desired state asked for and the size the engine installed, per interval. */
export function StageSizeChart({ rows, width = W }: { rows: StageRow[]; width?: number }) {
  const ticks = sizeTicks(Math.max(0, ...rows.flatMap((r) => [r.requested ?? 0, r.installed ?? 0])));
  return (
    <TimeChart
      rows={rows}
      testId="stage-size-chart"
      what="Allocated and installed size over time"
      width={width}
      height={H}
      left={{ format: (v) => bytes(v), domain: [0, ticks[ticks.length - 1]], ticks }}
      lines={[
        { key: "requested", name: "allocated", color: "#dc2626", step: true },
        { key: "installed", name: "installed", color: "#2563eb", step: true, dashed: true },
      ]}
    />
  );
}

/**
 * The DLWA axis: from 1 (no amplification) or below if something measured less, up past the
 * highest of what was measured and the prediction, in tenths.
 */
export function dlwaDomain(rows: DlwaRow[], predicted: number | null): [number, number] {
  const values = [...rows.map((r) => r.dlwa), predicted].filter((v): v is number => typeof v === "number" && Number.isFinite(v));
  const lo = Math.min(1, ...values);
  const hi = Math.max(lo + 0.5, ...values.map((v) => v + 0.1));
  return [Math.floor(lo * 10) / 10, Math.ceil(hi * 10) / 10];
}

/** DLWA per interval (left) and the write rate (right), the predicted DLWA as a reference line. */
export function DlwaChart({ rows, predicted }: { rows: DlwaRow[]; predicted: number | null }) {
  const writeTicks = sizeTicks(Math.max(0, ...rows.map((r) => r.write)));
  return (
    <TimeChart
      rows={rows}
      testId="dlwa-chart"
      what="DLWA over time"
      width={W + 120}
      height={H + 20}
      left={{ format: (v) => v.toFixed(2), domain: dlwaDomain(rows, predicted) }}
      right={{ format: (v) => `${bytes(v)}/s`, domain: [0, writeTicks[writeTicks.length - 1]], ticks: writeTicks }}
      lines={[
        { key: "dlwa", name: "DLWA measured", color: "#ea580c" },
        { key: "write", name: "host writes", color: "#94a3b8", axis: "right" },
      ]}
      refs={predicted == null ? [] : [{ y: predicted, label: `predicted ${predicted.toFixed(2)}`, color: "#7c3aed" }]}
    />
  );
}
