// Applying editor documents through the REST API: each document replaces its object (PUT) or
// creates it (POST on 404), in order, stopping at the first refusal. A refusal's field errors
// are mapped back to the YAML lines they name.
import { ApiClient, ApiError } from "../api/client";
import { KINDS, parseDocuments, type Diagnostic, type ParsedDocument } from "./documents";

export type Applied = { kind: string; name: string; action: "created" | "replaced"; rollout_id: string };
export type ApplyResult = { applied: Applied[]; diagnostics: Diagnostic[]; error: ApiError | null };

/** Diagnostics for an API refusal of one document, at the lines of the fields it names. */
export function problemDiagnostics(doc: ParsedDocument, err: ApiError): Diagnostic[] {
  // A refusal of who we are (401, 403) or an unreachable controller is not about a line.
  if (err.status === 0 || err.status === 401 || err.status === 403) return [];
  const fields = err.problem.errors ?? [];
  const prefix = `${doc.kind.toLowerCase()}/${doc.name}`;
  if (!fields.length) return [{ line: doc.lineOf("name"), message: `${prefix}: ${err.problem.detail}` }];
  return fields.map((f) => {
    // A verifier finding names rules ("rules.<a>,<b>"), not a field: mark the rule's name.
    const field = /^rules\.[^.[\]]+$/.test(f.field) && err.problem.type.endsWith("/unsafe-rules") ? "name" : f.field;
    const [from, to] = doc.rangeOf(field);
    return { line: doc.lineOf(field), message: `${prefix}: ${f.field}: ${f.message}`, from, to };
  });
}

export async function applyText(client: ApiClient, text: string): Promise<ApplyResult> {
  const { documents, diagnostics } = parseDocuments(text);
  if (diagnostics.length) return { applied: [], diagnostics, error: null };
  const applied: Applied[] = [];
  for (const doc of documents) {
    const collection = `/api/v1/${KINDS[doc.kind]}`;
    try {
      let action: Applied["action"] = "replaced";
      let change: { rollout_id: string };
      try {
        change = await client.put(`${collection}/${encodeURIComponent(doc.name)}`, doc.spec);
      } catch (err) {
        if (!(err instanceof ApiError) || err.status !== 404 || err.problem.errors?.length) throw err;
        action = "created";
        change = await client.post(collection, doc.spec);
      }
      applied.push({ kind: doc.kind, name: doc.name, action, rollout_id: change.rollout_id });
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      return { applied, diagnostics: problemDiagnostics(doc, err), error: err };
    }
  }
  return { applied, diagnostics: [], error: null };
}
