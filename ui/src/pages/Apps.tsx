// The control applications, one section each (tail-latency routing, two-level caches,
// declared maintenance IO): each application is its own component under pages/apps/.
import { DeclaredIo } from "./apps/DeclaredIo";
import { TailLatency } from "./apps/TailLatency";
import { TwoLevel } from "./apps/TwoLevel";

export function Apps() {
  return (
    <div className="apps" data-testid="apps-page">
      <h1>Applications</h1>
      <TailLatency />
      <TwoLevel />
      <DeclaredIo />
    </div>
  );
}
