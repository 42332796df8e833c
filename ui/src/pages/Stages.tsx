// Cache stages as the agents run them: per tenant and per host, the size the controller
// allocated beside the size installed, and the hit ratio the real stage measured beside the one
// the tenant's miss-ratio curve predicts at that size, live and over time.
import { useAllocations, useHosts, useStages, useTenantTelemetry } from "../api/queries";
import { useSession } from "../api/session";
import type { HostOut, StageHost, StageOut } from "../api/types";
import { Badge, NotReported, ago, bytes, size } from "../components/common";
import { Loaded } from "../components/Loaded";
import { Table } from "../components/Table";
import { StageHitChart, StageSizeChart } from "../components/LoopCharts";
import { href } from "../router";
import {
  cacheStages,
  installState,
  otherStages,
  ownerBytesOnHost,
  predictedHitRatio,
  stageRegionBytes,
  stageRows,
  stageTraits,
  tenantCacheSummaries,
  type InstallState,
  type TenantCacheSummary,
} from "../stages";
import { allocationFor, percent } from "../telemetry";

const count = (n: number | null | undefined) => (typeof n === "number" ? n.toLocaleString() : "—");

function InstallBadge({ state, allocated, installed }: { state: InstallState; allocated: number | null; installed: number | null }) {
  switch (state) {
    case "installed":
      return <Badge tone="ok" testId="stage-install-state">= allocated</Badge>;
    case "whole-regions":
      return (
        <Badge tone="ok" testId="stage-install-state">
          whole regions
        </Badge>
      );
    case "differs":
      return (
        <Badge tone="warn" testId="stage-install-state">
          {installed! > allocated! ? "shrinking" : "growing"}
        </Badge>
      );
    default:
      return <span className="muted" data-testid="stage-install-state">not reported</span>;
  }
}

/** The predicted hit ratio of a stage's owner on a host, and where it comes from. */
function usePrediction(stage: StageOut, stages: StageOut[], hostId: string) {
  const owner = stage.owner ?? "";
  const telemetry = useTenantTelemetry(owner, !!stage.owner);
  const allocation = allocationFor(useAllocations().data, owner);
  if (!stage.owner) return null;
  return predictedHitRatio(telemetry.data?.curve, allocation, ownerBytesOnHost(stages, stage.owner, hostId));
}

function StageHostRow({ stage, stages, h, host }: { stage: StageOut; stages: StageOut[]; h: StageHost; host: HostOut | undefined }) {
  const predicted = usePrediction(stage, stages, h.host_id);
  // The controller's check of the owner's curve against its stage (allocation/curve_check.py).
  const check = allocationFor(useAllocations().data, stage.owner ?? "")?.curve_check;
  const reads = (h.hits ?? 0) + (h.misses ?? 0);
  return (
    <tr data-testid={`stage-host-${h.host_id}`}>
      <td>
        <a href={href({ page: "hosts", id: h.host_id })}>{h.host_id}</a>
      </td>
      <td data-testid="stage-allocated">{size(h.allocated_bytes)}</td>
      <td>
        <span data-testid="stage-installed">{size(h.installed_bytes)}</span>{" "}
        <InstallBadge state={installState(h.allocated_bytes, h.installed_bytes, stageRegionBytes(stage, host))} allocated={h.allocated_bytes} installed={h.installed_bytes} />
      </td>
      <td>
        <strong data-testid="stage-hit">{percent(h.hit_ratio)}</strong>
        {h.hits != null ? <small className="muted"> of {count(reads)} reads</small> : null}
      </td>
      <td data-testid="stage-predicted">
        {predicted ? (
          <>
            {percent(predicted.hit_ratio)}{" "}
            <small className="muted">
              ({predicted.source === "curve" ? `curve at ${bytes(predicted.size_bytes)}` : "allocation"})
            </small>
            {check?.off ? (
              <>
                {" "}
                <Badge tone="warn" testId="stage-curve-off">
                  curve off: {check.reason}
                </Badge>
              </>
            ) : null}
          </>
        ) : (
          "—"
        )}
      </td>
      <td>{size(h.dirty_bytes)}</td>
      <td>{count(h.evictions)}</td>
      <td>{h.reported_at ? ago(h.reported_at) : "—"}</td>
    </tr>
  );
}

function StageHostCharts({ stage, stages, h, width }: { stage: StageOut; stages: StageOut[]; h: StageHost; width?: number }) {
  const predicted = usePrediction(stage, stages, h.host_id);
  const rows = stageRows(h.series);
  return (
    <div className="stage-charts" data-testid={`stage-charts-${h.host_id}`}>
      <h4>{h.host_id}</h4>
      <div className="charts">
        <StageHitChart rows={rows} predicted={predicted?.hit_ratio ?? null} width={width} />
        <StageSizeChart rows={rows} width={width} />
      </div>
    </div>
  );
}

/** One cache stage: its declaration, each host's sizes and hit ratios, and their history. */
export function StageSection({
  stage,
  stages,
  hosts,
  compact = false,
}: {
  stage: StageOut;
  stages: StageOut[];
  hosts: HostOut[];
  /** In a narrower column (the tenant page): smaller heading and charts. */
  compact?: boolean;
}) {
  const H = compact ? "h3" : "h2";
  const shared = Array.isArray(stage.declared.shared_with) ? (stage.declared.shared_with as string[]) : [];
  return (
    <section className="stage" data-testid={`stage-${stage.name}`}>
      <H>
        {stage.name}{" "}
        <small className="muted">
          {stage.owner ? (
            <>
              of <a href={href({ page: "tenants", name: stage.owner })}>{stage.owner}</a>
            </>
          ) : (
            "shared"
          )}
          {shared.length ? `, shared with ${shared.join(", ")}` : ""} · {stageTraits(stage).join(" · ")} ·{" "}
          <span data-testid="stage-source">{stage.source}</span>
        </small>
      </H>
      {stage.hosts.length ? (
        <>
          <Table
            className="stage-hosts"
            head={["host", "allocated", "installed", "hit ratio measured", "predicted", "dirty", "evictions", "reported"]}
            rows={stage.hosts}
            row={(h) => <StageHostRow key={h.host_id} stage={stage} stages={stages} h={h} host={hosts.find((x) => x.id === h.host_id)} />}
          />
          {stage.hosts.some((h) => h.series.length) ? (
            stage.hosts
              .filter((h) => h.series.length)
              .map((h) => <StageHostCharts key={h.host_id} stage={stage} stages={stages} h={h} width={compact ? 450 : undefined} />)
          ) : (
            <NotReported what="What the agents installed and measured, and its history" />
          )}
        </>
      ) : (
        <p className="muted">No host runs this stage.</p>
      )}
    </section>
  );
}

function TenantSummaryRow({ t, stages }: { t: TenantCacheSummary; stages: StageOut[] }) {
  const telemetry = useTenantTelemetry(t.tenant);
  const allocation = allocationFor(useAllocations().data, t.tenant);
  // The curve is the tenant's over all its IO: read it at the size each host gives the tenant.
  const hostIds = [...new Set(cacheStages(stages).filter((s) => s.owner === t.tenant).flatMap((s) => s.hosts.map((h) => h.host_id)))];
  const predictions = hostIds
    .map((h) => predictedHitRatio(telemetry.data?.curve, allocation, ownerBytesOnHost(stages, t.tenant, h)))
    .filter((p) => p !== null);
  const predicted = predictions.length ? predictions.reduce((s, p) => s + p.hit_ratio, 0) / predictions.length : null;
  return (
    <tr data-testid={`stage-tenant-${t.tenant}`}>
      <td>
        <a href={href({ page: "tenants", name: t.tenant })}>{t.tenant}</a>
      </td>
      <td>{t.stages}</td>
      <td data-testid="tenant-allocated">{size(t.allocated_bytes)}</td>
      <td data-testid="tenant-installed">{size(t.installed_bytes)}</td>
      <td>
        <strong data-testid="tenant-hit">{percent(t.hit_ratio)}</strong>
        {t.hits + t.misses > 0 ? <small className="muted"> of {count(t.hits + t.misses)} reads</small> : null}
      </td>
      <td data-testid="tenant-predicted">{percent(predicted)}</td>
    </tr>
  );
}

/** Per tenant, its cache stages on every host added up: what `./lachesis demo` prints, live. */
export function TenantCacheTable({ stages }: { stages: StageOut[] }) {
  const rows = tenantCacheSummaries(stages);
  if (!rows.length) return <p className="muted">No tenant owns a cache stage.</p>;
  return (
    <Table
      testId="stage-summary"
      head={["tenant", "cache stages", "allocated (all hosts)", "installed", "hit ratio measured", "predicted"]}
      rows={rows}
      row={(t) => <TenantSummaryRow key={t.tenant} t={t} stages={stages} />}
    />
  );
}

function OtherStages({ stages }: { stages: StageOut[] }) {
  const rows = otherStages(stages);
  if (!rows.length) return null;
  return (
    <section>
      <h2>Other stages</h2>
      <Table
        testId="other-stages"
        head={["stage", "kind", "owner", "hosts", "source"]}
        rows={rows}
        row={(s) => (
          <tr key={s.name}>
            <td>{s.name}</td>
            <td>{s.kind}</td>
            <td>{s.owner ?? "shared"}</td>
            <td>{s.hosts.map((h) => h.host_id).join(", ") || "—"}</td>
            <td>{s.source}</td>
          </tr>
        )}
      />
    </section>
  );
}

export function Stages() {
  const { features } = useSession();
  const stages = useStages(features.stages);
  const hosts = useHosts();
  return (
    <div>
      <h1>Cache stages</h1>
      <p className="muted">
        Each tenant's cache as the agents run it: the size the controller allocated and the size the engine installed, the hit
        ratio the real stage measured and the one the tenant's miss-ratio curve predicts at the allocated size.
      </p>
      <Loaded query={stages} what="stages" missing={{ what: "Stages (this controller has no /api/v1/stages)", absent: !features.stages }}>
        {(list) => {
          const caches = cacheStages(list);
          return (
            <>
              <section>
                <h2>Per tenant</h2>
                <TenantCacheTable stages={list} />
              </section>
              {caches.map((s) => (
                <StageSection key={s.name} stage={s} stages={list} hosts={hosts.data ?? []} />
              ))}
              {!caches.length ? <p className="muted">No cache stage is declared (a policy's stages, or POST /api/v1/stages).</p> : null}
              <OtherStages stages={list} />
            </>
          );
        }}
      </Loaded>
    </div>
  );
}

/** The tenant page's cache stages (those it owns or shares), each host's figures and history. */
export function TenantStages({ name }: { name: string }) {
  const stages = useStages();
  const hosts = useHosts();
  // No stages reported (404: null) is no stage serving this tenant, not "not reported yet".
  const read = { data: stages.data === null ? [] : stages.data, error: stages.error };
  return (
    <Loaded query={read} what="stages">
      {(all) => {
        const mine = cacheStages(all, name);
        if (!mine.length) return <p className="muted">No cache stage serves this tenant.</p>;
        return (
          <div data-testid="tenant-stages">
            {mine.map((s) => (
              <StageSection key={s.name} stage={s} stages={all} hosts={hosts.data ?? []} compact />
            ))}
          </div>
        );
      }}
    </Loaded>
  );
}
