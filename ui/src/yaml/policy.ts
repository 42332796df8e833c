// Policy documents (policies/schema/policy.schema.json) go to the controller as YAML text;
// it parses, validates and verifies them. Here: syntax errors before sending, and the
// controller's refusals placed at their line (its own line when it gives one, else the line
// of the field it names, else the line of the rule a verifier finding names).
import { isMap, isSeq, LineCounter, parseDocument, type Node } from "yaml";
import type { FieldError, Problem } from "../api/types";
import { locate, splitField, type Diagnostic } from "./documents";

export type PolicyError = FieldError & { line?: number | null; column?: number | null };

/** Syntax errors only (the schema is the controller's): nothing is sent while there are any. */
export function policySyntax(text: string): Diagnostic[] {
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, prettyErrors: true });
  const out: Diagnostic[] = doc.errors.map((e) => ({
    line: counter.linePos(e.pos[0]).line,
    message: `invalid YAML: ${e.message.split("\n")[0]}`,
    from: e.pos[0],
    to: e.pos[1],
  }));
  if (!out.length && !text.trim()) out.push({ line: 1, message: "empty document" });
  return out;
}

/** The line of rule `name` under spec.rules, for a verifier finding. */
function ruleLine(root: Node | null, counter: LineCounter, name: string): number | null {
  if (!isMap(root)) return null;
  const spec = root.get("spec", true);
  if (!isMap(spec)) return null;
  const rules = spec.get("rules", true);
  if (!isSeq(rules)) return null;
  for (const item of rules.items) {
    if (isMap(item) && item.get("name") === name) {
      const n = item.get("name", true) as Node | undefined;
      const off = n?.range?.[0] ?? (item as Node).range?.[0];
      if (off !== undefined) return counter.linePos(off).line;
    }
  }
  return null;
}

export function policyDiagnostics(text: string, problem: Problem): Diagnostic[] {
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter });
  const root = doc.contents as Node | null;
  const lineOf = (off: number) => counter.linePos(off).line;
  const errors = (problem.errors ?? []) as PolicyError[];
  if (problem.status === 0 || problem.status === 401 || problem.status === 403) return [];
  // "malformed YAML at line N" from the controller's own parser
  const at = /line (\d+)/.exec(problem.detail ?? "");
  if (!errors.length) return [{ line: at ? Number(at[1]) : 1, message: problem.detail }];
  return errors.map((e) => {
    if (typeof e.line === "number" && e.line > 0) return { line: e.line, message: `${e.field}: ${e.message}` };
    if (e.field.startsWith("rules.")) {
      // a verifier finding: rules.<name>,<name>
      for (const name of e.field.slice("rules.".length).split(",")) {
        const line = ruleLine(root, counter, name);
        if (line) return { line, message: `${e.field}: ${e.message}` };
      }
    }
    const range = locate(root, splitField(e.field));
    return { line: range ? lineOf(range[0]) : 1, message: `${e.field}: ${e.message}`, from: range?.[0], to: range?.[1] };
  });
}

type Diff = { added?: unknown[]; removed?: string[]; changed?: { name: string }[] };

const names = (d: Diff | undefined) => ({
  added: (d?.added ?? []).map((a) => (a && typeof a === "object" && "name" in a ? String((a as { name: unknown }).name) : String(a))),
  removed: d?.removed ?? [],
  changed: (d?.changed ?? []).map((c) => c.name),
});

export type HostChange = { host: string; rules: ReturnType<typeof names>; stages: ReturnType<typeof names> };

/** The per-host part of a dry run's diff, as names added / removed / changed. */
export function hostChanges(diff: Record<string, unknown> | null | undefined): HostChange[] {
  const hosts = (diff?.hosts ?? {}) as Record<string, { rules?: Diff; stages?: Diff }>;
  return Object.entries(hosts)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([host, d]) => ({ host, rules: names(d.rules), stages: names(d.stages) }));
}

export function summary(diff: Record<string, unknown> | null | undefined) {
  return {
    tenants: names(diff?.tenants as Diff | undefined),
    rules: names(diff?.rules as Diff | undefined),
    stages: names(diff?.stages as Diff | undefined),
  };
}
