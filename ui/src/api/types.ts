// The REST API's shapes under the names the dashboard uses: each an alias of the type generated
// from api-schemas/openapi.json (schema.gen.ts, `npm run gen:api`), so a field the controller
// adds, drops or makes nullable reaches `tsc` at once. Below them, the few shapes that are not
// the API's, each saying why.

import type { components } from "./schema.gen";

type Schemas = components["schemas"];

export type Classifier = Schemas["Classifier"];
export type TenantOut = Schemas["TenantOut"];
export type Match = Schemas["Match"];
export type Detour = Schemas["Detour"];
export type RuleSpec = Schemas["RuleSpec"];
export type RuleOut = Schemas["RuleOut"];
/** What a write of a rule answers: the stored rule and the rollout shipping it. */
export type RuleChange = Schemas["RuleChange"];
/** A device an agent registered. */
export type Device = Schemas["Device"];
export type HostOut = Schemas["HostOut"];
export type RolloutTarget = Schemas["RolloutTargetOut"];
export type RolloutOut = Schemas["RolloutOut"];
export type FieldError = Schemas["FieldError"];
export type Problem = Schemas["Problem"];
/** GET /api/v1/whoami: who this token is, and why it may not write (null: it may). */
export type WhoAmI = Schemas["WhoAmI"];
/** A tenant's LRU miss-ratio curve as the controller reports it (from the agents' telemetry). */
export type ReportedCurve = Schemas["CurveOut"];
export type CurvePoint = ReportedCurve["points"][number];
/** One interval of a tenant's IO, as rates. */
export type TelemetrySample = Schemas["SeriesPoint"];
/** GET /api/v1/tenants/{name}/telemetry */
export type TenantTelemetry = Schemas["TenantTelemetryOut"];
/** GET /api/v1/telemetry/summary */
export type TelemetrySummary = Schemas["TelemetrySummary"];
/** A tenant's share of the cache in one allocation: its size and the curve point there. */
export type TenantShare = Schemas["TenantShare"];
/** GET /api/v1/allocations: a tenant's cache in the allocation in force and in the proposed one. */
export type Allocation = Schemas["TenantAllocationOut"];
export type PlacedStream = Schemas["StreamOut"];
/** GET /api/v1/placements: a device's placement handles, the streams on each, predicted DLWA. */
export type Placement = Schemas["DevicePlacementOut"];
/** A policy in force (GET /api/v1/policies): its newest version. */
export type PolicyOut = Schemas["PolicyOut"];
/** What POST /api/v1/policies answers, dry run or not. */
export type PolicyResult = Schemas["PolicyResult"];
export type AuditEvent = Schemas["AuditEventOut"];
/** One reporting interval of a stage on one host. */
export type StagePoint = Schemas["StagePointOut"];
/** One host's instance of a stage: what desired state asks for and what the agent reports. */
export type StageHost = Schemas["StageHost"];
/** GET /api/v1/stages: a declared stage with what each host runs and measures. */
export type StageOut = Schemas["StageOut"];
/** What a write of a stage answers. */
export type StageChange = Schemas["StageChange"];
/** PATCH /api/v1/stages/{name}: the fields to change. */
export type StagePatch = Schemas["StagePatch"];
/** A placement handle's bytes on a device. */
export type HandleOut = Schemas["HandleOut"];
/** One reporting interval of a device: its write rate and the DLWA in that interval. */
export type DevicePoint = Schemas["DevicePoint"];
/** GET /api/v1/devices: a device, what it measured and the broker's prediction. */
export type DeviceOut = Schemas["DeviceOut"];

/**
 * What the dashboard shows of /readyz. Not the API's Readiness (whose status is always "ok"):
 * a failing check answers 503 with a status of its own, and an unreachable controller or a body
 * that is not JSON is shown as a readiness too (see useReadiness), without `leader` (whether the
 * answering replica holds the leader lease).
 */
export type Readiness = Omit<Schemas["Readiness"], "status" | "leader"> & { status: string; leader?: boolean };

/**
 * What the curve chart draws: points, the allocated size and (if any) the allocator's proposal.
 * Not an API shape: the dashboard joins a tenant's reported curve with its allocation.
 */
export type Curve = { points: CurvePoint[]; allocated_bytes?: number | null; proposed_bytes?: number | null };
