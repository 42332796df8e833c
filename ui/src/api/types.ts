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

export type Device = {
  name: string;
  path: string;
  kind: "file" | "block" | "nvme";
  size_bytes: number;
  fdp: boolean;
  placement_handles: number;
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
  acked_at: string | null;
  reason: string | null;
};

export type RolloutOut = {
  id: string;
  state: "pending" | "succeeded" | "failed" | "timed_out";
  reason: string | null;
  cause: string;
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

/** A miss-ratio curve: miss ratio at each cache size. Not in the API yet; feature-detected. */
export type Curve = { points: { size_bytes: number; miss_ratio: number }[]; allocated_bytes?: number | null };
