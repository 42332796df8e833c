// Types of the controller's REST API (api-schemas/openapi.json, components.schemas).

export type Classifier = { kind: "cgroup" | "uid" | "process" | "path_prefix" | "key_prefix"; value: string };

export type TenantOut = {
  name: string;
  classifiers: Classifier[];
  description: string | null;
  created_at: string;
  updated_at: string;
};

export type Match = {
  tenant?: string | null;
  ops?: ("read" | "write" | "create" | "delete")[];
  path_prefix?: string | null;
  key_prefix?: string | null;
  range?: { start: number; end: number } | null;
};

export type Detour = { what: "io" | "header"; to: { kind: "file" | "stage" | "controller"; target: string } };

export type RuleSpec = {
  name: string;
  priority: number;
  hosts?: string[] | null;
  match: Match;
  detours: Detour[];
};

export type RuleOut = RuleSpec & { hosts: string[] | null; created_at: string; updated_at: string };

/** What a write of a tenant or rule answers: the stored object and the rollout shipping it. */
export type Change = { name: string; rollout_id: string };

/** A device an agent registered (components.schemas.Device). */
export type Device = {
  name: string;
  path: string;
  /** measured: data in a file with an FDP SSD's FTL simulated beside it (media bytes measured). */
  kind: "file" | "block" | "nvme" | "measured";
  size_bytes: number;
  fdp: boolean;
  placement_handles: number;
  /** The device's reclaim unit: the region the cache stages' flash engines size in. */
  reclaim_unit_bytes?: number;
};

export type HostOut = {
  id: string;
  agent_version: string;
  capabilities: {
    cpus: number;
    devices: Device[];
    kernel: { release: string; btf: boolean; io_uring: boolean; fuse: boolean };
  };
  enrolled_at: string;
  registered_at: string;
  last_seen: string;
  alive: boolean | null;
  desired_generation: number;
  acked_generation: number;
};

export type RolloutTarget = {
  host_id: string;
  generation: number;
  status: "pending" | "applied" | "rejected";
  /** Two-phase rollouts: quiesce sent, drained, install sent (one-phase targets: install). */
  phase?: "quiesce" | "drained" | "install";
  drained_at?: string | null;
  acked_at: string | null;
  reason: string | null;
};

export type RolloutOut = {
  id: string;
  state: "pending" | "succeeded" | "failed" | "timed_out";
  reason: string | null;
  cause: string;
  /** Two-phase rollouts: the phase reached (hold: a switch quiesce waiting for its resume); null: one phase. */
  phase?: "quiesce" | "hold" | "install" | null;
  rolled_back_by?: string | null;
  /** After a rollback: the resources the database got back (a policy version is name/version). */
  restored?: { kind: "tenant" | "stage" | "rule" | "policy" | "allocation" | "placement"; name: string }[] | null;
  traceparent: string | null;
  created_at: string;
  deadline: string;
  completed_at: string | null;
  targets: RolloutTarget[];
};

export type Readiness = { status: string; checks: Record<string, string> };

export type FieldError = { field: string; message: string };

export type Problem = {
  type: string;
  title: string;
  status: number;
  detail: string;
  errors?: FieldError[] | null;
  instance?: string | null;
  [extra: string]: unknown;
};

/** GET /api/v1/whoami: who this token is, and why it may not write (null: it may). */
export type WhoAmI = { actor: string; role: "admin" | "operator" | "viewer"; tenant: string | null; write_refusal?: string | null };

export type CurvePoint = { size_bytes: number; miss_ratio: number };

/** A tenant's LRU miss-ratio curve as the controller reports it (from the agents' telemetry). */
export type ReportedCurve = { policy: string; algorithm: string; unit: string; points: CurvePoint[]; references: number };

/** One interval of a tenant's IO, as rates. */
export type TelemetrySample = {
  at: string;
  read_iops: number;
  write_iops: number;
  read_bytes_per_s: number;
  write_bytes_per_s: number;
  hit_ratio: number | null;
};

/** GET /api/v1/tenants/{name}/telemetry */
export type TenantTelemetry = { tenant: string; updated_at: string | null; curve: ReportedCurve | null; series: TelemetrySample[] };

/** GET /api/v1/telemetry/summary */
export type TelemetrySummary = {
  total_iops: number;
  hit_ratio: number | null;
  tenants: { name: string; iops: number; hit_ratio: number | null }[];
  devices: { host_id: string; name: string; write_bytes_per_s: number | null; dlwa: number | null }[];
};

/** A tenant's share of the cache in one allocation: its size and the curve point there. */
export type TenantShare = {
  size_bytes: number;
  reserved_bytes: number;
  hit_ratio: number;
  weight: number;
  idle: boolean;
  curve_point: { size_bytes: number; miss_ratio: number; index: number };
};

/** GET /api/v1/allocations: a tenant's cache in the allocation in force and in the proposed one. */
export type Allocation = { tenant: string; current: TenantShare | null; proposed: TenantShare | null; guarantee?: unknown };

export type PlacedStream = { tenant: string; part: string; space: number; writes: number; trimmed: boolean; handle: number };

/** GET /api/v1/placements: a device's placement handles, the streams on each, predicted DLWA. */
export type Placement = {
  host_id: string;
  device: string;
  handles: number;
  overprovisioning: number;
  streams: PlacedStream[];
  shared: { handle: number; streams: string[]; reason: string }[];
  predicted_dlwa: number;
  predicted_by: "simulator" | "model";
  model_dlwa: number;
  warnings: string[];
  computed_at: string;
};

/** What the curve chart draws: points, the allocated size and (if any) the allocator's proposal. */
export type Curve = { points: CurvePoint[]; allocated_bytes?: number | null; proposed_bytes?: number | null };

/** A policy in force (GET /api/v1/policies): its newest version. */
export type PolicyOut = {
  name: string;
  version: number;
  created_at: string;
  created_by: string;
  rollout_id: string | null;
  tenants: string[];
  document: string;
  compiled?: { stages?: unknown[] };
};

/** What POST /api/v1/policies answers, dry run or not. */
export type PolicyResult = {
  name: string;
  version: number;
  dry_run: boolean;
  rollout_id: string | null;
  diff: Record<string, unknown>;
  warnings: Record<string, unknown>[];
};

export type AuditEvent = {
  id: number;
  at: string;
  actor: string;
  action: string;
  resource_kind: string;
  resource_name: string;
  rollout_id: string | null;
};

/** One reporting interval of a stage on one host (StagePointOut). */
export type StagePoint = {
  at: string;
  /** The size desired state asked for then. */
  size_bytes: number | null;
  installed_bytes: number | null;
  /** Hits over block reads in the interval ending at `at`. */
  hit_ratio: number | null;
};

/** One host's instance of a stage: what desired state asks for and what the agent reports (StageHost). */
export type StageHost = {
  host_id: string;
  /** Cache size shipped to the host (the allocation while one is in force). */
  allocated_bytes: number | null;
  reported_at: string | null;
  /** Size the engine holds now. */
  installed_bytes: number | null;
  hits: number | null;
  misses: number | null;
  /** Hits over block reads since the stage was built. */
  hit_ratio: number | null;
  bytes_read_hit: number | null;
  bytes_read_miss: number | null;
  bytes_written: number | null;
  evictions: number | null;
  writebacks: number | null;
  dirty_bytes: number | null;
  /** Per reporting interval, oldest first (bounded). */
  series: StagePoint[];
};

/** GET /api/v1/stages: a declared stage (StageOut) with what each host runs and measures. */
export type StageOut = {
  name: string;
  kind: string;
  owner: string | null;
  /** api, or policy/NAME for a stage a policy declares. */
  source: string;
  /** The declaration, as given (defaults filled in): size_bytes, engine, write_mode, shared_with, ... */
  declared: Record<string, unknown>;
  hosts: StageHost[];
};

/** What a write of a stage answers (StageChange). */
export type StageChange = StageOut & { rollout_id: string };

/** PATCH /api/v1/stages/{name}: the fields to change (StagePatch). */
export type StagePatch = {
  size_bytes?: number | null;
  write_mode?: "through" | "back" | "around" | null;
  eviction?: "lru" | "fifo" | "mrc" | null;
  engine?: "dram" | "loc" | "kangaroo" | "hybrid" | null;
  max_dirty_bytes?: number | null;
  max_bandwidth_bytes_per_s?: number | null;
  max_iops?: number | null;
};

/** A placement handle's bytes on a device (HandleOut). */
export type HandleOut = { handle: number; host_bytes_written: number; media_bytes_written: number | null; dlwa: number | null };

/** One reporting interval of a device (DevicePoint): its write rate and the DLWA in that interval. */
export type DevicePoint = { at: string; write_bytes_per_s: number; dlwa: number | null };

/** GET /api/v1/devices (DeviceOut): a device, what it measured and the broker's prediction. */
export type DeviceOut = {
  host: string;
  name: string;
  kind: string;
  path: string;
  size_bytes: number;
  placement_handles: number;
  reclaim_unit_bytes: number | null;
  /** Since the agent opened the device. */
  host_bytes_written: number | null;
  media_bytes_written: number | null;
  /** Media over host bytes since the agent opened the device. */
  dlwa: number | null;
  /** The placement broker's prediction for the streams placed on the device. */
  predicted_dlwa: number | null;
  /** simulator or model (the FDP paper's closed form). */
  predicted_by: string | null;
  handles: HandleOut[];
  series: DevicePoint[];
};
