//! The scheduler against counts: orders of dispatch, bytes per simulated round. Time here is
//! the scheduler's argument, never the test's clock.

use super::*;
use proptest::prelude::*;

const KIB4: u64 = 4096;

fn params(reservation: f64, weight: f64, limit: Option<f64>) -> Params {
    Params::new(reservation, weight, limit, None).unwrap()
}

/// Dispatches until nothing may go at `now`: the classes in dispatch order.
fn drain(s: &mut Scheduler<&'static str, u32>, now: f64) -> Vec<&'static str> {
    let mut out = Vec::new();
    while let Next::Dispatch { class, .. } = s.dispatch(now) {
        out.push(class);
    }
    out
}

#[test]
fn a_high_tenant_queued_beside_a_low_one_is_served_first() {
    let mut s = Scheduler::new();
    s.set_class("low", params(0.0, 1.0, None));
    s.set_class("high", params(0.0, 16.0, None));
    // The low tenant's 16 requests queued first, the high one's after.
    for i in 0..16 {
        s.enqueue(&"low", KIB4, i, 0.0).unwrap();
    }
    for i in 0..16 {
        s.enqueue(&"high", KIB4, i, 0.0).unwrap();
    }
    let order = drain(&mut s, 0.0);
    assert_eq!(order.len(), 32);
    assert_eq!(order[..16], ["high"; 16], "{order:?}");
    assert_eq!(order[16..], ["low"; 16]);
    assert_eq!(s.counters(&"high").unwrap().contended, 16);
    // Every low request went once the high queue was empty: none was contended.
    assert_eq!(s.counters(&"low").unwrap().contended, 0);
}

#[test]
fn weights_share_a_backlog_sixteen_to_one_and_low_is_not_starved() {
    let mut s = Scheduler::new();
    s.set_class("low", params(0.0, 1.0, None));
    s.set_class("high", params(0.0, 16.0, None));
    for i in 0..200 {
        s.enqueue(&"low", KIB4, i, 0.0).unwrap();
        s.enqueue(&"high", KIB4, i, 0.0).unwrap();
    }
    let order = drain(&mut s, 0.0);
    // In the first 170 dispatches (both backlogged throughout), 160 high and 10 low.
    let lows = order[..170].iter().filter(|c| **c == "low").count();
    assert_eq!(lows, 10, "{order:?}");
}

#[test]
fn a_class_idle_for_a_while_gets_no_credit_for_it() {
    let mut s = Scheduler::new();
    s.set_class("a", params(0.0, 1.0, None));
    s.set_class("b", params(0.0, 1.0, None));
    for i in 0..100 {
        s.enqueue(&"a", KIB4, i, 0.0).unwrap();
    }
    assert_eq!(drain(&mut s, 0.0).len(), 100);
    // b arrives after a's hundred: the two alternate from here, b does not get 100 in a row.
    for i in 0..10 {
        s.enqueue(&"a", KIB4, i, 1.0).unwrap();
        s.enqueue(&"b", KIB4, i, 1.0).unwrap();
    }
    let order = drain(&mut s, 1.0);
    let bs_in_first_4 = order[..4].iter().filter(|c| **c == "b").count();
    assert_eq!(bs_in_first_4, 2, "{order:?}");
}

/// A server that completes one 4 KiB request per millisecond (4,096,000 bytes/s), always
/// busy: per round of 100 dispatches, the bytes each class got.
fn rounds(s: &mut Scheduler<&'static str, u32>, rounds: usize) -> Vec<BTreeMap<&'static str, u64>> {
    let mut out = Vec::new();
    let mut tick = 0u32;
    for _ in 0..rounds {
        let mut got = BTreeMap::new();
        for _ in 0..100 {
            let now = f64::from(tick) / 1000.0;
            tick += 1;
            if let Next::Dispatch { class, .. } = s.dispatch(now) {
                *got.entry(class).or_insert(0) += KIB4;
            }
        }
        out.push(got);
    }
    out
}

#[test]
fn a_reservation_is_met_every_round_against_a_sixteen_times_heavier_tenant() {
    let mut s = Scheduler::new();
    // 1,024,000 bytes/s reserved: a quarter of the server, 25 of each round's 100 requests.
    s.set_class("gold", params(1_024_000.0, 1.0, None));
    s.set_class("heavy", params(0.0, 16.0, None));
    for i in 0..1000 {
        s.enqueue(&"gold", KIB4, i, 0.0).unwrap();
        s.enqueue(&"heavy", KIB4, i, 0.0).unwrap();
    }
    for (i, r) in rounds(&mut s, 8).iter().enumerate() {
        // Each round is 0.1 s: 102,400 bytes owed, 25 requests.
        assert!(r["gold"] >= 25 * KIB4, "round {i}: {r:?}");
        assert_eq!(r["gold"] + r["heavy"], 100 * KIB4);
    }
    let c = s.counters(&"gold").unwrap();
    assert!(c.reserved_bytes >= 8 * 25 * KIB4 - KIB4, "{c:?}");
    assert!(c.contended_reserved > 0);
    // Without the reservation the same weights give gold one request in 17.
    let mut s = Scheduler::new();
    s.set_class("gold", params(0.0, 1.0, None));
    s.set_class("heavy", params(0.0, 16.0, None));
    for i in 0..1000 {
        s.enqueue(&"gold", KIB4, i, 0.0).unwrap();
        s.enqueue(&"heavy", KIB4, i, 0.0).unwrap();
    }
    for r in rounds(&mut s, 8) {
        assert!(r["gold"] <= 7 * KIB4, "{r:?}");
    }
    assert_eq!(s.counters(&"gold").unwrap().reserved_bytes, 0);
}

#[test]
fn a_limit_holds_a_tenant_below_it_even_on_an_idle_server() {
    let mut s = Scheduler::new();
    // 409,600 bytes/s: 10 requests per 0.1 s round, though the server could do 100.
    s.set_class("capped", params(0.0, 4.0, Some(409_600.0)));
    for i in 0..100 {
        s.enqueue(&"capped", KIB4, i, 0.0).unwrap();
    }
    for r in rounds(&mut s, 5) {
        assert_eq!(r["capped"], 10 * KIB4, "{r:?}");
    }
    let c = s.counters(&"capped").unwrap();
    // Every request but the first was held by the limit.
    assert_eq!((c.dispatched, c.limited), (50, 49));
    match s.dispatch(0.5) {
        Next::Wait { until } => assert!(until > 0.5),
        n => panic!("{n:?}"),
    }
}

#[test]
fn bad_parameters_are_refused_naming_what() {
    assert_eq!(
        Params::new(0.0, 0.5, None, None),
        Err(ParamsError::Weight(0.5))
    );
    assert_eq!(
        Params::new(2.0, 1.0, Some(1.0), None),
        Err(ParamsError::ReservationOverLimit {
            reservation: 2.0,
            limit: 1.0
        })
    );
    assert_eq!(
        Params::new(0.0, 1.0, None, Some(0.0)),
        Err(ParamsError::Limit(0.0))
    );
    let mut s: Scheduler<&str, ()> = Scheduler::new();
    assert!(s.enqueue(&"nobody", 1, (), 0.0).is_err());
    assert!(matches!(s.dispatch(0.0), Next::Idle));
}

#[derive(Debug, Clone)]
enum Op {
    Enqueue { class: usize, cost: u64 },
    Dispatch,
    Advance { ms: u16 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..4, 1u64..65536).prop_map(|(class, cost)| Op::Enqueue { class, cost }),
        Just(Op::Dispatch),
        (0u16..50).prop_map(|ms| Op::Advance { ms }),
    ]
}

fn class_params() -> impl Strategy<Value = Params> {
    (
        prop_oneof![Just(0.0), 1000.0..1e6f64],
        1.0..64f64,
        prop_oneof![Just(None), (1e6..4e6f64).prop_map(Some)],
        prop_oneof![Just(None), (10.0..1000f64).prop_map(Some)],
    )
        .prop_map(|(r, w, lb, lo)| Params::new(r, w, lb, lo).unwrap())
}

/// The naive model: per class, the requests queued in order, when the first came, and the
/// bytes and operations dispatched so far.
struct Model {
    ps: Vec<Params>,
    queued: Vec<VecDeque<(u64, u64)>>,
    first: Vec<Option<f64>>,
    sent: Vec<(u64, u64)>,
}

impl Model {
    /// One dispatch at `now`, checked; `Some(until)` when the scheduler says to wait.
    fn check(
        &mut self,
        s: &mut Scheduler<usize, u64>,
        now: f64,
    ) -> Result<Option<f64>, TestCaseError> {
        match s.dispatch(now) {
            Next::Dispatch { class, item, .. } => {
                let (want, cost) = self.queued[class].pop_front().expect("model holds it");
                prop_assert_eq!(item, want);
                let since = now - self.first[class].unwrap();
                let (bytes, ops) = self.sent[class];
                if let Some(l) = self.ps[class].limit_bytes {
                    prop_assert!(
                        bytes as f64 <= l * since + 1e-6 * l,
                        "bytes {} by {}",
                        bytes,
                        since
                    );
                }
                if let Some(l) = self.ps[class].limit_iops {
                    prop_assert!(
                        ops as f64 <= l * since + 1e-6 * l,
                        "ops {} by {}",
                        ops,
                        since
                    );
                }
                self.sent[class] = (bytes + cost, ops + 1);
                Ok(None)
            }
            Next::Idle => {
                prop_assert!(self.queued.iter().all(VecDeque::is_empty));
                Ok(None)
            }
            Next::Wait { until } => {
                prop_assert!(self.queued.iter().any(|q| !q.is_empty()));
                prop_assert!(until > now);
                Ok(Some(until))
            }
        }
    }
}

proptest! {
    /// Against a naive model: every request is dispatched exactly once and in its class's
    /// order; the scheduler is idle exactly when the model holds nothing; a wait ends in a
    /// dispatch at the time it names; no class ever gets more bytes or operations before time
    /// t than its limits allow since its first request.
    #[test]
    fn every_request_once_in_order_within_limits(
        ps in proptest::collection::vec(class_params(), 4),
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let mut s: Scheduler<usize, u64> = Scheduler::new();
        for (k, p) in ps.iter().enumerate() {
            s.set_class(k, *p);
        }
        let mut m = Model { ps: ps.clone(), queued: vec![VecDeque::new(); 4], first: vec![None; 4], sent: vec![(0, 0); 4] };
        let mut now = 0.0;
        let mut id = 0;
        for op in ops {
            match op {
                Op::Enqueue { class, cost } => {
                    s.enqueue(&class, cost, id, now).unwrap();
                    m.queued[class].push_back((id, cost));
                    m.first[class].get_or_insert(now);
                    id += 1;
                }
                Op::Dispatch => {
                    if let Some(until) = m.check(&mut s, now)? {
                        // Nothing may go now; at `until` something does.
                        now = until;
                        let again = m.check(&mut s, now)?;
                        prop_assert!(again.is_none(), "still waiting at {}", now);
                    }
                }
                Op::Advance { ms } => now += f64::from(ms) / 1000.0,
            }
        }
        // Drain: everything comes out.
        while m.queued.iter().any(|q| !q.is_empty()) {
            if let Some(until) = m.check(&mut s, now)? {
                now = until;
            }
        }
    }

    /// With every request queued at once and neither reservations nor limits, the order is the
    /// naive weighted fair queueing one: by each request's cumulative cost over its class's
    /// weight, ties to the smaller class, then arrival.
    #[test]
    fn a_backlog_goes_out_in_weighted_fair_order(
        weights in proptest::collection::vec(1.0..32f64, 1..5),
        reqs in proptest::collection::vec((0usize..5, 1u64..1_000_000), 1..200),
    ) {
        let mut s: Scheduler<usize, usize> = Scheduler::new();
        for (k, w) in weights.iter().enumerate() {
            s.set_class(k, Params::new(0.0, *w, None, None).unwrap());
        }
        let mut finish = vec![0.0f64; weights.len()];
        let mut naive = Vec::new();
        for (i, (k, cost)) in reqs.iter().enumerate() {
            let k = k % weights.len();
            s.enqueue(&k, *cost, i, 0.0).unwrap();
            finish[k] += *cost as f64 / weights[k];
            naive.push((finish[k], k, i));
        }
        naive.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mut got = Vec::new();
        while let Next::Dispatch { item, phase, .. } = s.dispatch(0.0) {
            prop_assert_eq!(phase, Phase::Weight);
            got.push(item);
        }
        let want: Vec<usize> = naive.iter().map(|n| n.2).collect();
        prop_assert_eq!(got, want);
    }

    /// Reservations that add up to at most half the server are met in every round, whatever
    /// the weights of the classes queued beside them.
    #[test]
    fn reservations_are_met_every_round(
        shares in proptest::collection::vec(0.0..0.125f64, 4),
        weights in proptest::collection::vec(1.0..64f64, 4),
    ) {
        // The server: one 4 KiB request per millisecond.
        let capacity = 4_096_000.0;
        let mut s: Scheduler<usize, u32> = Scheduler::new();
        for k in 0..4 {
            s.set_class(k, Params::new(shares[k] * capacity, weights[k], None, None).unwrap());
            for i in 0..2000 {
                s.enqueue(&k, KIB4, i, 0.0).unwrap();
            }
        }
        let mut got = [0u64; 4];
        for tick in 1..=1000u32 {
            let now = f64::from(tick) / 1000.0;
            if let Next::Dispatch { class, .. } = s.dispatch(now) {
                got[class] += KIB4;
            }
            if tick % 100 == 0 {
                for k in 0..4 {
                    let owed = shares[k] * capacity * now;
                    prop_assert!(got[k] as f64 >= owed - KIB4 as f64,
                        "class {} got {} of {} owed by {}", k, got[k], owed, now);
                }
            }
        }
    }
}
