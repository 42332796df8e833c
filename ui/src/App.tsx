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
import { Stages } from "./pages/Stages";
import { Devices } from "./pages/Devices";
import { Sustainability } from "./pages/Sustainability";
import { Apps } from "./pages/Apps";

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

type NavItem = { label: string; route: Route; when?: "stages" | "devices" | "policies" };

const NAV: NavItem[] = [
  { label: "Overview", route: { page: "overview" } },
  { label: "Tenants", route: { page: "tenants" } },
  { label: "Cache stages", route: { page: "stages" }, when: "stages" },
  { label: "Hosts", route: { page: "hosts" } },
  { label: "Devices", route: { page: "devices" }, when: "devices" },
  { label: "Sustainability", route: { page: "sustainability" } },
  { label: "Applications", route: { page: "apps" } },
  { label: "Rules & rollouts", route: { page: "rules" } },
  { label: "Tenant & rule editor", route: { page: "editor" } },
  { label: "Policies", route: { page: "policies" }, when: "policies" },
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
    case "stages":
      return <Stages />;
    case "devices":
      return <Devices />;
    case "sustainability":
      return <Sustainability />;
    case "apps":
      return <Apps />;
  }
}

export function App() {
  const { token, logout, access, features } = useSession();
  const route = useRoute();
  if (token === null) return <Login />;
  // Pages of endpoints this controller has; devices are shared by all tenants: not for a tenant's token.
  const nav = NAV.filter((n) => !n.when || (features[n.when] && !(n.when === "devices" && access.tenant)));
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
