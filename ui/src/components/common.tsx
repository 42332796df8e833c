import type { ReactNode } from "react";
import { ApiError } from "../api/client";
import { useSession } from "../api/session";

/** A button that changes something: disabled, with the reason shown, when this token cannot write. */
export function WriteButton(props: {
  onClick: () => void;
  children: ReactNode;
  busy?: boolean;
  testId?: string;
  kind?: "primary" | "danger" | "plain";
  extraDisabledReason?: string | null;
}) {
  const { access } = useSession();
  const reason = !access.canWrite ? access.reason : props.extraDisabledReason ?? null;
  return (
    <span className="write">
      <button
        type="button"
        className={`btn ${props.kind ?? "primary"}`}
        disabled={!!reason || props.busy}
        title={reason ?? undefined}
        data-testid={props.testId}
        onClick={props.onClick}
      >
        {props.busy ? "Working…" : props.children}
      </button>
      {!access.canWrite && reason ? (
        <span className="why" data-testid="write-disabled-reason">
          {reason}
        </span>
      ) : null}
    </span>
  );
}

export function ErrorBox({ error }: { error: unknown }) {
  if (!error) return null;
  const msg = error instanceof ApiError ? `${error.problem.title}: ${error.problem.detail}` : String(error);
  return (
    <div className="error" role="alert">
      {msg}
      {error instanceof ApiError && error.problem.errors?.length ? (
        <ul>
          {error.problem.errors.map((e, i) => (
            <li key={i}>
              <code>{e.field}</code>: {e.message}
            </li>
          ))}
        </ul>
      ) : null}
    </div>
  );
}

export function Badge({ tone, children, testId }: { tone: "ok" | "bad" | "warn" | "idle"; children: ReactNode; testId?: string }) {
  return (
    <span className={`badge ${tone}`} data-testid={testId}>
      {children}
    </span>
  );
}

export function stateTone(state: string): "ok" | "bad" | "warn" | "idle" {
  if (state === "succeeded" || state === "applied") return "ok";
  if (state === "pending") return "warn";
  if (state === "failed" || state === "timed_out" || state === "rejected") return "bad";
  return "idle";
}

export function Flag({ on, label }: { on: boolean; label: string }) {
  return <span className={`flag ${on ? "on" : "off"}`} title={`${label}: ${on ? "yes" : "no"}`}>{on ? "✓" : "✗"} {label}</span>;
}

export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return "—";
  const t = Date.parse(iso.endsWith("Z") || /[+-]\d\d:\d\d$/.test(iso) ? iso : iso + "Z");
  if (Number.isNaN(t)) return iso;
  const s = Math.round((now - t) / 1000);
  if (s < 0) return "just now";
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${Number.isInteger(v) ? v : v.toFixed(1)} ${units[i]}`;
}

/** A byte count, or "—" where none was reported. */
export const size = (n: number | null | undefined) => (typeof n === "number" ? bytes(n) : "—");

/** A ratio such as a DLWA to two places, or "—" where none was reported or it is no finite number. */
export const ratio = (x: number | null | undefined) => (typeof x === "number" && Number.isFinite(x) ? x.toFixed(2) : "—");

export function Loading({ what }: { what: string }) {
  return <p className="muted">Loading {what}…</p>;
}

export function NotReported({ what }: { what: string }) {
  return (
    <p className="muted not-reported" data-testid="not-reported">
      {what}: not reported yet
    </p>
  );
}
