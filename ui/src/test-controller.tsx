// Unit tests' stand-in for the controller: a fetch answering from a table of GET paths, 401
// without the token "good", 403 to a viewer's writes, and 404 (problem+json) for the rest.
import { vi } from "vitest";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import type { ReactNode } from "react";
import { SessionProvider } from "./api/session";

export const HOST = {
  id: "host-a",
  agent_version: "0.1.0",
  capabilities: {
    cpus: 2,
    devices: [{ name: "flash0", path: "/tmp/f.img", kind: "file", size_bytes: 67108864, fdp: false, placement_handles: 0 }],
    kernel: { release: "6.1.0", btf: true, io_uring: true, fuse: false },
  },
  enrolled_at: "2026-01-01T00:00:00Z",
  registered_at: "2026-01-01T00:00:00Z",
  last_seen: new Date().toISOString(),
  alive: true,
  desired_generation: 2,
  acked_generation: 2,
};

export const tenant = (name: string) => ({ name, classifiers: [], description: null, created_at: "", updated_at: "" });

export function fakeController({
  viewer = false,
  routes = {} as Record<string, unknown>,
  refusals = {} as Record<string, { status: number; detail: string }>,
} = {}) {
  const table: Record<string, unknown> = {
    "/openapi.json": { paths: Object.fromEntries(Object.keys(routes).map((p) => [p.split("?")[0], {}])) },
    "/api/v1/hosts": [HOST],
    "/api/v1/tenants": [tenant("analytics")],
    "/api/v1/rules": [],
    ...routes,
  };
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
    if (u in refusals) return json(refusals[u].status, { title: "Refused", ...refusals[u] });
    if (u in table) return json(200, table[u]);
    if (u.startsWith("/api/v1/rollouts")) return json(200, []);
    return json(404, { title: "Not Found", status: 404, detail: u });
  });
}

export function wrap(children: ReactNode, fetchImpl: ReturnType<typeof fakeController>) {
  const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  return (
    <QueryClientProvider client={qc}>
      <SessionProvider fetchImpl={fetchImpl as unknown as typeof fetch}>{children}</SessionProvider>
    </QueryClientProvider>
  );
}
