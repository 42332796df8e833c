import { describe, expect, it } from "vitest";
import { render, screen, within } from "@testing-library/react";
import { DeclaredIoTable, saved, type DeclaredJob } from "./DeclaredIo";

const MiB = 1 << 20;
const JOB: DeclaredJob = {
  id: "scrub-set", host: "host-a", tenant: "archive", files: [{ path: "/mnt/set", offset: 0, length: null }],
  deadline: "2026-11-25T12:00:00Z", pace: "deadline", paused: false, rate_bytes_per_s: null, source: "scrub/archive",
  state: "done", bytes_declared: 8 * MiB, dispatched_bytes: 5 * MiB, foreground_bytes: 3 * MiB, shared_bytes: 0,
  covered_bytes: 8 * MiB, error: null, checksums: [], created_at: "2026-11-25T07:00:00Z", created_by: "scrub:scrub/archive",
  reported_at: "2026-11-25T07:10:00Z", finished_at: "2026-11-25T07:10:00Z",
};

describe("DeclaredIo", () => {
  it("shows each job's dispatcher and foreground bytes and what it did not read", () => {
    render(<DeclaredIoTable jobs={[JOB, { ...JOB, id: "fresh", state: "pending", bytes_declared: null, dispatched_bytes: 0, foreground_bytes: 0 }]} />);
    const row = within(screen.getByTestId("declared-scrub-set"));
    expect(row.getByTestId("dispatched").textContent).toBe("5 MiB");
    expect(row.getByTestId("foreground").textContent).toBe("3 MiB");
    expect(row.getByTestId("saved").textContent).toBe("38%");
    expect(within(screen.getByTestId("declared-fresh")).getByTestId("saved").textContent).toBe("—");
  });

  it("says when there are none", () => {
    render(<DeclaredIoTable jobs={[]} />);
    expect(screen.getByText("No declared jobs.")).toBeTruthy();
    expect(saved({ ...JOB, bytes_declared: 0 })).toBe("—");
  });
});
