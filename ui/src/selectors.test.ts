import { describe, expect, it } from "vitest";
import type { HostOut, RolloutOut, RuleOut } from "./api/types";
import { describeDetours, describeMatch, evaluationOrder, failingChecks, frontEnd, referenceUnit, rulesForHost, rulesForTenant, tenantStages } from "./selectors";

const rule = (name: string, priority: number, extra: Partial<RuleOut> = {}): RuleOut => ({
  name,
  priority,
  hosts: null,
  match: { tenant: "a" },
  detours: [{ what: "io", to: { kind: "stage", target: "cache/a" } }],
  created_at: "",
  updated_at: "",
  ...extra,
});

const host = (id: string, extra: Partial<HostOut> = {}): HostOut => ({
  id,
  agent_version: "0.1.0",
  capabilities: { cpus: 2, devices: [], kernel: { release: "6.1", btf: true, io_uring: true, fuse: true } },
  enrolled_at: "",
  registered_at: "",
  last_seen: "2026-01-01T00:00:00Z",
  alive: true,
  desired_generation: 3,
  acked_generation: 3,
  ...extra,
});

describe("rule order", () => {
  it("is ascending priority, then name: the agents' first-match order", () => {
    const rules = [rule("b", 10), rule("a", 10), rule("z", 1)];
    expect(evaluationOrder(rules).map((r) => r.name)).toEqual(["z", "a", "b"]);
    expect(rules.map((r) => r.name)).toEqual(["b", "a", "z"]); // not sorted in place
  });

  it("per host keeps the rules for every host and those naming it", () => {
    const rules = [rule("all", 5), rule("only-b", 1, { hosts: ["b"] }), rule("a-and-b", 2, { hosts: ["a", "b"] })];
    expect(rulesForHost(rules, "a").map((r) => r.name)).toEqual(["a-and-b", "all"]);
    expect(rulesForHost(rules, "b").map((r) => r.name)).toEqual(["only-b", "a-and-b", "all"]);
  });

  it("per tenant keeps the rules matching it", () => {
    expect(rulesForTenant([rule("x", 1), rule("y", 1, { match: { tenant: "other" } })], "a").map((r) => r.name)).toEqual(["x"]);
  });
});

describe("failingChecks", () => {
  const rollout = (state: RolloutOut["state"]): RolloutOut => ({
    id: "r1",
    state,
    reason: state === "succeeded" ? null : "deadline passed",
    cause: "rule x created",
    phase: null,
    rolled_back_by: null,
    traceparent: null,
    created_at: "",
    deadline: "",
    completed_at: null,
    targets: [{ host_id: "a", generation: 4, status: "pending", phase: "install", drained_at: null, acked_at: null, reason: null }],
  });

  it("is empty when all is well", () => {
    expect(failingChecks([host("a")], [rollout("succeeded")], { database: "ok", redis: "ok" })).toEqual([]);
  });

  it("names dead, unknown and lagging hosts, failed rollouts and failed readiness checks", () => {
    const checks = failingChecks(
      [host("dead", { alive: false }), host("unknown", { alive: null }), host("behind", { acked_generation: 2 })],
      [rollout("timed_out")],
      { database: "ok", redis: "unreachable" },
    );
    expect(checks.map((c) => c.what)).toEqual(["controller redis", "host dead", "host unknown", "host behind", "rollout r1"]);
    expect(checks[3].detail).toBe("at generation 2, desired 3");
    expect(checks[4].detail).toContain("timed_out (deadline passed)");
    expect(checks[4].detail).toContain("a: pending");
  });
});

describe("descriptions", () => {
  it("describe a rule's match and detours", () => {
    const r = rule("x", 1, { match: { tenant: "a", ops: ["read", "write"], path_prefix: "/data/", range: { start: 0, end: 4096 } } });
    expect(describeMatch(r)).toBe("tenant=a ops=read,write path=/data/* bytes=[0,4096)");
    expect(describeMatch(rule("y", 1, { match: {} }))).toBe("any IO");
    expect(describeDetours(r)).toBe("io → stage:cache/a");
  });
});

describe("tenantStages", () => {
  it("lists the stages a tenant owns or shares, with their policy", () => {
    const policies = [
      { name: "p1", compiled: { stages: [{ name: "cache/b", kind: "cache", owner: "b", size_bytes: 2 }, { name: "cache/a", kind: "cache", owner: "a", size_bytes: 1 }] } },
      { name: "p2", compiled: { stages: [{ name: "shared", kind: "cache", owner: null, shared_with: ["a", "c"] }, null] } },
      { name: "p3" },
    ];
    expect(tenantStages(policies, "a").map((s) => [s.name, s.policy])).toEqual([["cache/a", "p1"], ["shared", "p2"]]);
    expect(tenantStages(policies, "z")).toEqual([]);
  });
});

describe("frontEnd", () => {
  it("is the key-value front end for a tenant classified by key prefix, else the file data path", () => {
    const kv = { classifiers: [{ kind: "key_prefix" as const, value: "sess:" }] };
    const files = { classifiers: [{ kind: "cgroup" as const, value: "/a" }] };
    expect(frontEnd(kv)).toBe("kv");
    expect(frontEnd(files)).toBe("files");
    expect(frontEnd({ classifiers: [] })).toBe("files");
    expect(referenceUnit(kv)).toBe("key-value requests");
    expect(referenceUnit(files)).toBe("4 KiB references");
    expect(referenceUnit(undefined)).toBe("4 KiB references");
  });
});
