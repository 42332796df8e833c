//! Agent-to-agent forwarding over TCP for remote endpoints (`tcp://HOST:PORT/dir`), the side
//! a route uses: the frame format ([`frame`]), the client ([`client`], its latency monitor and
//! demotion queue); with a shared key both ends authenticate each other at connect
//! ([`auth`]). The other side, the forwarding server with its server-level caches, is
//! `crate::serve`: it runs stages, so it sits above them, while stages use this client.

pub mod auth;
pub mod client;
pub mod demote;
pub mod frame;
pub mod latency;

pub use client::Client;

/// A parsed `tcp://HOST:PORT/dir` endpoint target: where to connect and the directory (under
/// the server's root) that mirrors the namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteTarget {
    pub addr: String,
    pub dir: String,
}

impl RemoteTarget {
    /// `Ok(None)` when `target` names no remote (a local path).
    pub fn parse(target: &str) -> Result<Option<RemoteTarget>, String> {
        let Some(rest) = target.strip_prefix("tcp://") else {
            if target.contains("://") {
                return Err(format!(
                    "endpoint {target:?}: unknown scheme (expected tcp://HOST:PORT/dir or an absolute directory)"
                ));
            }
            return Ok(None);
        };
        let (addr, dir) = rest.split_once('/').unwrap_or((rest, ""));
        let port_ok = addr
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !port_ok {
            return Err(format!(
                "endpoint {target:?}: expected tcp://HOST:PORT/dir with a port in 1..65535"
            ));
        }
        if dir.split('/').any(|c| c == ".." || c == ".") {
            return Err(format!(
                "endpoint {target:?}: the directory may not contain . or .."
            ));
        }
        Ok(Some(RemoteTarget {
            addr: addr.to_string(),
            dir: dir.trim_matches('/').to_string(),
        }))
    }

    /// The remote path of namespace path `ns_path`.
    pub fn path_of(&self, ns_path: &str) -> String {
        let p = ns_path.trim_start_matches('/');
        if self.dir.is_empty() {
            p.to_string()
        } else {
            format!("{}/{p}", self.dir)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_targets_parse_and_refuse_bad_input() {
        let t = RemoteTarget::parse("tcp://10.0.0.2:7070/tenants/a")
            .unwrap()
            .unwrap();
        assert_eq!(t.addr, "10.0.0.2:7070");
        assert_eq!(t.path_of("/db/x"), "tenants/a/db/x");
        assert_eq!(RemoteTarget::parse("/srv/ep").unwrap(), None);
        for (bad, why) in [
            ("tcp://host/x", "port"),
            ("tcp://host:0/x", "port"),
            ("tcp://:70/x", "port"),
            ("tcp://h:70/../etc", ". or .."),
            ("nfs://h/x", "unknown scheme"),
        ] {
            let e = RemoteTarget::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
