import { useHosts, usePlacements, useRules, useTelemetrySummary } from "../api/queries";
import type { RuleOut } from "../api/types";
import { Badge, NotReported, bytes, ratio } from "../components/common";
import { Table } from "../components/Table";
import { HostTable } from "./Overview";
import { describeDetours, describeMatch, rulesForHost } from "../selectors";
import { deviceRows } from "../telemetry";
import { useSession } from "../api/session";
import { href } from "../router";

export function Hosts({ id }: { id?: string }) {
  const hosts = useHosts();
  const rules = useRules();
  const summary = useTelemetrySummary();
  const placements = usePlacements();
  const { features, access } = useSession();
  const shown = (hosts.data ?? []).filter((h) => !id || h.id === id);
  return (
    <div>
      <h1>Hosts and devices</h1>
      {/* the hosts query's error and loading are HostTable's to show */}
      <HostTable />
      {id && hosts.data && !shown.length ? <p className="error">No host named {id}.</p> : null}
      {shown.map((h) => (
        <section key={h.id} data-testid={`host-${h.id}`}>
          <h2>
            {h.id} <small className="muted">{h.capabilities.cpus} CPUs</small>
          </h2>
          <h3>Devices</h3>
          <Table
            testId={`devices-${h.id}`}
            head={["device", "path", "kind", "size", "FDP", "placement handles (streams)", "write rate", "DLWA measured", "DLWA predicted"]}
            rows={deviceRows(h, summary.data, placements.data)}
            row={(d) => (
              <tr key={d.name} data-testid={`device-row-${d.name}`}>
                <td>{d.name}</td>
                <td>
                  <code>{d.path}</code>
                </td>
                <td>{d.kind}</td>
                <td>{bytes(d.size_bytes)}</td>
                <td>{d.fdp ? <Badge tone="ok">FDP</Badge> : <Badge tone="idle">no FDP</Badge>}</td>
                <td>
                  {d.placement_handles}
                  {d.handles?.length ? (
                    <ul className="handles">
                      {d.handles.map((ph) => (
                        <li key={ph.handle}>
                          #{ph.handle}: {ph.streams.length ? ph.streams.join(", ") : <span className="muted">unused</span>}
                        </li>
                      ))}
                    </ul>
                  ) : null}
                </td>
                <td data-testid="device-write-rate">{d.write_bytes_per_s == null ? "—" : `${bytes(d.write_bytes_per_s)}/s`}</td>
                <td data-testid="device-dlwa">{ratio(d.dlwa)}</td>
                <td data-testid="device-dlwa-predicted">
                  {ratio(d.predicted_dlwa)}
                  {d.predicted_by ? <small className="muted"> ({d.predicted_by})</small> : null}
                </td>
              </tr>
            )}
          />
          {!summary.data || !placements.data ? (
            <NotReported
              what={[!summary.data ? "Device write rate and measured DLWA" : null, !placements.data ? "streams per placement handle and predicted DLWA" : null]
                .filter(Boolean)
                .join("; ")}
            />
          ) : null}
          {features.devices && !access.tenant ? (
            <p className="muted">
              Host and media bytes per placement handle and DLWA over time: <a href={href({ page: "devices" })}>Devices</a>
            </p>
          ) : null}
          <h3>
            Rule table <small className="muted">generation {h.acked_generation} acked, {h.desired_generation} desired</small>
          </h3>
          <RuleTable rules={rulesForHost(rules.data ?? [], h.id)} />
        </section>
      ))}
    </div>
  );
}

export function RuleTable({ rules, actions }: { rules: RuleOut[]; actions?: (name: string) => React.ReactNode }) {
  if (!rules.length) return <p className="muted">No rules.</p>;
  return (
    <Table
      testId="rules-table"
      head={["#", "rule", "priority", "match", "detours", "hosts", ...(actions ? [null] : [])]}
      rows={rules}
      row={(r, i) => (
        <tr key={r.name} data-testid={`rule-row-${r.name}`}>
          <td>{i + 1}</td>
          <td>{r.name}</td>
          <td>{r.priority}</td>
          <td>{describeMatch(r)}</td>
          <td>{describeDetours(r)}</td>
          <td>{r.hosts ? r.hosts.join(", ") : "all"}</td>
          {actions ? <td>{actions(r.name)}</td> : null}
        </tr>
      )}
    />
  );
}
