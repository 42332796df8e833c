//! The last desired state this agent applied and acknowledged, kept on local disk so a
//! restarted agent runs it (rules, stages, mounts) at once instead of generation 0 until it
//! has resynced with the controller.
//!
//! One file, `DIR/applied-state.json`: the desired-state message as received (so restoring
//! goes through the same checks as applying), written 0600 and atomically (temp file, fsync,
//! rename), in a 0700 directory. It may hold tenants' paths and rules.

use std::path::{Path, PathBuf};

use lachesis_fs::private;

use crate::bus::DesiredState;

pub const FILE: &str = "applied-state.json";

#[derive(Debug, Clone)]
pub struct Persisted {
    path: PathBuf,
}

impl Persisted {
    /// The store in `dir` (created 0700 if missing, narrowed to 0700 if not).
    pub fn open(dir: &Path) -> Result<Self, String> {
        private::create_own_dir(dir).map_err(|e| format!("state dir {}: {e}", dir.display()))?;
        Ok(Persisted {
            path: dir.join(FILE),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state saved last, `None` if none was; a file that does not parse is an error
    /// naming it (the caller starts from generation 0 and says so).
    pub fn load(&self) -> Result<Option<DesiredState>, String> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", self.path.display())),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }

    /// Replaces the saved state with `msg` (atomically: a crash leaves the old or the new).
    pub fn save(&self, msg: &DesiredState) -> Result<(), String> {
        let bytes = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
        private::write_atomic(&self.path, &bytes)
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    pub(crate) fn message(generation: u64) -> DesiredState {
        serde_json::from_value(serde_json::json!({
            "schema": "lachesis.desired-state/v1",
            "host_id": "host-a",
            "generation": generation,
            "rollout_id": null,
            "issued_at": "2026-11-24T21:00:00Z",
            "traceparent": null,
            "tenants": [],
            "rules": [{"name": "r", "priority": 1, "match": {"tenant": "t"},
                       "detours": [{"what": "io", "to": {"kind": "file", "target": "/srv/ep"}}]}]
        }))
        .unwrap()
    }

    #[test]
    fn saves_and_loads_the_last_state_privately() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("agent");
        let p = Persisted::open(&dir).unwrap();
        assert_eq!(p.load().unwrap(), None);
        p.save(&message(3)).unwrap();
        p.save(&message(4)).unwrap();
        assert_eq!(p.load().unwrap(), Some(message(4)));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!((mode(&dir), mode(p.path())), (0o700, 0o600));
        // A second store over the same directory (the restarted agent) sees it.
        assert_eq!(
            Persisted::open(&dir).unwrap().load().unwrap(),
            Some(message(4))
        );
    }

    #[test]
    fn a_damaged_file_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let p = Persisted::open(d.path()).unwrap();
        std::fs::write(p.path(), b"{\"generation\": 3").unwrap();
        let e = p.load().unwrap_err();
        assert!(e.contains(FILE), "{e}");
    }
}
