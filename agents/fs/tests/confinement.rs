//! The switch writes only under its endpoint roots, the copies it creates belong to the
//! file's owner, and its own state is private (0600 files, 0700 directories).

mod common;
use common::ctx;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use lachesis_fs::confine::Roots;
use lachesis_fs::{config, Switch};

fn rules_to(kind_what: &str, target: &Path) -> String {
    format!(
        r#"[{{"name": "r", "priority": 1, "match": {{"tenant": "t"}},
             "detours": [{{"what": "{kind_what}", "to": {{"kind": "file", "target": "{}"}}}}]}}]"#,
        target.display()
    )
}

fn switch(state: &Path, rules: &str, root: &Path) -> Result<Switch, String> {
    common::switch_of(state, rules, Roots::under(&[root.to_path_buf()]).unwrap())
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn targets_outside_the_roots_are_refused_and_nothing_is_created_there() {
    let t = tempfile::tempdir().unwrap();
    let (root, outside) = (t.path().join("root"), t.path().join("outside"));
    std::fs::create_dir(&root).unwrap();
    let state = root.join(".state");

    // At start: refused, naming the rule and the target.
    let e = switch(&state, &rules_to("io", &outside.join("ep")), &root)
        .err()
        .unwrap();
    assert!(e.contains("rule \"r\"") && e.contains("is outside"), "{e}");
    assert!(!outside.exists());

    // Later: refused, the old rules stay.
    let inside = root.join("ep");
    let sw = switch(&state, &rules_to("io", &inside), &root).unwrap();
    for (what, target) in [
        ("io", outside.join("ep")),
        ("header", outside.join("log/headers.jsonl")),
        ("io", root.join("../outside/ep")),
    ] {
        let f = config::parse(&rules_to(what, &target)).unwrap();
        let e = sw.set_rules(f.rules, &f.stages).unwrap_err().to_string();
        assert!(e.contains("rule \"r\""), "{e}");
        assert_eq!(
            sw.rules()[0].detours[0].to.target,
            inside.display().to_string()
        );
    }
    let log_stage = format!(
        r#"{{"rules": [], "stages": [{{"kind": "log", "name": "log/t", "owner": "t",
              "dir": "{}"}}]}}"#,
        outside.join("log").display()
    );
    let f = config::parse(&log_stage).unwrap();
    let e = sw.set_rules(f.rules, &f.stages).unwrap_err().to_string();
    assert!(
        e.contains("log stage directory") && e.contains("\"log/t\""),
        "{e}"
    );
    assert!(
        !outside.exists(),
        "nothing may be created outside the roots"
    );
}

#[test]
fn endpoint_copies_belong_to_the_files_owner_and_journals_are_private() {
    if !nix_root() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "this test needs root (chown) under CI"
        );
        eprintln!("SKIPPED: needs root to give files to another user");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (root, backing) = (t.path().join("root"), t.path().join("backing"));
    std::fs::create_dir_all(backing.join("dir")).unwrap();
    std::fs::create_dir(&root).unwrap();
    let ep = root.join("ep");
    let state = backing.join(".lachesis-fs");
    let sw = switch(&state, &rules_to("io", &ep), &root).unwrap();

    // The backing file as FUSE's create left it: the writer's (uid 4321), mode 0640.
    let c = ctx(&backing, Some("t"), "/dir/f");
    std::os::unix::fs::fchown(&*c.backing, Some(4321), Some(4322)).unwrap();
    c.backing
        .set_permissions(std::fs::Permissions::from_mode(0o640))
        .unwrap();
    sw.write(&c, b"written on behalf of uid 4321", 0).unwrap();

    let copy = std::fs::metadata(ep.join("dir/f")).unwrap();
    assert_eq!((copy.uid(), copy.gid()), (4321, 4322));
    assert_eq!(copy.permissions().mode() & 0o7777, 0o640);
    // The directory the switch made for it is root's: the writer cannot plant a link there.
    assert_eq!(std::fs::metadata(ep.join("dir")).unwrap().uid(), 0);

    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&ep.join(lachesis_fs::delegate::JOURNAL)), 0o600);
    assert_eq!(mode(&state.join("endpoints.txt")), 0o600);
}

fn nix_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
