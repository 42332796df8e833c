// Tail-latency routing (sRoute §6.5.1): per tail_latency stage, its endpoint's latency as the
// agents measure it, whether the owner's writes are forwarded (and where), and the bytes
// forwarded, still held and reclaimed, with the reclaim's progress.
import { useQuery } from "@tanstack/react-query";
import { POLL_MS } from "../../api/queries";
import { useSession } from "../../api/session";
import type { components } from "../../api/schema.gen";
import { ratio, size } from "../../components/common";
import { Table } from "../../components/Table";

export type TailLatencyStage = components["schemas"]["TailLatencyStageOut"];

export function useTailLatency() {
  const { client, token, noteError } = useSession();
  return useQuery<components["schemas"]["TailLatencyOut"]>({
    queryKey: ["apps", "tail-latency", token],
    queryFn: () => client.get<components["schemas"]["TailLatencyOut"]>("/api/v1/apps/tail-latency").catch((e) => Promise.reject(noteError(e, false))),
    refetchInterval: POLL_MS,
  });
}

const us = (v: number | null) => (v === null ? "—" : `${Math.round(v)} µs`);

export function TailLatencyTable({ stages }: { stages: TailLatencyStage[] }) {
  if (!stages.length) return <p className="muted">No tail_latency stage routes to remote servers.</p>;
  return (
    <Table
      testId="tail-latency"
      head={["stage", "tenant", "endpoint", "state", "recent / mean", "forwarded to", "forwarded", "held", "reclaimed", "reclaim"]}
      rows={stages}
      row={(s: TailLatencyStage) => (
        <tr key={s.stage} data-testid={`tail-latency-${s.stage}`}>
          <td>{s.stage}</td>
          <td>{s.tenant}</td>
          <td>{s.endpoint}</td>
          <td data-testid="state">{s.state}{s.slow ? " (slow)" : ""}</td>
          <td data-testid="latency">{us(s.recent_us)} / {us(s.mean_us)} <small className="muted">α {s.alpha}</small></td>
          <td>{s.forwarded_to ?? "—"} <small className="muted">{s.forwards}× forwarded, {s.reclaims}× reclaimed</small></td>
          <td data-testid="forwarded">{size(s.forwarded_bytes)}</td>
          <td>{size(s.held_bytes)}</td>
          <td>{size(s.reclaimed_bytes)}</td>
          <td data-testid="progress">{ratio(s.reclaim_progress)}</td>
        </tr>
      )}
    />
  );
}

export function TailLatency() {
  const q = useTailLatency();
  return (
    <section data-testid="app-tail-latency">
      <h2>Tail-latency routing</h2>
      {q.data ? <TailLatencyTable stages={q.data.stages} /> : <p className="muted">Loading…</p>}
    </section>
  );
}
