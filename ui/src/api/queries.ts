// TanStack Query hooks over the REST API. Every read polls (live updates without reloading);
// every write invalidates what it changes.

import { useMutation, useQuery, useQueryClient, type UseQueryOptions } from "@tanstack/react-query";
import { useSession } from "./session";
import { orNoData } from "./client";
import type {
  Allocation,
  AuditEvent,
  DeviceOut,
  HostOut,
  Placement,
  PolicyOut,
  Readiness,
  RolloutOut,
  RuleChange,
  RuleOut,
  RuleSpec,
  StageOut,
  TelemetrySummary,
  TenantOut,
  TenantTelemetry,
} from "./types";

export const POLL_MS = 2000;

export const keys = {
  hosts: ["hosts"] as const,
  host: (id: string) => ["hosts", id] as const,
  tenants: ["tenants"] as const,
  tenant: (name: string) => ["tenants", name] as const,
  rules: ["rules"] as const,
  rollouts: (limit: number) => ["rollouts", "list", limit] as const,
  rollout: (id: string) => ["rollouts", "one", id] as const,
  readiness: ["readyz"] as const,
  policies: ["policies"] as const,
  audit: ["audit"] as const,
  tenantTelemetry: (name: string) => ["telemetry", "tenant", name] as const,
  telemetrySummary: ["telemetry", "summary"] as const,
  allocations: ["allocations"] as const,
  placements: ["placements"] as const,
  stages: ["stages"] as const,
  devices: ["devices"] as const,
};

function usePolled<T>(key: readonly unknown[], path: string, opts: Partial<UseQueryOptions<T>> = {}) {
  const { client, token, noteError } = useSession();
  return useQuery<T>({
    queryKey: [...key, token],
    queryFn: () => client.get<T>(path).catch((e) => Promise.reject(noteError(e, false))),
    refetchInterval: POLL_MS,
    ...opts,
  });
}

/** Like usePolled, for data the controller may not have yet: a 404 is null ("no data yet"). */
function usePolledOptional<T>(key: readonly unknown[], path: string, enabled = true) {
  const { client, token, noteError } = useSession();
  return useQuery<T | null>({
    queryKey: [...key, token],
    queryFn: () => orNoData(client.get<T>(path)).catch((e) => Promise.reject(noteError(e, false))),
    refetchInterval: POLL_MS,
    enabled,
  });
}

export const useHosts = () => usePolled<HostOut[]>(keys.hosts, "/api/v1/hosts");
export const useTenants = () => usePolled<TenantOut[]>(keys.tenants, "/api/v1/tenants");
export const useTenant = (name: string) => usePolled<TenantOut>(keys.tenant(name), `/api/v1/tenants/${encodeURIComponent(name)}`);
export const useRules = () => usePolled<RuleOut[]>(keys.rules, "/api/v1/rules");
export const useRollouts = (limit = 10) => usePolled<RolloutOut[]>(keys.rollouts(limit), `/api/v1/rollouts?limit=${limit}`);
export const useRollout = (id: string | null) =>
  usePolled<RolloutOut>(keys.rollout(id ?? ""), `/api/v1/rollouts/${encodeURIComponent(id ?? "")}`, {
    enabled: !!id,
  });
export const usePolicies = (enabled = true) => usePolled<PolicyOut[]>(keys.policies, "/api/v1/policies", { enabled });
export const useAudit = (limit = 20, enabled = true) => usePolled<AuditEvent[]>(keys.audit, `/api/v1/audit?limit=${limit}`, { enabled });
export const useTenantTelemetry = (name: string, enabled = true) =>
  usePolledOptional<TenantTelemetry>(keys.tenantTelemetry(name), `/api/v1/tenants/${encodeURIComponent(name)}/telemetry`, enabled && !!name);
export const useTelemetrySummary = () => usePolledOptional<TelemetrySummary>(keys.telemetrySummary, "/api/v1/telemetry/summary");
export const useAllocations = () => usePolledOptional<Allocation[]>(keys.allocations, "/api/v1/allocations");
export const usePlacements = (enabled = true) => usePolledOptional<Placement[]>(keys.placements, "/api/v1/placements", enabled);
/** Every stage the token may see, with each host's allocated and installed size, counters and series. */
export const useStages = (enabled = true) => usePolledOptional<StageOut[]>(keys.stages, "/api/v1/stages", enabled);
/** Every device with its measured and predicted DLWA (a tenant token is refused: 403). */
export const useDevices = (enabled = true) => usePolledOptional<DeviceOut[]>(keys.devices, "/api/v1/devices", enabled);
export const useReadiness = () =>
  useQuery<Readiness>({
    queryKey: keys.readiness,
    // /readyz answers 503 with the same body when a check fails; show it rather than throw.
    queryFn: async () => {
      const r = await fetch("/readyz").catch(() => null);
      if (!r) return { status: "unreachable", checks: { controller: "unreachable" } };
      try {
        return (await r.json()) as Readiness;
      } catch {
        return { status: String(r.status), checks: {} };
      }
    },
    refetchInterval: POLL_MS,
  });

export function useWrite() {
  const { client, noteError } = useSession();
  const qc = useQueryClient();
  const invalidate = () => qc.invalidateQueries();
  return {
    createRule: useMutation({
      mutationFn: (spec: RuleSpec) => client.post<RuleChange>("/api/v1/rules", spec).catch((e) => Promise.reject(noteError(e))),
      onSuccess: invalidate,
    }),
    deleteRule: useMutation({
      mutationFn: (name: string) =>
        client.delete<RuleChange>(`/api/v1/rules/${encodeURIComponent(name)}`).catch((e) => Promise.reject(noteError(e))),
      onSuccess: invalidate,
    }),
  };
}
