import { describe, expect, it } from "vitest";
import { hostChanges, policyDiagnostics, policySyntax, summary } from "./policy";

const POLICY = `apiVersion: lachesis.dev/v1
kind: Policy
metadata:
  name: p
spec:
  tenants:
    - name: alpha
      classifiers: [{kind: cgroup, value: /a}]
  rules:
    - name: alpha-cached
      priority: 10
      match: {tenant: alpha}
      detours: [{what: io, to: {kind: stage, target: cache/alpha}}]
    - name: alpha-late
      priority: 20
      match: {tenant: alpha}
      detours: [{what: io, to: {kind: stage, target: cache/alpha}}]
`;

const problem = (errors: unknown[], detail = "refused", status = 422) => ({ type: "x", title: "t", status, detail, errors } as never);

describe("policy diagnostics", () => {
  it("finds syntax errors before sending", () => {
    expect(policySyntax(POLICY)).toEqual([]);
    expect(policySyntax("spec:\n  match:\n    tenant: a\n   ops: [read]\n")[0].line).toBe(4);
    expect(policySyntax("  \n")[0].message).toBe("empty document");
  });

  it("use the controller's line when it gives one", () => {
    const d = policyDiagnostics(POLICY, problem([{ field: "spec.rules[0].priority", message: "bad", line: 11, column: 17 }]));
    expect(d).toEqual([{ line: 11, message: "spec.rules[0].priority: bad" }]);
  });

  it("map a field path to its line when there is no line", () => {
    const d = policyDiagnostics(POLICY, problem([{ field: "spec.rules[1].match.tenant", message: "no tenant named 'x'" }]));
    expect(d[0].line).toBe(16);
  });

  it("place a verifier finding at the first rule it names", () => {
    const d = policyDiagnostics(POLICY, problem([{ field: "rules.alpha-late,alpha-cached", message: "shadowed: never matches" }]));
    expect(d[0]).toMatchObject({ line: 14, message: "rules.alpha-late,alpha-cached: shadowed: never matches" });
  });

  it("read a line out of a detail without field errors, and blame no line for a 403", () => {
    expect(policyDiagnostics(POLICY, problem([], "malformed YAML at line 4 column 2: x", 400))).toEqual([
      { line: 4, message: "malformed YAML at line 4 column 2: x" },
    ]);
    expect(policyDiagnostics(POLICY, problem([], "viewer", 403))).toEqual([]);
  });
});

describe("dry-run diff", () => {
  const diff = {
    tenants: { added: [{ name: "alpha" }], removed: [], changed: [] },
    rules: { added: [{ name: "r1" }], removed: ["old"], changed: [{ name: "r2", before: {}, after: {} }] },
    hosts: {
      "host-b": { rules: { added: [], removed: ["old"], changed: [] }, stages: { added: [], removed: [], changed: [] } },
      "host-a": { rules: { added: [{ name: "r1" }], removed: [], changed: [] }, stages: { added: [{ name: "cache/alpha" }], removed: [], changed: [] } },
    },
  };

  it("lists each host's changes by name, hosts sorted", () => {
    expect(hostChanges(diff)).toEqual([
      { host: "host-a", rules: { added: ["r1"], removed: [], changed: [] }, stages: { added: ["cache/alpha"], removed: [], changed: [] } },
      { host: "host-b", rules: { added: [], removed: ["old"], changed: [] }, stages: { added: [], removed: [], changed: [] } },
    ]);
    expect(hostChanges(null)).toEqual([]);
  });

  it("summarises the whole change", () => {
    expect(summary(diff)).toEqual({
      tenants: { added: ["alpha"], removed: [], changed: [] },
      rules: { added: ["r1"], removed: ["old"], changed: ["r2"] },
      stages: { added: [], removed: [], changed: [] },
    });
  });
});
