//! §4.4's FIFO+ model against the engine's own FwSets store: random subset rewrites (a
//! set-associative cache kept as a log of erase units, as the model assumes) on the simulated
//! FDP SSD, garbage collected by the store's FIFO+ victim choice, for several erase-unit
//! sizes at 7% over-provisioning. Run with `--nocapture` to see the figures.

mod common;

use lachesis_cache::fairywren::analytic::Fifo;
use lachesis_cache::fairywren::store::{Store, Victims};
use lachesis_device::{BlockDevice, PlacementHandle};

/// Writes `rounds × live` random page rewrites of `live` owners into a store of `eus` units of
/// `b` pages; garbage collection keeps two units free by moving a victim's live pages.
/// Returns (pages written, pages the application asked for).
fn run(b: u32, eus: u32, live: u32, rounds: u32) -> (u64, u64) {
    let pages = eus * b;
    let (sim, dev) = common::device(pages / 16 * 5 / 4 + 32, 0.25);
    assert!(sim.lock().unwrap().geometry().capacity_bytes >= u64::from(pages) * 4096);
    let span = common::span(&dev, 0, u64::from(pages) * 4096);
    let mut store = Store::new(0, eus, b, vec![PlacementHandle(0)]);
    let mut at = vec![u32::MAX; live as usize];
    let data = vec![0u8; 4096];
    let mut rng = lachesis_mrc::hash::SplitMix64(u64::from(b));
    let write = |store: &mut Store, at: &mut Vec<u32>, owner: u32| {
        let page = store
            .append(&span, 0, owner, &data)
            .unwrap()
            .expect("a free unit");
        if at[owner as usize] != u32::MAX {
            store.invalidate(at[owner as usize]);
        }
        at[owner as usize] = page;
    };
    let (mut user, mut measured_from) = (0u64, None);
    for i in 0..u64::from(live) * u64::from(rounds) {
        // The first pass fills the store; measure after two more.
        if i == 3 * u64::from(live) {
            measured_from = Some((store.page_writes, user));
        }
        while store.free_eus() < 2 {
            let victim = store.victim().unwrap();
            for (_, owner) in store.live_pages(victim) {
                write(&mut store, &mut at, owner);
            }
            assert!(store.erase(&span, victim).unwrap().is_empty());
        }
        let owner = if i < u64::from(live) {
            i as u32
        } else {
            (rng.next_u64() % u64::from(live)) as u32
        };
        write(&mut store, &mut at, owner);
        user += 1;
    }
    let (w0, u0) = measured_from.unwrap();
    (store.page_writes - w0, user - u0)
}

#[test]
fn fifo_plus_amplification_follows_the_model_across_erase_unit_sizes() {
    let total_pages = 16_384u32;
    let mut last = 0.0;
    for b in [4u32, 16, 64, 256] {
        let eus = total_pages / b;
        // 7% over-provisioning of live data, as Fig. 6.
        let live = (f64::from(total_pages) / 1.07) as u32;
        let (written, user) = run(b, eus, live, 10);
        let measured = written as f64 / user as f64;
        // The two units garbage collection keeps free never hold data: the model's `t` is
        // the rest.
        let model = Fifo {
            b: f64::from(b),
            t: f64::from(eus - 2),
            u: f64::from(live) / f64::from(b),
        }
        .dlwa();
        println!("b = {b:>3} pages: measured {measured:.3}, FIFO+ model {model:.3}");
        assert!(
            (measured - model).abs() / model < 0.05,
            "b = {b}: measured {measured:.3} vs model {model:.3}"
        );
        assert!(measured > last, "larger erase units amplify more");
        last = measured;
    }
}

/// Five sealed units of 4 pages, oldest first, with 4, 3, 2, 1 and 2 live pages. FIFO+ takes
/// the oldest with a dead page, greedy the least live, cost-benefit the one whose dead pages
/// are worth most for their age ((1 − u) · age / (1 + u), age in pages written since sealing:
/// 12 · ¼ / 1¾ = 1.7, 8 · ½ / 1½ = 2.7, 4 · ¾ / 1¼ = 2.4, 0). With every unit all live, each
/// policy still takes one, the oldest.
#[test]
fn victim_policies_choose_by_age_liveness_or_both() {
    let (b, eus) = (4u32, 6u32);
    let (_sim, dev) = common::device(64, 0.25);
    let span = common::span(&dev, 0, u64::from(eus * b) * 4096);
    let data = vec![0u8; 4096];
    let filled = |victims: Victims, dead: &[u32]| {
        let mut store = Store::new(0, eus, b, vec![PlacementHandle(0)]).with_victims(victims);
        for owner in 0..5 * b {
            assert_eq!(store.append(&span, 0, owner, &data).unwrap(), Some(owner));
        }
        for &page in dead {
            store.invalidate(page);
        }
        store
    };
    let dead = [4, 8, 9, 12, 13, 14, 16, 17];
    for (victims, unit, live) in [
        (Victims::FifoPlus, 1, 3),
        (Victims::Greedy, 3, 1),
        (Victims::CostBenefit, 2, 2),
    ] {
        let mut store = filled(victims, &dead);
        assert_eq!(store.victim(), Some(unit), "{victims:?}");
        assert_eq!(store.stream_victim_live, vec![live], "{victims:?}");
        assert_eq!(
            filled(victims, &[]).victim(),
            Some(0),
            "{victims:?} all live"
        );
    }
}
