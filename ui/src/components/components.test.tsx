import { describe, expect, it, vi } from "vitest";
import { fireEvent, render, screen, waitFor } from "@testing-library/react";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import type { ReactNode } from "react";
import { SessionProvider, accessFrom } from "../api/session";
import { App } from "../App";
import { CurveChart, curvePoints, missAt } from "./CurveChart";
import { toCodeMirror } from "./YamlEditor";
import { ago, bytes } from "./common";
import { parseRoute, href } from "../router";
import { ruleFromForm } from "../pages/Rules";

const HOST = {
  id: "host-a",
  agent_version: "0.1.0",
  capabilities: { cpus: 2, devices: [{ name: "flash0", path: "/tmp/f.img", kind: "file", size_bytes: 67108864, fdp: false, placement_handles: 0 }], kernel: { release: "6.1.0", btf: true, io_uring: true, fuse: false } },
  enrolled_at: "2026-01-01T00:00:00Z",
  registered_at: "2026-01-01T00:00:00Z",
  last_seen: new Date().toISOString(),
  alive: true,
  desired_generation: 2,
  acked_generation: 2,
};

/** A fake controller accepting token "good"; writes answer 403 for a viewer. */
function fakeController({ viewer = false } = {}) {
  return vi.fn(async (url: RequestInfo | URL, init?: RequestInit) => {
    const u = String(url);
    const auth = (init?.headers as Record<string, string> | undefined)?.Authorization;
    const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
    if (u.startsWith("/api/") && auth !== "Bearer good") return json(401, { title: "Unauthorized", status: 401, detail: "missing or wrong bearer token" });
    const method = init?.method ?? "GET";
    if (method !== "GET") {
      if (viewer) return json(403, { title: "Forbidden", status: 403, detail: "token:v (viewer) may not change anything" });
      return json(201, { name: "x", rollout_id: "r9" });
    }
    if (u === "/openapi.json") return json(200, { paths: {} });
    if (u === "/api/v1/hosts") return json(200, [HOST]);
    if (u === "/api/v1/tenants") return json(200, [{ name: "analytics", classifiers: [], description: null, created_at: "", updated_at: "" }]);
    if (u === "/api/v1/rules") return json(200, []);
    if (u.startsWith("/api/v1/rollouts")) return json(200, []);
    return json(404, { title: "Not Found", status: 404, detail: u });
  });
}

function wrap(children: ReactNode, fetchImpl: ReturnType<typeof fakeController>) {
  const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  return (
    <QueryClientProvider client={qc}>
      <SessionProvider fetchImpl={fetchImpl as unknown as typeof fetch}>{children}</SessionProvider>
    </QueryClientProvider>
  );
}

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

  it("cleans and interpolates points", () => {
    const pts = curvePoints({ points: [{ size_bytes: 100, miss_ratio: 1.5 }, { size_bytes: 0, miss_ratio: 1 }, { size_bytes: NaN, miss_ratio: 0 }, { size_bytes: 200, miss_ratio: 0 }] });
    expect(pts).toEqual([{ size: 0, miss: 1 }, { size: 100, miss: 1 }, { size: 200, miss: 0 }]);
    expect(missAt(pts, 150)).toBe(0.5);
    expect(missAt(pts, 999)).toBe(0);
    expect(missAt([], 1)).toBeNull();
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
    for (const r of [{ page: "overview" }, { page: "policies" }, { page: "tenants", name: "a b" }, { page: "hosts", id: "h1" }, { page: "rules", rollout: "r1" }, { page: "editor" }] as const) {
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
