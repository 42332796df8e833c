import { useMemo, useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { stringify } from "yaml";
import { useRules, useTenants } from "../api/queries";
import { useSession } from "../api/session";
import type { RuleOut, TenantOut } from "../api/types";
import { AuditTrail } from "../components/AuditTrail";
import { DraftEditor } from "../components/DraftEditor";
import { WriteButton } from "../components/common";
import { applyText, type Applied } from "../yaml/apply";
import { parseDocuments } from "../yaml/documents";
import { useDraft } from "../yaml/draft";
import { RolloutDetail } from "./Rules";
// What the editor opens with (the e2e browser test applies it too).
import EXAMPLE from "../examples/tenant-and-rule.yaml?raw";

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

const syntaxOf = (text: string) => parseDocuments(text).diagnostics;

export function Editor() {
  const { client, features, noteError } = useSession();
  const qc = useQueryClient();
  const tenants = useTenants();
  const rules = useRules();
  const draft = useDraft({ initial: EXAMPLE, syntax: syntaxOf, onRefusal: noteError });
  const [applied, setApplied] = useState<Applied[]>([]);
  const documents = useMemo(() => parseDocuments(draft.text).documents.length, [draft.text]);

  const apply = () =>
    draft.submit(async (text) => {
      const result = await applyText(client, text);
      setApplied(result.applied);
      void qc.invalidateQueries();
      return { diagnostics: result.diagnostics, error: result.error };
    });

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
      <DraftEditor draft={draft} example={EXAMPLE}>
        <button
          type="button"
          className="btn plain"
          data-testid="load-current"
          onClick={() => draft.setText(currentAsYaml(tenants.data ?? [], rules.data ?? []) || "# nothing applied yet\n")}
        >
          Load current state
        </button>
        <WriteButton testId="apply" busy={draft.busy} onClick={() => void apply()} extraDisabledReason={draft.blocked}>
          Apply {documents} document{documents === 1 ? "" : "s"}
        </WriteButton>
      </DraftEditor>
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
      <AuditTrail />
    </div>
  );
}
