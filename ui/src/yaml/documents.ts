// Reading the editor's text: YAML documents `{kind: Tenant|Rule, spec: {...}}` (several per
// text, separated by ---), like `lachesis-cli apply -f`. Every problem is reported at its
// 1-based line so the editor can mark it; a field named by the API (`match.ops[0]`) is mapped
// back to the line of its YAML node.

import { isMap, isPair, isScalar, isSeq, LineCounter, parseAllDocuments, type Node } from "yaml";

export type Kind = "Tenant" | "Rule";
export const KINDS: Record<Kind, string> = { Tenant: "tenants", Rule: "rules" };

export type Diagnostic = { line: number; message: string; from?: number; to?: number };

export type ParsedDocument = {
  kind: Kind;
  name: string;
  spec: Record<string, unknown>;
  /** 1-based line where the document starts, for messages. */
  line: number;
  /** Line of the node at a field path of the spec ("match.ops[0]"), or of its nearest parent. */
  lineOf(field: string): number;
  /** Offsets of that node in the text, for a precise mark. */
  rangeOf(field: string): [number, number];
};

export type ParseResult = { documents: ParsedDocument[]; diagnostics: Diagnostic[] };

/** "detours[0].to.kind" -> ["detours", 0, "to", "kind"]; "body" and "" -> []. */
export function splitField(field: string): (string | number)[] {
  const out: (string | number)[] = [];
  for (const part of field.split(".")) {
    const m = /^([^[\]]*)((?:\[\d+\])*)$/.exec(part);
    if (!m) {
      out.push(part);
      continue;
    }
    if (m[1]) out.push(m[1]);
    for (const idx of m[2].matchAll(/\[(\d+)\]/g)) out.push(Number(idx[1]));
  }
  if (out.length === 1 && out[0] === "body") return [];
  return out;
}

/** The deepest node along `path` from `root`, with the offset range to mark. */
export function locate(root: Node | null | undefined, path: (string | number)[]): [number, number] | null {
  if (!root || !root.range) return null;
  let node: unknown = root;
  let range: [number, number] = [root.range[0], root.range[1]];
  for (const seg of path) {
    if (isMap(node)) {
      const pair = node.items.find((p) => isPair(p) && isScalar(p.key) && String(p.key.value) === String(seg));
      if (!pair) break;
      const key = pair.key as Node;
      const value = pair.value as Node | null;
      // Mark the key (that is where a reader looks); descend into the value.
      if (key.range) range = [key.range[0], key.range[1]];
      node = value;
      if (!value) break;
    } else if (isSeq(node) && typeof seg === "number") {
      const item = node.items[seg] as Node | undefined;
      if (!item || !item.range) break;
      range = [item.range[0], item.range[1]];
      node = item;
    } else {
      break;
    }
  }
  return range;
}

export function parseDocuments(text: string): ParseResult {
  const counter = new LineCounter();
  const docs = parseAllDocuments(text, { lineCounter: counter, prettyErrors: true });
  const lineAt = (offset: number) => counter.linePos(Math.max(0, Math.min(offset, text.length))).line;
  const diagnostics: Diagnostic[] = [];
  const documents: ParsedDocument[] = [];

  if (!Array.isArray(docs)) {
    // an empty stream
    return { documents, diagnostics: [{ line: 1, message: "no documents (expected kind: Tenant|Rule and spec: {...})" }] };
  }

  for (const doc of docs) {
    for (const err of doc.errors) {
      const from = err.pos[0];
      diagnostics.push({ line: lineAt(from), message: `invalid YAML: ${err.message.split("\n")[0]}`, from, to: err.pos[1] });
    }
  }
  if (diagnostics.length) return { documents, diagnostics };

  for (const doc of docs) {
    const root = doc.contents as Node | null;
    if (!root) continue; // an empty document between separators
    const start = root.range?.[0] ?? 0;
    const at = (message: string, node: Node | null | undefined = root) =>
      diagnostics.push({ line: lineAt(node?.range?.[0] ?? start), message, from: node?.range?.[0], to: node?.range?.[1] });
    if (!isMap(root)) {
      at("a document must be a mapping with kind and spec");
      continue;
    }
    const kindNode = root.get("kind", true) as Node | undefined;
    const kind = root.get("kind");
    const specNode = root.get("spec", true) as Node | undefined;
    for (const pair of root.items) {
      const key = isScalar(pair.key) ? String(pair.key.value) : "";
      if (key !== "kind" && key !== "spec") at(`unknown top-level field '${key}' (expected kind and spec)`, pair.key as Node);
    }
    if (kind === undefined) {
      at("missing field 'kind' (Tenant or Rule)");
      continue;
    }
    if (kind !== "Tenant" && kind !== "Rule") {
      at(`unknown kind '${String(kind)}' (expected Tenant or Rule)`, kindNode);
      continue;
    }
    if (!specNode || !isMap(specNode)) {
      at("'spec' must be a mapping", specNode ?? root);
      continue;
    }
    const spec = specNode.toJSON() as Record<string, unknown>;
    const nameNode = specNode.get("name", true) as Node | undefined;
    if (typeof spec.name !== "string" || !spec.name) {
      at("spec.name: field required (a string)", nameNode ?? specNode);
      continue;
    }
    const rangeOf = (field: string): [number, number] => locate(specNode, splitField(field)) ?? [start, start];
    documents.push({
      kind,
      name: spec.name,
      spec,
      line: lineAt(start),
      rangeOf,
      lineOf: (field: string) => lineAt(rangeOf(field)[0]),
    });
  }
  if (!documents.length && !diagnostics.length) {
    diagnostics.push({ line: 1, message: "no documents (expected kind: Tenant|Rule and spec: {...})" });
  }
  const seen = new Map<string, number>();
  for (const d of documents) {
    const key = `${d.kind}/${d.name}`;
    if (seen.has(key)) diagnostics.push({ line: d.lineOf("name"), message: `${key} appears twice (first at line ${seen.get(key)})` });
    else seen.set(key, d.lineOf("name"));
  }
  return { documents, diagnostics };
}
