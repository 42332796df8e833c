// The data layer's transport: fetch with the bearer token, JSON in and out, and every
// non-2xx answer turned into an ApiError carrying the RFC 9457 problem.

import type { Problem } from "./types";

export class ApiError extends Error {
  readonly status: number;
  readonly problem: Problem;

  constructor(problem: Problem) {
    super(problem.detail || problem.title || `HTTP ${problem.status}`);
    this.name = "ApiError";
    this.status = problem.status;
    this.problem = problem;
  }

  /** The caller may not do this (wrong token, or a role that cannot write). */
  get forbidden(): boolean {
    return this.status === 403;
  }

  get unauthorized(): boolean {
    return this.status === 401;
  }
}

/** Build a Problem from any error answer: problem+json, plain JSON ({detail}), or text. */
export async function parseProblem(response: Response): Promise<Problem> {
  const fallback: Problem = {
    type: "about:blank",
    title: response.statusText || `HTTP ${response.status}`,
    status: response.status,
    detail: response.statusText || `HTTP ${response.status}`,
  };
  let text = "";
  try {
    text = await response.text();
  } catch {
    return fallback;
  }
  if (!text) return fallback;
  try {
    const body = JSON.parse(text) as unknown;
    if (body && typeof body === "object" && !Array.isArray(body)) {
      const b = body as Record<string, unknown>;
      const detail = typeof b.detail === "string" ? b.detail : typeof b.title === "string" ? b.title : fallback.detail;
      return {
        ...b,
        type: typeof b.type === "string" ? b.type : fallback.type,
        title: typeof b.title === "string" ? b.title : fallback.title,
        status: typeof b.status === "number" ? b.status : response.status,
        detail,
        errors: Array.isArray(b.errors) ? (b.errors as Problem["errors"]) : null,
      };
    }
  } catch {
    // not JSON: keep the text as the detail
  }
  return { ...fallback, detail: text.slice(0, 500) };
}

export type Fetch = typeof fetch;

export class ApiClient {
  constructor(
    private readonly token: string | null,
    private readonly fetchImpl: Fetch = (...args) => fetch(...args),
    private readonly base = "",
  ) {}

  headers(contentType: string | null): Record<string, string> {
    const h: Record<string, string> = { Accept: "application/json, application/problem+json" };
    if (this.token) h.Authorization = `Bearer ${this.token}`;
    if (contentType) h["Content-Type"] = contentType;
    return h;
  }

  async request<T>(method: string, path: string, body?: unknown, raw?: { text: string; contentType: string }): Promise<T> {
    let response: Response;
    try {
      response = await this.fetchImpl(this.base + path, {
        method,
        headers: this.headers(raw ? raw.contentType : body !== undefined ? "application/json" : null),
        body: raw ? raw.text : body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (exc) {
      throw new ApiError({
        type: "network-error",
        title: "Controller unreachable",
        status: 0,
        detail: `cannot reach the controller: ${exc instanceof Error ? exc.message : String(exc)}`,
      });
    }
    if (!response.ok) throw new ApiError(await parseProblem(response));
    if (response.status === 204) return undefined as T;
    const text = await response.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  get<T>(path: string): Promise<T> {
    return this.request<T>("GET", path);
  }
  post<T>(path: string, body: unknown): Promise<T> {
    return this.request<T>("POST", path, body);
  }
  /** POST a text body as it is (a YAML policy document). */
  postText<T>(path: string, text: string, contentType = "application/yaml"): Promise<T> {
    return this.request<T>("POST", path, undefined, { text, contentType });
  }
  put<T>(path: string, body: unknown): Promise<T> {
    return this.request<T>("PUT", path, body);
  }
  delete<T>(path: string): Promise<T> {
    return this.request<T>("DELETE", path);
  }
}

/**
 * A read of data the controller may not have yet: 404 (the endpoint is not deployed, or nothing
 * was reported for this object) is "no data yet", null; any other refusal stays an error.
 */
export async function orNoData<T>(read: Promise<T>): Promise<T | null> {
  try {
    return await read;
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return null;
    throw err;
  }
}

/** Paths of the controller's OpenAPI document, to switch on features that exist. */
export type Features = { policies: boolean; audit: boolean; whoami: string | null; stages: boolean; devices: boolean };

export function detectFeatures(openapi: unknown): Features {
  const paths = Object.keys(
    (openapi && typeof openapi === "object" && (openapi as { paths?: object }).paths) || {},
  );
  const whoami = paths.find((p) => /^\/api\/v1\/(auth\/)?(whoami|me)$/.test(p)) ?? null;
  return {
    policies: paths.includes("/api/v1/policies"),
    audit: paths.some((p) => p.startsWith("/api/v1/audit")),
    whoami,
    stages: paths.includes("/api/v1/stages"),
    devices: paths.includes("/api/v1/devices"),
  };
}
