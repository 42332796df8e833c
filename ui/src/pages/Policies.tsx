// Policies (where the controller has /api/v1/policies): list, edit, dry-run with the per-host
// diff, apply only what was dry-run, audit trail.
import { useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { ApiError } from "../api/client";
import { usePolicies } from "../api/queries";
import { useSession } from "../api/session";
import type { PolicyResult } from "../api/types";
import { AuditTrail } from "../components/AuditTrail";
import { DraftEditor } from "../components/DraftEditor";
import { Badge, WriteButton, ago } from "../components/common";
import { LoadedTable } from "../components/Loaded";
import { Table } from "../components/Table";
import { useDraft } from "../yaml/draft";
import { hostChanges, policyDiagnostics, policySyntax, summary } from "../yaml/policy";
import { RolloutDetail } from "./Rules";
// What the policy editor opens with.
import EXAMPLE_POLICY from "../examples/policy.yaml?raw";

const locatePolicyError = (text: string, err: unknown) => (err instanceof ApiError ? policyDiagnostics(text, err.problem) : []);

function Names({ label, n }: { label: string; n: { added: string[]; removed: string[]; changed: string[] } }) {
  if (!n.added.length && !n.removed.length && !n.changed.length) return label ? null : <span className="muted">no change</span>;
  return (
    <div>
      {label ? `${label}: ` : null}
      {n.added.map((x) => <Badge key={`a${x}`} tone="ok">+ {x}</Badge>)} {n.changed.map((x) => <Badge key={`c${x}`} tone="warn">~ {x}</Badge>)}{" "}
      {n.removed.map((x) => <Badge key={`r${x}`} tone="bad">− {x}</Badge>)}
    </div>
  );
}

function DiffView({ result }: { result: PolicyResult }) {
  const s = summary(result.diff);
  const hosts = hostChanges(result.diff);
  return (
    <section data-testid="dry-run">
      <h2>
        Dry run: {result.name} v{result.version}
      </h2>
      <Names label="tenants" n={s.tenants} />
      <Names label="rules" n={s.rules} />
      <Names label="stages" n={s.stages} />
      <Table
        testId="host-diff"
        head={["host", "rules", "stages"]}
        rows={hosts}
        row={(h) => (
          <tr key={h.host} data-testid={`host-diff-${h.host}`}>
            <td>{h.host}</td>
            <td>
              <Names label="" n={h.rules} />
            </td>
            <td>
              <Names label="" n={h.stages} />
            </td>
          </tr>
        )}
      />
      {!hosts.length ? <p className="muted">No host has registered: nothing would ship.</p> : null}
      {result.warnings.length ? (
        <ul className="checks">
          {result.warnings.map((w, i) => (
            <li key={i}>
              <Badge tone="warn">warning</Badge> {String(w.message ?? JSON.stringify(w))}
            </li>
          ))}
        </ul>
      ) : null}
    </section>
  );
}

export function Policies() {
  const { client, noteError } = useSession();
  const qc = useQueryClient();
  const policies = usePolicies();
  const draft = useDraft({ initial: EXAMPLE_POLICY, syntax: policySyntax, locate: locatePolicyError, onRefusal: noteError });
  const [dry, setDry] = useState<{ text: string; result: PolicyResult } | null>(null);
  const [applied, setApplied] = useState<PolicyResult | null>(null);
  const dryRunIsCurrent = dry?.text === draft.text;

  const send = (dryRun: boolean) =>
    draft.submit(async (text) => {
      if (dryRun) setDry(null);
      const result = await client.postText<PolicyResult>(`/api/v1/policies${dryRun ? "?dry_run=true" : ""}`, text);
      if (dryRun) setDry({ text, result });
      else {
        setApplied(result);
        setDry(null);
        void qc.invalidateQueries();
      }
    });

  return (
    <div>
      <h1>Policies</h1>
      <section>
        <h2>In force</h2>
        <LoadedTable
          query={policies}
          what="policies"
          empty="No policy applied yet."
          testId="policies-table"
          head={["policy", "version", "tenants", "by", "applied", null]}
          row={(p) => (
            <tr key={p.name} data-testid={`policy-row-${p.name}`}>
              <td>{p.name}</td>
              <td>{p.version}</td>
              <td>{p.tenants.join(", ")}</td>
              <td>{p.created_by}</td>
              <td>{ago(p.created_at)}</td>
              <td>
                <button type="button" className="btn plain" onClick={() => draft.setText(p.document)}>
                  Edit
                </button>
              </td>
            </tr>
          )}
        />
      </section>
      <section>
        <h2>Edit</h2>
        <DraftEditor draft={draft} example={EXAMPLE_POLICY}>
          <WriteButton kind="plain" testId="dry-run-button" busy={draft.busy} onClick={() => void send(true)} extraDisabledReason={draft.blocked}>
            Dry run
          </WriteButton>
          <WriteButton
            testId="apply-policy"
            busy={draft.busy}
            onClick={() => void send(false)}
            extraDisabledReason={draft.blocked ?? (!dryRunIsCurrent ? "dry-run this text first" : null)}
          >
            Apply
          </WriteButton>
          {!dryRunIsCurrent && !draft.blocked ? <span className="muted">Apply needs a dry run of the text as it is.</span> : null}
        </DraftEditor>
        {dry && dryRunIsCurrent ? <DiffView result={dry.result} /> : null}
        {applied ? (
          <section data-testid="policy-applied">
            <h2>
              Applied {applied.name} v{applied.version}
            </h2>
            {applied.rollout_id ? <RolloutDetail id={applied.rollout_id} /> : null}
          </section>
        ) : null}
      </section>
      <AuditTrail />
    </div>
  );
}
