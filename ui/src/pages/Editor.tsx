import { useMemo, useState } from "react";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { stringify } from "yaml";
import { POLL_MS, useRules, useTenants } from "../api/queries";
import { useSession } from "../api/session";
import type { RuleOut, TenantOut } from "../api/types";
import { ErrorBox, WriteButton, ago } from "../components/common";
import { YamlEditor } from "../components/YamlEditor";
import { applyText, type Applied } from "../yaml/apply";
import { parseDocuments, type Diagnostic } from "../yaml/documents";
import { RolloutDetail } from "./Rules";

export const EXAMPLE = `# Tenants and rules as YAML documents, like lachesis-cli apply -f.
kind: Tenant
spec:
  name: analytics
  description: Batch analytics jobs
  classifiers:
    - kind: cgroup
      value: /sys/fs/cgroup/analytics
---
kind: Rule
spec:
  name: analytics-reads-to-cache
  priority: 10
  hosts: null
  match:
    tenant: analytics
    ops: [read]
    path_prefix: /data/
  detours:
    - what: io
      to:
        kind: stage
        target: cache/analytics
`;

/** The current tenants and rules as editor text. */
export function currentAsYaml(tenants: TenantOut[], rules: RuleOut[]): string {
  const docs = [
    ...tenants.map((t) => ({ kind: "Tenant", spec: { name: t.name, description: t.description, classifiers: t.classifiers } })),
    ...rules.map((r) => ({
      kind: "Rule",
      spec: { name: r.name, priority: r.priority, hosts: r.hosts, match: r.match, detours: r.detours },
    })),
  ];
  return docs.map((d) => stringify(d)).join("---\n");
}

type AuditEvent = { id: number; at: string; actor: string; action: string; resource_kind: string; resource_name: string; rollout_id: string | null };

export function AuditTrail() {
  const { client, token } = useSession();
  const audit = useQuery<AuditEvent[]>({
    queryKey: ["audit", token],
    queryFn: () => client.get<AuditEvent[]>("/api/v1/audit?limit=20"),
    refetchInterval: POLL_MS,
  });
  if (audit.error) return <ErrorBox error={audit.error} />;
  if (!audit.data?.length) return <p className="muted">No changes recorded yet.</p>;
  return (
    <table data-testid="audit-table">
      <thead>
        <tr>
          <th>when</th>
          <th>who</th>
          <th>action</th>
          <th>object</th>
        </tr>
      </thead>
      <tbody>
        {audit.data.map((e) => (
          <tr key={e.id}>
            <td>{ago(e.at)}</td>
            <td>{e.actor}</td>
            <td>{e.action}</td>
            <td>
              {e.resource_kind}/{e.resource_name}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function Editor() {
  const { client, features, noteError } = useSession();
  const qc = useQueryClient();
  const tenants = useTenants();
  const rules = useRules();
  const [text, setText] = useState(EXAMPLE);
  const [serverDiagnostics, setServerDiagnostics] = useState<{ text: string; diagnostics: Diagnostic[] } | null>(null);
  const [applied, setApplied] = useState<Applied[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const parsed = useMemo(() => parseDocuments(text), [text]);
  // Server-reported errors hold until the text changes; parse errors are live.
  const diagnostics = parsed.diagnostics.length
    ? parsed.diagnostics
    : serverDiagnostics && serverDiagnostics.text === text
      ? serverDiagnostics.diagnostics
      : [];

  const apply = async () => {
    setBusy(true);
    setError(null);
    try {
      const result = await applyText(client, text);
      setApplied(result.applied);
      setServerDiagnostics({ text, diagnostics: result.diagnostics });
      if (result.error) {
        noteError(result.error);
        setError(result.error);
      }
      void qc.invalidateQueries();
    } catch (exc) {
      setError(exc);
    } finally {
      setBusy(false);
    }
  };

  return (
    <div>
      <h1>Tenant and rule editor</h1>
      <p className="muted">
        Tenants and rules as YAML documents (<code>kind: Tenant|Rule</code>, <code>spec: …</code>). Errors are marked at
        their line; nothing is sent while the YAML does not parse. Each document is applied in order and the first one
        the controller refuses stops the apply.
        {features.policies ? (
          <>
            {" "}Whole policies, with a dry run first, are edited on the <a href="#/policies">Policies</a> page.
          </>
        ) : null}
      </p>
      <div className="toolbar">
        <button type="button" className="btn plain" onClick={() => setText(EXAMPLE)}>
          Load example
        </button>
        <button
          type="button"
          className="btn plain"
          data-testid="load-current"
          onClick={() => setText(currentAsYaml(tenants.data ?? [], rules.data ?? []) || "# nothing applied yet\n")}
        >
          Load current state
        </button>
        <WriteButton
          testId="apply"
          busy={busy}
          onClick={apply}
          extraDisabledReason={parsed.diagnostics.length ? "fix the marked YAML errors first" : null}
        >
          Apply {parsed.documents.length} document{parsed.documents.length === 1 ? "" : "s"}
        </WriteButton>
      </div>
      <YamlEditor value={text} onChange={setText} diagnostics={diagnostics} />
      {error ? <ErrorBox error={error} /> : null}
      {applied.length ? (
        <section data-testid="applied">
          <h2>Applied</h2>
          <ul>
            {applied.map((a) => (
              <li key={`${a.kind}/${a.name}`}>
                {a.kind.toLowerCase()}/{a.name} {a.action}, rollout <code>{a.rollout_id.slice(0, 8)}</code>
              </li>
            ))}
          </ul>
          <RolloutDetail id={applied[applied.length - 1].rollout_id} />
        </section>
      ) : null}
      {features.audit ? (
        <section>
          <h2>Audit trail</h2>
          <AuditTrail />
        </section>
      ) : null}
    </div>
  );
}
