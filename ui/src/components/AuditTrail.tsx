import { useAudit } from "../api/queries";
import { useSession } from "../api/session";
import { ErrorBox, ago } from "./common";

/** The latest changes and who made them, where the controller keeps an audit trail. */
export function AuditTrail() {
  const { features } = useSession();
  const audit = useAudit(20, features.audit);
  if (!features.audit) return null;
  return (
    <section>
      <h2>Audit trail</h2>
      {audit.error ? <ErrorBox error={audit.error} /> : null}
      {!audit.data?.length ? (
        <p className="muted">No changes recorded yet.</p>
      ) : (
        <table data-testid="audit-table">
          <thead>
            <tr>
              <th>when</th>
              <th>who</th>
              <th>action</th>
              <th>object</th>
            </tr>
          </thead>
          <tbody>
            {audit.data.map((e) => (
              <tr key={e.id}>
                <td>{ago(e.at)}</td>
                <td>{e.actor}</td>
                <td>{e.action}</td>
                <td>
                  {e.resource_kind}/{e.resource_name}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
