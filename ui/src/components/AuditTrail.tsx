import { useAudit } from "../api/queries";
import { useSession } from "../api/session";
import { ago } from "./common";
import { LoadedTable } from "./Loaded";

/** The latest changes and who made them, where the controller keeps an audit trail. */
export function AuditTrail() {
  const { features } = useSession();
  const audit = useAudit(20, features.audit);
  if (!features.audit) return null;
  return (
    <section>
      <h2>Audit trail</h2>
      <LoadedTable
        query={audit}
        what="the audit trail"
        empty="No changes recorded yet."
        testId="audit-table"
        head={["when", "who", "action", "object"]}
        row={(e) => (
          <tr key={e.id}>
            <td>{ago(e.at)}</td>
            <td>{e.actor}</td>
            <td>{e.action}</td>
            <td>
              {e.resource_kind}/{e.resource_name}
            </td>
          </tr>
        )}
      />
    </section>
  );
}
