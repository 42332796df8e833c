//! Tenants by key prefix and by port, each with its own cache: a tenant's objects are in
//! its cache and counted as its own, a key of no tenant is refused, a stage-less tenant has
//! a DRAM cache.

mod common;

use common::{Client, Server};

#[test]
fn tenants_by_prefix_and_by_port_keep_their_objects_apart() {
    let dir = tempfile::tempdir().unwrap();
    let dev = format!("flash0={}:128MiB", dir.path().join("flash0").display());
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let server = Server::start(&[
        "--device",
        &dev,
        "--cache-mib",
        "32",
        "--dram-mib",
        "1",
        "--tenant",
        "alpha=prefix:a:",
        "--tenant",
        "beta=prefix:b:",
        "--tenant",
        &format!("gamma=port:{port}"),
    ]);
    let mut c = server.client();
    // 8000 objects of ~300 bytes: more than alpha's 1 MiB of DRAM, so most go to flash.
    for i in 0..8000 {
        assert_eq!(c.set(&format!("a:{i}"), &[b'a'; 200]), "STORED");
    }
    for i in 0..10 {
        assert_eq!(c.set(&format!("b:{i}"), &[b'b'; 4000]), "STORED");
    }
    assert_eq!(c.set("c:1", b"x"), "CLIENT_ERROR key matches no tenant");
    // On gamma's port every key is gamma's, whatever its prefix.
    let mut g = Client::connect(&server.addrs[1]);
    assert_eq!(g.set("a:0", b"gamma's"), "STORED");
    assert_eq!(g.get("a:0").as_deref(), Some(&b"gamma's"[..]));
    assert_eq!(c.get("a:0").as_deref(), Some(&[b'a'; 200][..]));
    let mut hits = 0;
    for i in 0..8000 {
        if let Some(v) = c.get(&format!("a:{i}")) {
            assert_eq!(v, vec![b'a'; 200]);
            hits += 1;
        }
    }
    assert!(
        hits > 4000,
        "alpha's flash cache holds most of its 8000 objects: {hits}"
    );
    let stat = |c: &mut Client, n: &str| c.stat("lachesis", n).unwrap_or_else(|| panic!("no {n}"));
    assert_eq!(stat(&mut c, "tenant:alpha:sets"), "8000");
    assert_eq!(stat(&mut c, "tenant:beta:sets"), "10");
    assert_eq!(stat(&mut c, "tenant:gamma:sets"), "1");
    assert_eq!(stat(&mut c, "tenant:alpha:gets"), "8001");
    assert_eq!(
        stat(&mut c, "tenant:alpha:get_hits"),
        (hits + 1).to_string()
    );
    // alpha's small objects went to Kangaroo (its DRAM front of 1 MiB holds few of them),
    // beta's large ones stay off it.
    let kangaroo_sets: u64 = stat(&mut c, "stage:cache/alpha:kangaroo:sets")
        .parse()
        .unwrap();
    assert!(kangaroo_sets > 0, "alpha's objects reached Kangaroo");
    assert_eq!(stat(&mut c, "stage:cache/beta:kangaroo:sets"), "0");
    assert_eq!(stat(&mut c, "stage:cache/alpha:owner"), "alpha");
    let host: u64 = stat(&mut c, "device:flash0:host_bytes").parse().unwrap();
    assert!(host > 0, "the flash device saw the tenants' writes");
    assert!(
        stat(&mut c, "device:flash0:media_bytes")
            .parse::<u64>()
            .unwrap()
            >= host
    );
    // Each engine part's placement handle, and the device's bytes per handle: every host
    // byte is some handle's, and a part that wrote has its handle's counters.
    let stats: std::collections::BTreeMap<String, String> =
        c.stats("lachesis").into_iter().collect();
    assert_eq!(stats["placement:cache/alpha:loc"], "1");
    assert_eq!(stats["placement:cache/beta:loc"], "5");
    let kset = &stats["placement:cache/alpha:kset"];
    let per_handle: u64 = stats
        .iter()
        .filter(|(k, _)| k.starts_with("handle:flash0:") && k.ends_with(":host_bytes"))
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum();
    assert_eq!(per_handle, host, "{stats:?}");
    let kset_host: u64 = stats[&format!("handle:flash0:{kset}:host_bytes")]
        .parse()
        .unwrap();
    let kset_media: u64 = stats[&format!("handle:flash0:{kset}:media_bytes")]
        .parse()
        .unwrap();
    assert!(kset_host > 0 && kset_media >= kset_host, "{stats:?}");
}

#[test]
fn a_stage_less_tenant_has_a_dram_cache_and_flush_all_empties_it() {
    let server = Server::start(&["--tenant", "solo=prefix:s", "--dram-mib", "1"]);
    let mut c = server.client();
    assert_eq!(c.set("s1", b"v"), "STORED");
    assert_eq!(
        c.stat("lachesis", "stage:dram/solo:engine").as_deref(),
        Some("dram")
    );
    assert_eq!(c.cmd("flush_all\r\n"), "OK");
    assert_eq!(c.get("s1"), None);
    // LRU within its 1 MiB: the first of 200 values of 16 KiB is gone, the last is there.
    for i in 0..200 {
        assert_eq!(c.set(&format!("s:{i}"), &[b'x'; 16384]), "STORED");
    }
    assert_eq!(c.get("s:0"), None);
    assert!(c.get("s:199").is_some());
}
