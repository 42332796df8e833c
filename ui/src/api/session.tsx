// The session: the token (sessionStorage, sent as Bearer), the API client built from it, the
// features the controller offers, and whether this token may write (learned from a 403 or,
// where the controller has one, from its whoami endpoint).

import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from "react";
import { ApiClient, ApiError, detectFeatures, type Features, type Fetch } from "./client";

const TOKEN_KEY = "lachesis.token";

export type Access = { canWrite: boolean; reason: string | null; role: string | null; tenant: string | null; actor: string | null };

type Session = {
  token: string | null;
  client: ApiClient;
  features: Features;
  access: Access;
  login(token: string): Promise<void>;
  logout(): void;
  /**
   * Record what an error says about our rights (a 401 ends the session; a 403 to a write turns
   * writing off, with the controller's reason); returns the error for chaining.
   */
  noteError(err: unknown, write?: boolean): unknown;
};

const NO_FEATURES: Features = { policies: false, audit: false, whoami: null, stages: false, devices: false };
const FULL_ACCESS: Access = { canWrite: true, reason: null, role: null, tenant: null, actor: null };

const SessionContext = createContext<Session | null>(null);

export function readToken(): string | null {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/**
 * What a whoami answer says about writing: the controller's own reason when it refuses writes
 * (write_refusal), else what the role implies. Unknown shapes leave writing allowed: the API decides.
 */
export function accessFrom(whoami: unknown): Access {
  if (!whoami || typeof whoami !== "object") return FULL_ACCESS;
  const w = whoami as Record<string, unknown>;
  const role = typeof w.role === "string" ? w.role : null;
  const tenant = typeof w.tenant === "string" ? w.tenant : null;
  const actor = typeof w.actor === "string" ? w.actor : null;
  if (typeof w.write_refusal === "string" && w.write_refusal) return { canWrite: false, reason: w.write_refusal, role, tenant, actor };
  if (role === "viewer") {
    return { canWrite: false, reason: `${actor ?? "this token"} is a viewer: it can look but not change anything`, role, tenant, actor };
  }
  return { canWrite: true, reason: null, role, tenant, actor };
}

export function SessionProvider({ children, fetchImpl }: { children: ReactNode; fetchImpl?: Fetch }) {
  const [token, setToken] = useState<string | null>(readToken);
  const [features, setFeatures] = useState<Features>(NO_FEATURES);
  const [access, setAccess] = useState<Access>(FULL_ACCESS);
  const client = useMemo(() => new ApiClient(token, fetchImpl), [token, fetchImpl]);

  const discover = useCallback(
    async (c: ApiClient) => {
      try {
        const f = detectFeatures(await c.get("/openapi.json"));
        setFeatures(f);
        if (f.whoami) setAccess(accessFrom(await c.get(f.whoami)));
      } catch {
        // an older controller: the REST API of openapi.json as shipped
      }
    },
    [],
  );

  const login = useCallback(
    async (candidate: string) => {
      const c = new ApiClient(candidate || null, fetchImpl);
      await c.get("/api/v1/hosts"); // throws ApiError(401) for a wrong token
      try {
        sessionStorage.setItem(TOKEN_KEY, candidate);
      } catch {
        // private mode: the token lives as long as the page
      }
      setAccess(FULL_ACCESS);
      setToken(candidate); // the effect below discovers the features
    },
    [fetchImpl, discover],
  );

  const logout = useCallback(() => {
    sessionStorage.removeItem(TOKEN_KEY);
    setToken(null);
    setAccess(FULL_ACCESS);
  }, []);

  const noteError = useCallback((err: unknown, write = true) => {
    if (write && err instanceof ApiError && err.forbidden) {
      setAccess((a) => ({ ...a, canWrite: false, reason: `the controller refused: ${err.problem.detail}` }));
    }
    if (err instanceof ApiError && err.unauthorized) {
      sessionStorage.removeItem(TOKEN_KEY);
      setToken(null);
    }
    return err;
  }, []);

  // Discover features for a session restored from sessionStorage (login discovers its own).
  useEffect(() => {
    if (token !== null) void discover(client);
  }, [token, client, discover]);

  const value = useMemo(
    () => ({ token, client, features, access, login, logout, noteError }),
    [token, client, features, access, login, logout, noteError],
  );
  return <SessionContext.Provider value={value}>{children}</SessionContext.Provider>;
}

export function useSession(): Session {
  const s = useContext(SessionContext);
  if (!s) throw new Error("useSession outside SessionProvider");
  return s;
}
