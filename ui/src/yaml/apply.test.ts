import { describe, expect, it, vi } from "vitest";
import { ApiClient } from "../api/client";
import { applyText } from "./apply";

type Call = { method: string; url: string; body: unknown };

/** A fake controller: answers from a table of (method url) -> [status, body]. */
function controller(routes: Record<string, [number, unknown]>) {
  const calls: Call[] = [];
  const f = vi.fn(async (url: RequestInfo | URL, init?: RequestInit) => {
    const method = init?.method ?? "GET";
    calls.push({ method, url: String(url), body: init?.body ? JSON.parse(String(init.body)) : undefined });
    const [status, body] = routes[`${method} ${url}`] ?? [500, { title: "unexpected", status: 500, detail: `${method} ${url}` }];
    return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
  });
  return { client: new ApiClient("t", f), calls };
}

const RULE = `kind: Rule
spec:
  name: reads
  priority: 10
  match:
    tenant: analytics
    ops: [reed]
  detours:
    - what: io
      to: {kind: stage, target: cache/analytics}
`;

describe("applyText", () => {
  it("sends nothing when the YAML does not parse", async () => {
    const { client, calls } = controller({});
    const result = await applyText(client, "kind: Rule\nspec: [\n");
    expect(calls).toEqual([]);
    expect(result.applied).toEqual([]);
    expect(result.diagnostics.length).toBeGreaterThan(0);
  });

  it("replaces what exists and creates what does not", async () => {
    const text = RULE.replace("reed", "read") + "---\nkind: Tenant\nspec:\n  name: analytics\n  classifiers: []\n";
    const { client, calls } = controller({
      "PUT /api/v1/rules/reads": [404, { title: "Not Found", status: 404, detail: "rule 'reads' does not exist" }],
      "POST /api/v1/rules": [201, { name: "reads", rollout_id: "r1" }],
      "PUT /api/v1/tenants/analytics": [200, { name: "analytics", rollout_id: "r2" }],
    });
    const result = await applyText(client, text);
    expect(result.diagnostics).toEqual([]);
    expect(result.applied).toEqual([
      { kind: "Rule", name: "reads", action: "created", rollout_id: "r1" },
      { kind: "Tenant", name: "analytics", action: "replaced", rollout_id: "r2" },
    ]);
    expect(calls.map((c) => `${c.method} ${c.url}`)).toEqual(["PUT /api/v1/rules/reads", "POST /api/v1/rules", "PUT /api/v1/tenants/analytics"]);
    expect(calls[1].body).toMatchObject({ name: "reads", match: { ops: ["read"] } });
  });

  it("marks the controller's field errors at their YAML lines and stops there", async () => {
    const problem = {
      title: "Invalid request",
      status: 422,
      detail: "match.ops[0]: Input should be 'read', 'write', 'create' or 'delete'",
      errors: [
        { field: "match.ops[0]", message: "Input should be 'read', 'write', 'create' or 'delete'" },
        { field: "detours[0].to.target", message: "no such stage" },
      ],
    };
    const { client, calls } = controller({ "PUT /api/v1/rules/reads": [422, problem] });
    const result = await applyText(client, RULE + "---\nkind: Tenant\nspec:\n  name: later\n  classifiers: []\n");
    expect(result.applied).toEqual([]);
    expect(result.error?.status).toBe(422);
    expect(result.diagnostics.map((d) => d.line)).toEqual([7, 10]);
    expect(result.diagnostics[0].message).toBe("rule/reads: match.ops[0]: Input should be 'read', 'write', 'create' or 'delete'");
    expect(calls).toHaveLength(1); // the second document was never sent
  });

  it("reports a refusal without field errors at the document's name", async () => {
    const { client } = controller({
      "PUT /api/v1/rules/reads": [409, { title: "Conflict", status: 409, detail: "tenant 'analytics' does not exist" }],
    });
    const result = await applyText(client, RULE.replace("reed", "read"));
    expect(result.diagnostics).toMatchObject([{ line: 3, message: "rule/reads: tenant 'analytics' does not exist" }]);
  });

  it("does not blame a line for a refused token", async () => {
    const { client } = controller({
      "PUT /api/v1/rules/reads": [403, { title: "Forbidden", status: 403, detail: "viewer may not change anything" }],
    });
    const result = await applyText(client, RULE.replace("reed", "read"));
    expect(result.diagnostics).toEqual([]);
    expect(result.error?.forbidden).toBe(true);
  });

  it("marks a verifier finding at the name of the rule it names", async () => {
    const problem = {
      type: "https://lachesis.dev/problems/unsafe-rules",
      title: "Rule set refused by the verifier",
      status: 422,
      detail: "the rule set is unsafe",
      errors: [{ field: "rules.reads", message: "write-loss: rule 'reads' matches writes but detours only their headers" }],
    };
    const { client } = controller({ "PUT /api/v1/rules/reads": [422, problem] });
    const result = await applyText(client, "# a comment first\n" + RULE.replace("reed", "write"));
    expect(result.diagnostics).toMatchObject([{ line: 4, message: "rule/reads: rules.reads: write-loss: rule 'reads' matches writes but detours only their headers" }]);
  });
});
