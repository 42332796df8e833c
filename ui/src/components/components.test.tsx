import { describe, expect, it } from "vitest";
import { fireEvent, render, screen, waitFor } from "@testing-library/react";
import { accessFrom } from "../api/session";
import { fakeController, wrap } from "../test-controller";
import { App } from "../App";
import { CurveChart, curvePoints, logTicks, missAt } from "./CurveChart";
import { toCodeMirror } from "./YamlEditor";
import { ago, bytes, ratio, size } from "./common";
import { Loaded } from "./Loaded";
import { ApiError } from "../api/client";
import { parseRoute, href } from "../router";
import { ruleFromForm } from "../pages/Rules";
import { DlwaChart, StageHitChart, StageSizeChart, dlwaDomain, sizeTicks } from "./LoopCharts";
import { SeriesChart } from "./SeriesChart";
import { dlwaRows, stageRows } from "../stages";
import { DEVICES, STAGES } from "../test-controller";

describe("login", () => {
  it("refuses a wrong token and keeps nothing", async () => {
    render(wrap(<App />, fakeController()));
    fireEvent.change(screen.getByTestId("token"), { target: { value: "bad" } });
    fireEvent.click(screen.getByTestId("login"));
    expect(await screen.findByTestId("login-error")).toHaveProperty("textContent", "The controller refused this token.");
    expect(sessionStorage.getItem("lachesis.token")).toBeNull();
  });

  it("keeps a good token in sessionStorage and shows the overview", async () => {
    window.location.hash = "#/";
    render(wrap(<App />, fakeController()));
    fireEvent.change(screen.getByTestId("token"), { target: { value: "good" } });
    fireEvent.click(screen.getByTestId("login"));
    expect(await screen.findByTestId("host-row-host-a")).toBeTruthy();
    expect(sessionStorage.getItem("lachesis.token")).toBe("good");
    expect(screen.getByTestId("host-alive").textContent).toBe("alive");
    expect(screen.getByTestId("host-generation").textContent).toBe("2 / 2");
  });
});

describe("write buttons", () => {
  it("turn disabled and say why once the controller answers 403", async () => {
    sessionStorage.setItem("lachesis.token", "good");
    window.location.hash = "#/rules";
    render(wrap(<App />, fakeController({ viewer: true })));
    const create = await screen.findByTestId("rf-create");
    fireEvent.change(screen.getByTestId("rf-name"), { target: { value: "x" } });
    fireEvent.change(screen.getByTestId("rf-target"), { target: { value: "cache/a" } });
    fireEvent.click(create);
    await waitFor(() => expect((screen.getByTestId("rf-create") as HTMLButtonElement).disabled).toBe(true));
    expect(screen.getByTestId("write-disabled-reason").textContent).toContain("viewer");
    expect(screen.getByTestId("rf-create").getAttribute("title")).toContain("may not change anything");
  });

  it("are off for a viewer per whoami, on for operators and unknown answers", () => {
    expect(accessFrom({ role: "viewer", tenant: null }).canWrite).toBe(false);
    expect(accessFrom({ actor: "token:v", role: "viewer", tenant: null, write_refusal: "token:v (viewer) may not change anything" })).toMatchObject({
      canWrite: false,
      reason: "token:v (viewer) may not change anything",
      actor: "token:v",
    });
    expect(accessFrom({ actor: "token:o", role: "operator", tenant: "a", write_refusal: null })).toMatchObject({ canWrite: true, reason: null });
    expect(accessFrom({ role: "operator", tenant: "a" })).toMatchObject({ canWrite: true, tenant: "a" });
    expect(accessFrom(null).canWrite).toBe(true);
  });
});

describe("CurveChart", () => {
  it("says no curve was reported rather than drawing one", () => {
    render(<CurveChart curve={null} />);
    expect(screen.getByTestId("curve-empty").textContent).toMatch(/No miss-ratio curve reported yet/);
  });

  it("draws a reported curve and the expected hit rate at the allocated size", () => {
    const curve = { points: [{ size_bytes: 0, miss_ratio: 1 }, { size_bytes: 1 << 30, miss_ratio: 0.2 }], allocated_bytes: 1 << 29 };
    render(<CurveChart curve={curve} />);
    expect(screen.getByTestId("curve").querySelector("svg")).toBeTruthy();
    expect(screen.getByText(/Allocated 512 MiB: expected hit rate 40.0%/)).toBeTruthy();
  });

  it("marks a proposed size apart from the allocated one", () => {
    const curve = { points: [{ size_bytes: 0, miss_ratio: 1 }, { size_bytes: 1 << 30, miss_ratio: 0.2 }], allocated_bytes: 1 << 29, proposed_bytes: 1 << 30 };
    render(<CurveChart curve={curve} />);
    expect(screen.getByTestId("curve-caption").textContent).toBe("Allocated 512 MiB: expected hit rate 40.0%; proposed 1 GiB: 80.0%");
  });

  it("says when the tenant has no cache yet", () => {
    render(<CurveChart curve={{ points: [{ size_bytes: 1, miss_ratio: 1 }, { size_bytes: 2, miss_ratio: 0.5 }] }} />);
    expect(screen.getByTestId("curve-caption").textContent).toBe("No cache allocated to this tenant yet");
  });

  it("puts log-axis ticks on powers of two around the sizes, at most seven", () => {
    expect(logTicks(1 << 20, 1 << 26)).toEqual([1 << 20, 1 << 21, 1 << 22, 1 << 23, 1 << 24, 1 << 25, 1 << 26]);
    const wide = logTicks(1 << 20, 2 ** 40);
    expect(wide.length).toBeLessThanOrEqual(7);
    expect(wide[0]).toBe(1 << 20);
    expect(wide[wide.length - 1]).toBeGreaterThanOrEqual(2 ** 40);
    expect(logTicks(3e6, 5e6)).toEqual([2 ** 21, 2 ** 22, 2 ** 23]);
    expect(logTicks(1 << 20, 1 << 27)).toEqual([1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28]);
  });

  it("cleans and interpolates points", () => {
    const pts = curvePoints({ points: [{ size_bytes: 100, miss_ratio: 1.5 }, { size_bytes: 0, miss_ratio: 1 }, { size_bytes: NaN, miss_ratio: 0 }, { size_bytes: 200, miss_ratio: 0 }] });
    expect(pts).toEqual([{ size: 0, miss: 1 }, { size: 100, miss: 1 }, { size: 200, miss: 0 }]);
    expect(missAt(pts, 150)).toBe(0.5);
    expect(missAt(pts, 999)).toBe(0);
    expect(missAt([], 1)).toBeNull();
  });
});

describe("loop charts", () => {
  const rows = stageRows(STAGES[0].hosts[0].series);

  it("draw a stage's measured hit ratio with the prediction as a reference line", () => {
    render(<StageHitChart rows={rows} predicted={0.7} />);
    const chart = screen.getByTestId("stage-hit-chart");
    expect(chart.querySelector("svg")).toBeTruthy();
    expect(chart.textContent).toContain("predicted 70.0%");
    expect(chart.textContent).toContain("measured hit ratio");
  });

  it("draw the allocated and installed size over time", () => {
    render(<StageSizeChart rows={rows} />);
    const chart = screen.getByTestId("stage-size-chart");
    expect(chart.textContent).toContain("allocated");
    expect(chart.textContent).toContain("installed");
  });

  it("draw a device's DLWA with the broker's prediction", () => {
    render(<DlwaChart rows={dlwaRows(DEVICES[0].series)} predicted={1.1} />);
    expect(screen.getByTestId("dlwa-chart").textContent).toContain("predicted 1.10");
  });

  it("put size ticks on power-of-two steps from 0 past the largest size", () => {
    const MiB = 1 << 20;
    expect(sizeTicks(96 * MiB)).toEqual([0, 32, 64, 96].map((m) => m * MiB));
    expect(sizeTicks(64 * MiB)).toEqual([0, 16, 32, 48, 64].map((m) => m * MiB));
    expect(sizeTicks(100 * MiB)).toEqual([0, 32, 64, 96, 128].map((m) => m * MiB));
    expect(sizeTicks(0)).toEqual([0, 1]);
  });

  it("put the DLWA axis from 1 past what was measured and predicted", () => {
    expect(dlwaDomain([], null)).toEqual([1, 1.5]);
    expect(dlwaDomain([], 2.28)).toEqual([1, 2.4]);
    expect(dlwaDomain(dlwaRows(DEVICES[0].series), 1.1)).toEqual([1, 1.5]);
    expect(dlwaDomain([{ t: 0, dlwa: 0.95, write: 1 }, { t: 1, dlwa: 3.04, write: 1 }], null)).toEqual([0.9, 3.2]);
  });

  it("say so rather than draw one sample or none", () => {
    render(<StageHitChart rows={rows.slice(0, 1)} predicted={0.7} />);
    expect(screen.getByTestId("stage-hit-chart-empty").textContent).toBe("Hit ratio over time: one sample so far");
    render(<DlwaChart rows={[]} predicted={null} />);
    expect(screen.getByTestId("dlwa-chart-empty").textContent).toBe("DLWA over time: not reported yet");
    render(<SeriesChart rows={[]} />);
    expect(screen.getByTestId("series-empty").textContent).toBe("Hit rate and IOPS over time: not reported yet");
  });
});

describe("helpers", () => {
  it("place editor diagnostics on whole lines or given ranges", () => {
    const text = "a: 1\nbb: 2\n";
    expect(toCodeMirror(text, [{ line: 2, message: "bad" }])).toEqual([{ from: 5, to: 10, severity: "error", message: "line 2: bad" }]);
    expect(toCodeMirror(text, [{ line: 1, message: "x", from: 3, to: 4 }])[0]).toMatchObject({ from: 3, to: 4 });
    expect(toCodeMirror(text, [{ line: 99, message: "past the end" }])[0].from).toBeLessThanOrEqual(text.length);
  });

  it("route hashes both ways", () => {
    for (const r of [{ page: "overview" }, { page: "policies" }, { page: "tenants", name: "a b" }, { page: "hosts", id: "h1" }, { page: "rules", rollout: "r1" }, { page: "editor" }, { page: "stages" }, { page: "devices" }] as const) {
      expect(parseRoute(href(r))).toEqual(r);
    }
    expect(parseRoute("#/nonsense")).toEqual({ page: "overview" });
  });

  it("build a rule from the form", () => {
    expect(ruleFromForm({ name: " r ", priority: "5", tenant: "", ops: ["read"], path: "/d/", kind: "stage", target: "cache/a" })).toEqual({
      name: "r",
      priority: 5,
      hosts: null,
      match: { tenant: null, ops: ["read"], path_prefix: "/d/" },
      detours: [{ what: "io", to: { kind: "stage", target: "cache/a" } }],
    });
  });

  it("format sizes and ages", () => {
    expect(bytes(67108864)).toBe("64 MiB");
    expect(bytes(1536)).toBe("1.5 KiB");
    expect(ago("2026-01-01T00:00:00Z", Date.parse("2026-01-01T00:02:00Z"))).toBe("2m ago");
    expect(ago(null)).toBe("—");
  });
});

describe("figures that may be missing", () => {
  it("show a dash for a size or ratio not reported, or a ratio that is no number (the hosts page printed NaN)", () => {
    expect(size(3 << 20)).toBe("3 MiB");
    expect(size(null)).toBe("—");
    expect(ratio(1.256)).toBe("1.26");
    expect([ratio(null), ratio(undefined), ratio(Number.NaN), ratio(Number.POSITIVE_INFINITY)]).toEqual(["—", "—", "—", "—"]);
  });
});

describe("Loaded", () => {
  const show = (query: { data: string[] | null | undefined; error: unknown }, missing?: { what: string; absent?: boolean }) =>
    render(
      <Loaded query={query} what="hosts" empty="No hosts." missing={missing}>
        {(list) => <p data-testid="data">{list.join(",")}</p>}
      </Loaded>,
    ).container.textContent;
  const refused = new ApiError({ type: "about:blank", title: "Refused", status: 503, detail: "database unavailable" });

  it("says loading until the first answer, not that the list is empty", () => {
    expect(show({ data: undefined, error: null })).toBe("Loading hosts…");
    expect(show({ data: [], error: null })).toBe("No hosts.");
    expect(show({ data: ["a", "b"], error: null })).toBe("a,b");
  });

  it("shows the error alone before any answer, and above the last answer after one", () => {
    expect(show({ data: undefined, error: refused })).toBe("Refused: database unavailable");
    expect(show({ data: ["a"], error: refused })).toBe("Refused: database unavailable" + "a");
  });

  it("says not reported where the controller has no such data or no such endpoint", () => {
    const missing = { what: "Hosts" };
    expect(show({ data: null, error: null }, missing)).toBe("Hosts: not reported yet");
    expect(show({ data: undefined, error: null }, { ...missing, absent: true })).toBe("Hosts: not reported yet");
  });
});
