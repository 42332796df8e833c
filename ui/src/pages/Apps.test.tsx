import { describe, expect, it } from "vitest";
import { render, screen, within } from "@testing-library/react";
import { App } from "../App";
import { fakeController, wrap } from "../test-controller";
import type { DeclaredJob } from "./apps/DeclaredIo";

const MiB = 1 << 20;
const JOB: DeclaredJob = {
  id: "scrub-set", host: "host-a", tenant: "archive", files: [{ path: "/mnt/set", offset: 0, length: null }],
  deadline: "2026-11-25T12:00:00Z", pace: "deadline", paused: false, rate_bytes_per_s: null, source: null,
  state: "running", bytes_declared: 8 * MiB, dispatched_bytes: 2 * MiB, foreground_bytes: 4 * MiB, shared_bytes: 0,
  covered_bytes: 6 * MiB, error: null, checksums: null, created_at: "2026-11-25T07:00:00Z", created_by: "anonymous",
  reported_at: null, finished_at: null,
};

describe("applications page", () => {
  it("is in the navigation and shows the declared jobs", async () => {
    sessionStorage.setItem("lachesis.token", "good");
    window.location.hash = "#/apps";
    render(wrap(<App />, fakeController({ routes: { "/api/v1/apps/declared-io": [JOB] } })));
    const row = within(await screen.findByTestId("declared-scrub-set"));
    expect(row.getByTestId("dispatched").textContent).toBe("2 MiB");
    expect(row.getByTestId("foreground").textContent).toBe("4 MiB");
    expect(screen.getByTestId("nav-apps").className).toBe("current");
  });
});
