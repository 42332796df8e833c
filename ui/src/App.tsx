import { useState } from "react";
import { ApiError } from "./api/client";
import { useSession } from "./api/session";
import { href, useRoute, type Route } from "./router";
import { Overview } from "./pages/Overview";
import { Tenants } from "./pages/Tenants";
import { Hosts } from "./pages/Hosts";
import { Rules } from "./pages/Rules";
import { Editor } from "./pages/Editor";
import { Policies } from "./pages/Policies";

export function Login() {
  const { login } = useSession();
  const [token, setToken] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: React.FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await login(token.trim());
    } catch (exc) {
      setError(
        exc instanceof ApiError && exc.unauthorized
          ? "The controller refused this token."
          : exc instanceof Error
            ? exc.message
            : String(exc),
      );
    } finally {
      setBusy(false);
    }
  };
  return (
    <form className="login" onSubmit={submit}>
      <h1>Lachesis</h1>
      <p>Sign in with an API token (LACHESIS_API_TOKEN or one made with <code>POST /api/v1/tokens</code>).</p>
      <input
        type="password"
        placeholder="token"
        autoFocus
        value={token}
        onChange={(e) => setToken(e.target.value)}
        data-testid="token"
        aria-label="API token"
      />
      <button type="submit" className="btn primary" disabled={busy} data-testid="login">
        {busy ? "Checking…" : "Sign in"}
      </button>
      {error ? (
        <p className="error" role="alert" data-testid="login-error">
          {error}
        </p>
      ) : null}
    </form>
  );
}

const NAV: { label: string; route: Route }[] = [
  { label: "Overview", route: { page: "overview" } },
  { label: "Tenants", route: { page: "tenants" } },
  { label: "Hosts", route: { page: "hosts" } },
  { label: "Rules & rollouts", route: { page: "rules" } },
  { label: "Tenant & rule editor", route: { page: "editor" } },
];

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case "overview":
      return <Overview />;
    case "tenants":
      return <Tenants name={route.name} />;
    case "hosts":
      return <Hosts id={route.id} />;
    case "rules":
      return <Rules rollout={route.rollout} />;
    case "editor":
      return <Editor />;
    case "policies":
      return <Policies />;
  }
}

export function App() {
  const { token, logout, access, features } = useSession();
  const route = useRoute();
  if (token === null) return <Login />;
  const nav = features.policies ? [...NAV, { label: "Policies", route: { page: "policies" } as Route }] : NAV;
  return (
    <div className="app">
      <header>
        <span className="brand">Lachesis</span>
        <nav>
          {nav.map((n) => (
            <a key={n.label} href={href(n.route)} className={n.route.page === route.page ? "current" : ""} data-testid={`nav-${n.route.page}`}>
              {n.label}
            </a>
          ))}
        </nav>
        <span className="who" data-testid="who">
          {access.role ? `${access.actor ? `${access.actor}: ` : ""}${access.role}${access.tenant ? ` of ${access.tenant}` : ""}` : ""}
          {!access.canWrite ? <span className="badge warn">read-only</span> : null}
          <button type="button" className="btn plain" onClick={logout}>
            Sign out
          </button>
        </span>
      </header>
      <main>
        <Page route={route} />
      </main>
    </div>
  );
}
