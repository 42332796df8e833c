//! The lachesis-fs rules file (`agents/fs/src/config.rs`): text in, a rule list and stage
//! set out, or an error naming what is wrong. What it accepts must also be what a switch can
//! run (the table builds, the stages check, every stage a rule names is declared), and must
//! read back the same when written out again.

use lachesis_fs::config::parse;
use lachesis_switch::{check_stages, DetourKind, DetourWhat, RuleTable};

pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (parsed, largest) = crate::alloc::largest_during(|| parse(text));
    assert!(
        largest <= super::json_alloc_bound(data.len()),
        "parsing {} bytes allocated a block of {largest} bytes",
        data.len()
    );
    let file = match parsed {
        Ok(f) => f,
        Err(e) => {
            assert!(!e.is_empty());
            return;
        }
    };
    RuleTable::build(file.rules.clone()).expect("an accepted rules file builds a table");
    check_stages(&file.stages).expect("an accepted rules file's stages check");
    for r in &file.rules {
        for d in &r.detours {
            if d.what == DetourWhat::Io && d.to.kind == DetourKind::Stage {
                assert!(
                    file.stages.iter().any(|s| s.name() == d.to.target),
                    "rule {:?} names undeclared stage {:?}",
                    r.name,
                    d.to.target
                );
            }
        }
    }
    let again = serde_json::json!({"rules": file.rules, "stages": file.stages}).to_string();
    let back =
        parse(&again).unwrap_or_else(|e| panic!("written back, it is refused: {e}\n{again}"));
    assert_eq!((back.rules, back.stages), (file.rules, file.stages));
}
