// Derived views of API objects that several pages share (rule order, rules per host or
// tenant, failing checks, descriptions of matches and detours).
import type { HostOut, RolloutOut, RuleOut, TenantOut } from "./api/types";

/**
 * Which of an agent's front ends serves a tenant: the key-value front end (memcached protocol)
 * when a classifier recognises it by key prefix, else the file data path. What the agents
 * decide by too (docs/operations.md, "Key-value front end").
 */
export function frontEnd(tenant: Pick<TenantOut, "classifiers">): "kv" | "files" {
  return tenant.classifiers.some((c) => c.kind === "key_prefix") ? "kv" : "files";
}

/** What a tenant's curve counts as references: KV requests, or 4 KiB blocks of file IO. */
export function referenceUnit(tenant: Pick<TenantOut, "classifiers"> | undefined): string {
  return tenant && frontEnd(tenant) === "kv" ? "key-value requests" : "4 KiB references";
}

/** Rules in first-match order: ascending priority, then name (what the agents evaluate). */
export function evaluationOrder(rules: RuleOut[]): RuleOut[] {
  return [...rules].sort((a, b) => a.priority - b.priority || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** The rules installed on one host: those for every host (hosts null) and those naming it. */
export function rulesForHost(rules: RuleOut[], hostId: string): RuleOut[] {
  return evaluationOrder(rules.filter((r) => r.hosts == null || r.hosts.includes(hostId)));
}

export function rulesForTenant(rules: RuleOut[], tenant: string): RuleOut[] {
  return evaluationOrder(rules.filter((r) => r.match.tenant === tenant));
}

export type Check = { what: string; detail: string };

/** What needs an operator's attention: dead hosts, hosts behind, failed rollouts, readiness. */
export function failingChecks(hosts: HostOut[], rollouts: RolloutOut[], readiness?: Record<string, string>): Check[] {
  const out: Check[] = [];
  for (const [name, state] of Object.entries(readiness ?? {})) {
    if (state !== "ok") out.push({ what: `controller ${name}`, detail: state });
  }
  for (const h of hosts) {
    if (h.alive === false) out.push({ what: `host ${h.id}`, detail: `no heartbeat (last seen ${h.last_seen})` });
    else if (h.alive === null) out.push({ what: `host ${h.id}`, detail: "liveness unknown (Redis unreachable)" });
    if (h.alive && h.acked_generation < h.desired_generation) {
      out.push({ what: `host ${h.id}`, detail: `at generation ${h.acked_generation}, desired ${h.desired_generation}` });
    }
  }
  for (const r of rollouts) {
    if (r.state === "failed" || r.state === "timed_out") {
      const bad = r.targets.filter((t) => t.status !== "applied").map((t) => `${t.host_id}: ${t.reason ?? t.status}`);
      out.push({ what: `rollout ${r.id}`, detail: `${r.state}${r.reason ? ` (${r.reason})` : ""}${bad.length ? ` — ${bad.join("; ")}` : ""}` });
    }
  }
  return out;
}

export function describeMatch(r: RuleOut): string {
  const m = r.match;
  const parts: string[] = [];
  if (m.tenant) parts.push(`tenant=${m.tenant}`);
  if (m.ops?.length) parts.push(`ops=${m.ops.join(",")}`);
  if (m.path_prefix) parts.push(`path=${m.path_prefix}*`);
  if (m.key_prefix) parts.push(`key=${m.key_prefix}*`);
  if (m.range) parts.push(`bytes=[${m.range.start},${m.range.end})`);
  return parts.join(" ") || "any IO";
}

export function describeDetours(r: RuleOut): string {
  return r.detours.map((d) => `${d.what} → ${d.to.kind}:${d.to.target}`).join(", ");
}

export type Stage = { name: string; kind: string; owner?: string | null; shared_with?: string[]; size_bytes?: number; policy: string };

/** The stages (caches and others) policies in force declare for a tenant: owned or shared with it. */
export function tenantStages(policies: { name: string; compiled?: { stages?: unknown[] } }[], tenant: string): Stage[] {
  const out: Stage[] = [];
  for (const p of policies) {
    for (const raw of p.compiled?.stages ?? []) {
      if (!raw || typeof raw !== "object") continue;
      const s = raw as Omit<Stage, "policy">;
      if (s.owner === tenant || (Array.isArray(s.shared_with) && s.shared_with.includes(tenant))) out.push({ ...s, policy: p.name });
    }
  }
  return out.sort((a, b) => (a.name < b.name ? -1 : 1));
}
