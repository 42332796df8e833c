import { useAllocations, usePolicies, useRules, useStages, useTenant, useTenantTelemetry, useTenants } from "../api/queries";
import { ownedCacheSizes } from "../stages";
import { useSession } from "../api/session";
import type { TenantShare } from "../api/types";
import { ErrorBox, NotReported, ago, bytes } from "../components/common";
import { Loaded } from "../components/Loaded";
import { Table } from "../components/Table";
import { CurveChart } from "../components/CurveChart";
import { SeriesChart } from "../components/SeriesChart";
import { frontEnd, referenceUnit, rulesForTenant, tenantStages } from "../selectors";
import { allocationFor, iops, latest, percent, seriesRows, tenantCurve } from "../telemetry";
import { href } from "../router";
import { RuleTable } from "./Hosts";
import { TenantStages } from "./Stages";

export function Tenants({ name }: { name?: string }) {
  const tenants = useTenants();
  const { access } = useSession();
  // A tenant-scoped token has one tenant to look at: open it rather than ask.
  const shown = name ?? access.tenant ?? undefined;
  return (
    <div className="split">
      <nav className="sidelist">
        <h2>Tenants</h2>
        <Loaded query={tenants} what="tenants" empty="No tenants yet.">
          {(list) => (
            <ul>
              {list.map((t) => (
                <li key={t.name} className={t.name === shown ? "current" : ""}>
                  <a href={href({ page: "tenants", name: t.name })}>{t.name}</a>
                  {frontEnd(t) === "kv" ? (
                    <span className="muted" data-testid="front-end" title="served by the key-value front end (memcached protocol)">
                      {" "}
                      KV
                    </span>
                  ) : null}
                </li>
              ))}
            </ul>
          )}
        </Loaded>
      </nav>
      <div className="main">{shown ? <TenantDetail name={shown} /> : <p className="muted">Pick a tenant.</p>}</div>
    </div>
  );
}

/** The caches policies give this tenant (where the controller has policies). */
function TenantCache({ name }: { name: string }) {
  const { features } = useSession();
  const policies = usePolicies(features.policies);
  const stages = tenantStages(policies.data ?? [], name);
  if (!features.policies || !stages.length) return <p className="muted">No policy in force gives this tenant a cache stage.</p>;
  return (
    <Table
      testId="tenant-stages"
      head={["stage", "kind", "size", "owner / shared with", "policy"]}
      rows={stages}
      row={(s) => (
        <tr key={s.name}>
          <td>{s.name}</td>
          <td>{s.kind}</td>
          <td>{typeof s.size_bytes === "number" ? bytes(s.size_bytes) : "—"}</td>
          <td>{s.owner ?? (s.shared_with ?? []).join(", ")}</td>
          <td>{s.policy}</td>
        </tr>
      )}
    />
  );
}

/** The allocator's view of this tenant's cache: the share in force and the one it proposes. */
function AllocationLine({ name }: { name: string }) {
  const allocation = allocationFor(useAllocations().data, name);
  if (!allocation || (!allocation.current && !allocation.proposed)) return <NotReported what="Cache allocation" />;
  const share = (s: TenantShare | null) =>
    s ? (
      <>
        <strong>{bytes(s.size_bytes)}</strong> (expected hit rate {percent(s.hit_ratio)}
        {s.idle ? ", idle" : ""})
      </>
    ) : (
      "none"
    );
  return (
    <p data-testid="allocation">
      Allocated {share(allocation.current)}; proposed {share(allocation.proposed)}
    </p>
  );
}

function TenantTelemetryView({ name, unit }: { name: string; unit: string }) {
  const { features } = useSession();
  const telemetry = useTenantTelemetry(name);
  const allocation = allocationFor(useAllocations().data, name);
  const policyStages = tenantStages(usePolicies(features.policies && !features.stages).data ?? [], name);
  const shipped = useStages(features.stages);
  // The size the curve marks: the shipped stages' where the controller serves them, else the policies'.
  const stages = features.stages ? ownedCacheSizes(shipped.data, name) : policyStages;
  const rows = seriesRows(telemetry.data?.series);
  const now = latest(rows);
  const curve = telemetry.data?.curve;
  return (
    <>
      <section>
        <h2>Miss-ratio curve</h2>
        {telemetry.error ? <ErrorBox error={telemetry.error} /> : null}
        <CurveChart curve={tenantCurve(telemetry.data, allocation, stages)} />
        {curve ? (
          <p className="muted" data-testid="curve-source">
            {curve.policy.toUpperCase()} curve ({curve.algorithm}) over {curve.references.toLocaleString()} {unit}, updated{" "}
            {ago(telemetry.data?.updated_at)}
          </p>
        ) : null}
      </section>
      <section>
        <h2>Hit rate and IOPS</h2>
        {now ? (
          <p data-testid="tenant-now">
            Now: <strong>{iops(now.iops)}</strong> IOPS ({iops(now.read_iops)} read, {iops(now.write_iops)} write), hit rate{" "}
            <strong>{percent(now.hit)}</strong>
          </p>
        ) : null}
        <SeriesChart rows={rows} />
      </section>
    </>
  );
}

/**
 * The allocator's share and the cache stages serving the tenant: where the controller has
 * /api/v1/stages, each with what the agents installed and measured; else the policies' stages.
 */
function TenantCacheSection({ name }: { name: string }) {
  const { features } = useSession();
  return (
    <section>
      <h2>Cache</h2>
      <AllocationLine name={name} />
      {features.stages ? <TenantStages name={name} /> : <TenantCache name={name} />}
    </section>
  );
}

function TenantDetail({ name }: { name: string }) {
  const tenant = useTenant(name);
  const rules = useRules();
  return (
    <Loaded query={tenant} what={`tenant ${name}`}>
      {(t) => (
        <div data-testid="tenant-detail">
          <h1>{t.name}</h1>
          <p className="muted" data-testid="tenant-front-end">
            {frontEnd(t) === "kv"
              ? "Served by the key-value front end (memcached protocol), its keys told apart by prefix."
              : "Served by the file data path."}
          </p>
          {t.description ? <p>{t.description}</p> : null}
          <TenantTelemetryView name={t.name} unit={referenceUnit(t)} />
          <TenantCacheSection name={t.name} />
          <section>
            <h2>Classifiers</h2>
            <Table
              head={["kind", "value"]}
              rows={t.classifiers}
              row={(c, i) => (
                <tr key={i}>
                  <td>{c.kind}</td>
                  <td>
                    <code>{c.value}</code>
                  </td>
                </tr>
              )}
            />
          </section>
          <section>
            <h2>Rules</h2>
            <RuleTable rules={rulesForTenant(rules.data ?? [], t.name)} />
          </section>
        </div>
      )}
    </Loaded>
  );
}
