//! The memcached text protocol parser of the KV front end (`agents/kv/src/protocol/`): a
//! stream from a client is parsed command by command as a connection does. Every step
//! makes progress or waits for more bytes within its limits, a command's wire form parses
//! back to the same command, and the parser allocates no more than the input it was given.

use lachesis_kv::protocol::{encode, parse, Limits, Parse};

const LIMITS: Limits = Limits {
    max_item: 4096,
    max_line: 2048,
};

pub fn check(data: &[u8]) {
    let mut at = 0;
    while at < data.len() {
        let rest = &data[at..];
        let (got, largest) = crate::alloc::largest_during(|| parse(rest, &LIMITS));
        assert!(
            largest <= 2 * rest.len() + 4096,
            "parsing {} bytes allocated a block of {largest}",
            rest.len()
        );
        let used = match got {
            Parse::Incomplete { need } => {
                let need = need.unwrap_or(LIMITS.max_line);
                assert!(
                    need > rest.len(),
                    "waits for {need} bytes with {} in hand",
                    rest.len()
                );
                assert!(
                    need <= LIMITS.max_line + LIMITS.max_item + 2,
                    "waits for {need} bytes"
                );
                return;
            }
            Parse::Command { cmd, used } => {
                let wire = encode(&cmd);
                assert_eq!(
                    parse(&wire, &LIMITS),
                    Parse::Command {
                        cmd,
                        used: wire.len()
                    },
                    "the wire form does not parse back"
                );
                used
            }
            Parse::Error { used, close, .. } => {
                if close {
                    return;
                }
                used
            }
            Parse::Swallow { used, skip, .. } => used + skip,
        };
        assert!(used > 0, "no progress at byte {at}");
        at = at.saturating_add(used);
    }
}
