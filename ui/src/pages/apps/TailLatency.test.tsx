import { describe, expect, it } from "vitest";
import { render, screen, within } from "@testing-library/react";
import { TailLatencyTable, type TailLatencyStage } from "./TailLatency";

const MiB = 1 << 20;
const DB: TailLatencyStage = {
  stage: "route/db", tenant: "db", endpoint: "tcp://10.0.0.1:7070/db", alpha: 3, state: "reclaiming", slow: false,
  requests: 4096, recent_us: 180.4, mean_us: 120, baseline_us: 110, forwarded_to: "tcp://10.0.0.2:7070/spill",
  forwards: 1, reclaims: 1, forwarded_bytes: 4 * MiB, held_bytes: 1 * MiB, reclaimed_bytes: 3 * MiB, reclaim_progress: 0.75,
};

describe("TailLatency", () => {
  it("shows the state, latency, bytes forwarded and the reclaim's progress", () => {
    render(<TailLatencyTable stages={[DB]} />);
    const row = within(screen.getByTestId("tail-latency-route/db"));
    expect(row.getByTestId("state").textContent).toBe("reclaiming");
    expect(row.getByTestId("latency").textContent).toContain("180 µs / 120 µs");
    expect(row.getByTestId("forwarded").textContent).toBe("4 MiB");
    expect(row.getByTestId("progress").textContent).toBe("0.75");
  });

  it("says when no stage routes to servers", () => {
    render(<TailLatencyTable stages={[]} />);
    expect(screen.getByText("No tail_latency stage routes to remote servers.")).toBeTruthy();
  });
});
