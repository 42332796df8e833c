import { useState } from "react";
import { useHosts, useRollout, useRules, useWrite } from "../api/queries";
import type { RuleSpec } from "../api/types";
import { Badge, ErrorBox, WriteButton, ago, stateTone } from "../components/common";
import { Loaded } from "../components/Loaded";
import { Table } from "../components/Table";
import { evaluationOrder, rulesForHost } from "../selectors";
import { href } from "../router";
import { RolloutList } from "./Overview";
import { RuleTable } from "./Hosts";

export function RolloutDetail({ id }: { id: string }) {
  return (
    <Loaded query={useRollout(id)} what={`rollout ${id}`}>
      {(r) => (
        <section className="rollout" data-testid="rollout-detail">
          <h2>
            Rollout <code>{r.id}</code> <Badge tone={stateTone(r.state)} testId="rollout-state">{r.state}</Badge>
            {r.phase ? <Badge tone="idle" testId="rollout-phase">{`two-phase: ${r.phase}`}</Badge> : null}
          </h2>
          {r.rolled_back_by ? (
            <p>
              Rolled back by <a href={href({ page: "rules", rollout: r.rolled_back_by })}>{r.rolled_back_by.slice(0, 8)}</a>
            </p>
          ) : null}
          <p>
            {r.cause} — started {ago(r.created_at)}
            {r.completed_at ? `, finished ${ago(r.completed_at)}` : `, deadline ${new Date(r.deadline).toLocaleTimeString()}`}
            {r.reason ? ` — ${r.reason}` : ""}
          </p>
          <Table
            head={["host", "generation", "phase", "status", "drained", "acked", "reason"]}
            rows={r.targets}
            row={(t) => (
              <tr key={t.host_id} data-testid={`target-${t.host_id}`}>
                <td>{t.host_id}</td>
                <td>{t.generation}</td>
                <td data-testid="target-phase">{t.phase ?? "install"}</td>
                <td>
                  <Badge tone={stateTone(t.status)} testId="target-status">{t.status}</Badge>
                </td>
                <td>{ago(t.drained_at)}</td>
                <td>{ago(t.acked_at)}</td>
                <td>{t.reason ?? ""}</td>
              </tr>
            )}
          />
          {!r.targets.length ? <p className="muted">No hosts were targeted.</p> : null}
        </section>
      )}
    </Loaded>
  );
}

/** A form for the common rule: a tenant's IO (some ops, under a path) detoured to one target. */
export function ruleFromForm(f: { name: string; priority: string; tenant: string; ops: string[]; path: string; kind: string; target: string }): RuleSpec {
  return {
    name: f.name.trim(),
    priority: Number(f.priority),
    hosts: null,
    match: {
      tenant: f.tenant.trim() || null,
      ops: f.ops as RuleSpec["match"]["ops"],
      path_prefix: f.path.trim() || null,
    },
    detours: [{ what: "io", to: { kind: f.kind as "stage", target: f.target.trim() } }],
  };
}

function RuleForm({ onCreated }: { onCreated: (rolloutId: string) => void }) {
  const { createRule } = useWrite();
  const [f, setF] = useState({ name: "", priority: "10", tenant: "", ops: ["read"], path: "", kind: "stage", target: "" });
  const set = (k: keyof typeof f) => (e: React.ChangeEvent<HTMLInputElement | HTMLSelectElement>) => setF({ ...f, [k]: e.target.value });
  const toggle = (op: string) => setF({ ...f, ops: f.ops.includes(op) ? f.ops.filter((o) => o !== op) : [...f.ops, op] });
  return (
    <form className="ruleform" onSubmit={(e) => e.preventDefault()}>
      <label>
        name <input value={f.name} onChange={set("name")} data-testid="rf-name" />
      </label>
      <label>
        priority <input value={f.priority} onChange={set("priority")} size={6} />
      </label>
      <label>
        tenant <input value={f.tenant} onChange={set("tenant")} data-testid="rf-tenant" />
      </label>
      <span>
        {["read", "write", "create", "delete"].map((op) => (
          <label key={op} className="check">
            <input type="checkbox" checked={f.ops.includes(op)} onChange={() => toggle(op)} /> {op}
          </label>
        ))}
      </span>
      <label>
        path prefix <input value={f.path} onChange={set("path")} />
      </label>
      <label>
        to{" "}
        <select value={f.kind} onChange={set("kind")}>
          <option>stage</option>
          <option>file</option>
          <option>controller</option>
        </select>
      </label>
      <label>
        target <input value={f.target} onChange={set("target")} data-testid="rf-target" />
      </label>
      <WriteButton
        testId="rf-create"
        busy={createRule.isPending}
        onClick={() => createRule.mutate(ruleFromForm(f), { onSuccess: (c) => onCreated(c.rollout_id) })}
      >
        Create rule
      </WriteButton>
      <ErrorBox error={createRule.error} />
    </form>
  );
}

export function Rules({ rollout }: { rollout?: string }) {
  const rules = useRules();
  const hosts = useHosts();
  const { deleteRule } = useWrite();
  const go = (id: string) => (window.location.hash = href({ page: "rules", rollout: id }));
  return (
    <div>
      <h1>Rules and rollouts</h1>
      {rollout ? <RolloutDetail id={rollout} /> : null}
      <section>
        <h2>Rules (first match wins, top to bottom)</h2>
        <Loaded query={rules} what="rules">
          {(list) => (
            <RuleTable
              rules={evaluationOrder(list)}
              actions={(name) => (
                <WriteButton
                  kind="danger"
                  testId={`delete-${name}`}
                  onClick={() => {
                    if (window.confirm(`Delete rule ${name}? Every host drops it in the next generation.`))
                      deleteRule.mutate(name, { onSuccess: (c) => go(c.rollout_id) });
                  }}
                >
                  Delete
                </WriteButton>
              )}
            />
          )}
        </Loaded>
        <ErrorBox error={deleteRule.error} />
        <h3>New rule</h3>
        <RuleForm onCreated={go} />
      </section>
      <section>
        <h2>Each agent's rule table</h2>
        {(hosts.data ?? []).map((h) => (
          <details key={h.id} open={(hosts.data ?? []).length <= 3}>
            <summary>
              {h.id}: generation {h.acked_generation} acked / {h.desired_generation} desired,{" "}
              {rulesForHost(rules.data ?? [], h.id).length} rules
            </summary>
            <RuleTable rules={rulesForHost(rules.data ?? [], h.id)} />
          </details>
        ))}
      </section>
      <section>
        <h2>Recent rollouts</h2>
        <RolloutList limit={20} />
      </section>
    </div>
  );
}
