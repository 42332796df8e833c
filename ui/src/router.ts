// Hash routes (#/tenants/analytics): deep links work behind a static file server at /ui/.
import { useEffect, useState } from "react";

export type Route =
  | { page: "overview" }
  | { page: "tenants"; name?: string }
  | { page: "hosts"; id?: string }
  | { page: "stages" }
  | { page: "devices" }
  | { page: "sustainability" }
  | { page: "apps" }
  | { page: "rules"; rollout?: string }
  | { page: "editor" }
  | { page: "policies" };

export function parseRoute(hash: string): Route {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  switch (parts[0]) {
    case "tenants":
      return parts[1] ? { page: "tenants", name: parts[1] } : { page: "tenants" };
    case "hosts":
      return parts[1] ? { page: "hosts", id: parts[1] } : { page: "hosts" };
    case "rules":
      return parts[1] === "rollouts" && parts[2] ? { page: "rules", rollout: parts[2] } : { page: "rules" };
    case "stages":
      return { page: "stages" };
    case "devices":
      return { page: "devices" };
    case "sustainability":
      return { page: "sustainability" };
    case "apps":
      return { page: "apps" };
    case "editor":
      return { page: "editor" };
    case "policies":
      return { page: "policies" };
    default:
      return { page: "overview" };
  }
}

export function href(route: Route): string {
  switch (route.page) {
    case "overview":
      return "#/";
    case "tenants":
      return route.name ? `#/tenants/${encodeURIComponent(route.name)}` : "#/tenants";
    case "hosts":
      return route.id ? `#/hosts/${encodeURIComponent(route.id)}` : "#/hosts";
    case "rules":
      return route.rollout ? `#/rules/rollouts/${encodeURIComponent(route.rollout)}` : "#/rules";
    case "stages":
      return "#/stages";
    case "devices":
      return "#/devices";
    case "sustainability":
      return "#/sustainability";
    case "apps":
      return "#/apps";
    case "editor":
      return "#/editor";
    case "policies":
      return "#/policies";
  }
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(window.location.hash));
  useEffect(() => {
    const on = () => setRoute(parseRoute(window.location.hash));
    window.addEventListener("hashchange", on);
    return () => window.removeEventListener("hashchange", on);
  }, []);
  return route;
}
