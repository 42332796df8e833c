import { describe, expect, it } from "vitest";
import { parseDocuments, splitField } from "./documents";

const TEXT = `kind: Tenant
spec:
  name: analytics
  classifiers:
    - kind: cgroup
      value: /analytics
---
kind: Rule
spec:
  name: reads
  priority: 10
  match:
    tenant: analytics
    ops: [read, write]
  detours:
    - what: io
      to:
        kind: stage
        target: cache/analytics
`;

describe("splitField", () => {
  it("splits the API's field paths", () => {
    expect(splitField("detours[0].to.kind")).toEqual(["detours", 0, "to", "kind"]);
    expect(splitField("match.ops[1]")).toEqual(["match", "ops", 1]);
    expect(splitField("name")).toEqual(["name"]);
    expect(splitField("body")).toEqual([]);
  });
});

describe("parseDocuments", () => {
  it("reads several documents with their kinds and specs", () => {
    const { documents, diagnostics } = parseDocuments(TEXT);
    expect(diagnostics).toEqual([]);
    expect(documents.map((d) => [d.kind, d.name, d.line])).toEqual([
      ["Tenant", "analytics", 1],
      ["Rule", "reads", 8],
    ]);
    expect(documents[1].spec).toMatchObject({ priority: 10, match: { ops: ["read", "write"] } });
  });

  it("maps an API field path back to the line of its YAML node", () => {
    const [tenant, rule] = parseDocuments(TEXT).documents;
    expect(tenant.lineOf("classifiers[0].value")).toBe(6);
    expect(rule.lineOf("name")).toBe(10);
    expect(rule.lineOf("match.ops[1]")).toBe(14);
    expect(rule.lineOf("detours[0].to.kind")).toBe(18);
    expect(rule.lineOf("detours[0].to.target")).toBe(19);
  });

  it("maps a missing field to its nearest parent, and 'body' to the spec", () => {
    const [, rule] = parseDocuments(TEXT).documents;
    expect(rule.lineOf("match.path_prefix")).toBe(12); // match:
    expect(rule.lineOf("detours[3].what")).toBe(15); // detours:
    expect(rule.lineOf("body")).toBe(10); // first line of the spec mapping
  });

  it("reports a YAML syntax error at its line and no documents", () => {
    const { documents, diagnostics } = parseDocuments("kind: Rule\nspec:\n  name: x\n  match:\n    tenant: a\n   ops: [read]\n");
    expect(documents).toEqual([]);
    expect(diagnostics.length).toBeGreaterThan(0);
    expect(diagnostics[0].line).toBe(6);
    expect(diagnostics[0].message).toMatch(/invalid YAML/);
  });

  it("reports an unclosed flow sequence", () => {
    const { diagnostics } = parseDocuments("kind: Rule\nspec:\n  name: x\n  match:\n    ops: [read\n");
    expect(diagnostics.length).toBeGreaterThan(0);
    expect(diagnostics[0].line).toBeGreaterThanOrEqual(5);
  });

  it("refuses an unknown kind at the kind's line", () => {
    const { documents, diagnostics } = parseDocuments("# comment\nkind: Policy\nspec:\n  name: x\n");
    expect(documents).toEqual([]);
    expect(diagnostics).toMatchObject([{ line: 2, message: expect.stringMatching(/unknown kind 'Policy'/) }]);
  });

  it("refuses a document without a name, a non-mapping spec and extra top-level fields", () => {
    expect(parseDocuments("kind: Rule\nspec:\n  priority: 1\n").diagnostics[0].message).toMatch(/spec.name/);
    expect(parseDocuments("kind: Rule\nspec: [1]\n").diagnostics[0]).toMatchObject({ line: 2, message: expect.stringMatching(/spec/) });
    expect(parseDocuments("kind: Rule\nspce: {}\n").diagnostics.map((d) => d.line)).toContain(2);
  });

  it("says there is nothing to apply in an empty text", () => {
    expect(parseDocuments("").diagnostics[0].message).toMatch(/no documents/);
    expect(parseDocuments("# only a comment\n").diagnostics[0].message).toMatch(/no documents/);
  });

  it("flags the same object twice", () => {
    const { diagnostics } = parseDocuments("kind: Tenant\nspec:\n  name: a\n  classifiers: []\n---\nkind: Tenant\nspec:\n  name: a\n  classifiers: []\n");
    expect(diagnostics).toMatchObject([{ line: 8, message: expect.stringMatching(/appears twice \(first at line 3\)/) }]);
  });
});
