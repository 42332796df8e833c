// Declared maintenance IO (DINGOS): each declared job with its deadline and state, and where
// its bytes came from: read by the agent's dispatcher vs covered by foreground reads through
// the FUSE switch (or by another job's reads). The saving is the covered share it did not
// have to read.
import { useQuery } from "@tanstack/react-query";
import { POLL_MS } from "../../api/queries";
import { useSession } from "../../api/session";
import type { components } from "../../api/schema.gen";
import { Badge, ago, size } from "../../components/common";
import { Table } from "../../components/Table";

export type DeclaredJob = components["schemas"]["DeclaredJobOut"];

export function useDeclaredJobs() {
  const { client, token, noteError } = useSession();
  return useQuery<DeclaredJob[]>({
    queryKey: ["apps", "declared-io", token],
    queryFn: () => client.get<DeclaredJob[]>("/api/v1/apps/declared-io").catch((e) => Promise.reject(noteError(e, false))),
    refetchInterval: POLL_MS,
  });
}

const TONE: Record<DeclaredJob["state"], "ok" | "bad" | "warn" | "idle"> = {
  pending: "idle", running: "ok", paused: "warn", done: "ok", missed: "bad", failed: "bad", cancelled: "idle",
};

/** The share of the declared bytes the job did not read itself: foreground and shared. */
export function saved(j: DeclaredJob): string {
  if (!j.bytes_declared) return "—";
  return `${Math.round((100 * (j.foreground_bytes + j.shared_bytes)) / j.bytes_declared)}%`;
}

export function DeclaredIoTable({ jobs }: { jobs: DeclaredJob[] }) {
  if (!jobs.length) return <p className="muted">No declared jobs.</p>;
  return (
    <Table
      testId="declared-io"
      head={["job", "host", "tenant", "state", "deadline", "declared", "dispatcher", "foreground", "shared", "not read"]}
      rows={jobs}
      row={(j) => (
        <tr key={j.id} data-testid={`declared-${j.id}`}>
          <td>
            {j.id}
            {j.source ? <small className="muted"> ({j.source})</small> : null}
          </td>
          <td>{j.host}</td>
          <td>{j.tenant}</td>
          <td>
            <Badge tone={TONE[j.state]}>{j.state}</Badge>
            {j.error ? <small className="muted"> {j.error}</small> : null}
          </td>
          <td title={j.deadline}>{j.deadline.replace("T", " ").slice(0, 19)} <small className="muted">reported {ago(j.reported_at)}</small></td>
          <td>{size(j.bytes_declared)}</td>
          <td data-testid="dispatched">{size(j.dispatched_bytes)}</td>
          <td data-testid="foreground">{size(j.foreground_bytes)}</td>
          <td>{size(j.shared_bytes)}</td>
          <td data-testid="saved">{saved(j)}</td>
        </tr>
      )}
    />
  );
}

export function DeclaredIo() {
  const jobs = useDeclaredJobs();
  return (
    <section data-testid="app-declared-io">
      <h2>Declared maintenance IO</h2>
      {jobs.data ? <DeclaredIoTable jobs={jobs.data} /> : <p className="muted">Loading…</p>}
    </section>
  );
}
