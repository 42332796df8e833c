//! The FDP paper's analytic DLWA model for uniformly random overwrites (its Theorem 1):
//! δ = e^(−a(1−δ)), DLWA = 1 / (1 − δ), with a = physical space / logical space of the data.
//! The simulator is checked against it.

/// Measured DLWA: media bytes written per host byte written; `None` when the host wrote
/// nothing.
pub fn measured_dlwa(media_bytes: u128, host_bytes: u128) -> Option<f64> {
    (host_bytes > 0).then(|| media_bytes as f64 / host_bytes as f64)
}

/// DLWA over a window between two readings of the (host, media) bytes-written counters:
/// Δmedia / Δhost; `None` if the host wrote nothing in between or a counter went back (not
/// the same device).
pub fn dlwa_between(earlier: (u128, u128), now: (u128, u128)) -> Option<f64> {
    measured_dlwa(now.1.checked_sub(earlier.1)?, now.0.checked_sub(earlier.0)?)
}

/// δ, the average fraction of a garbage collection victim that is still valid: the root of
/// δ = e^(−a(1−δ)) in (0, 1), i.e. −W(−a·e^(−a)) / a on the principal branch of Lambert W.
/// `None` unless `a > 1` (without spare space there is no such root).
pub fn live_fraction(a: f64) -> Option<f64> {
    if !(a.is_finite() && a > 1.0) {
        return None;
    }
    // f(δ) = δ − e^(−a(1−δ)) is concave with f(0) < 0, so Newton from 0 climbs monotonically
    // to the smaller root without ever jumping to the trivial root δ = 1.
    let mut d = 0.0f64;
    for _ in 0..200 {
        let e = (-a * (1.0 - d)).exp();
        let f = d - e;
        let df = 1.0 - a * e;
        if df <= 0.0 {
            break;
        }
        let next = d - f / df;
        if (next - d).abs() < 1e-15 {
            return Some(next);
        }
        d = next;
    }
    Some(d)
}

/// Model DLWA for uniformly random overwrites with `a` = physical / logical.
pub fn dlwa(a: f64) -> Option<f64> {
    live_fraction(a).map(|d| 1.0 / (1.0 - d))
}

/// Model DLWA at device overprovisioning `op` = (physical − logical) / logical.
pub fn dlwa_at_overprovisioning(op: f64) -> Option<f64> {
    dlwa(1.0 + op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_the_fixed_point() {
        for a in [1.01, 1.07, 1.1, 1.2, 1.28, 2.0, 5.0] {
            let d = live_fraction(a).unwrap();
            assert!(d > 0.0 && d < 1.0, "a={a} δ={d}");
            assert!((d - (-a * (1.0 - d)).exp()).abs() < 1e-12, "a={a} δ={d}");
        }
    }

    #[test]
    fn known_values_and_limits() {
        // a = 2: δ = −W(−2e^−2)/2 = 0.2031878...
        assert!((live_fraction(2.0).unwrap() - 0.203_187_869_979_979_6).abs() < 1e-12);
        assert!(dlwa(1.0).is_none());
        assert!(dlwa(0.5).is_none());
        assert!(dlwa(f64::NAN).is_none());
        // More spare space, less amplification.
        assert!(dlwa(1.07).unwrap() > dlwa(1.28).unwrap());
        assert!(dlwa(50.0).unwrap() < 1.0001);
    }
}
