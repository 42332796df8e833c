//! The FIFO+ model of §4.4: write amplification of a set-associative cache kept as a
//! log-structured store of erase units (EUs), under random set writes, as a function of the
//! EU size.
//!
//! Variables (Table 2): `b` pages per EU, `t` EUs in all, `u` EUs' worth of live data,
//! `X` the invalid pages of the EU garbage collection picks. FIFO+ erases the oldest EU that
//! has an invalid page, so every collection frees `E[X | X > 0]` pages for new writes:
//!
//! `DLWA = b / E[X | X > 0]`                                                        (1)
//!
//! Each page of the victim is invalid independently with probability `p`, so
//! `X ~ Binomial(b, p)`, and an EU is collected every `k = t·E[X]` writes, each of which
//! invalidates a given page with probability `1/(ub)`:
//!
//! `E[X] = b·p = b (1 − (1 − 1/(ub))^{t·E[X]})`                                    (2)
//!
//! whose non-zero root is `E[X] = b − W₀(b t a^{tb} ln a) / (t ln a)`, `a = 1 − 1/(ub)`
//! (the principal branch; the other branch gives the trivial root 0). The paper then writes
//! `E[X | X > 0] = E[X] / P(X > 0)` with `P(X > 0) = 1 − (1 − p)^k`; for `X ~ Binomial(b, p)`
//! it is `1 − (1 − p)^b`, which is what this module uses (with `k` in the exponent the
//! probability is 1 to many digits and (1) would reduce to `b / E[X]`).
//!
//! `tests/fairywren_analytic.rs` drives the engine's own FwSets store with random set writes
//! and checks the measured amplification against [`Fifo::dlwa`] for several EU sizes.

/// Model parameters: `b` pages per EU, `t` EUs, `u` EUs of live data (`u < t`).
#[derive(Clone, Copy, Debug)]
pub struct Fifo {
    pub b: f64,
    pub t: f64,
    pub u: f64,
}

impl Fifo {
    fn a(&self) -> f64 {
        1.0 - 1.0 / (self.u * self.b)
    }

    /// `E[X]` from the closed form with Lambert's W.
    pub fn expected_invalid(&self) -> f64 {
        let (b, t, la) = (self.b, self.t, self.a().ln());
        let z = b * t * (t * b * la).exp() * la;
        b - lambert_w0(z) / (t * la)
    }

    /// `E[X]` by iterating (2) from `b` down to its non-zero fixed point (a check on the
    /// closed form).
    pub fn expected_invalid_iterated(&self) -> f64 {
        let mut e = self.b;
        for _ in 0..10_000 {
            let next = self.b * (1.0 - self.a().powf(self.t * e));
            if (next - e).abs() < 1e-12 {
                break;
            }
            e = next;
        }
        e
    }

    /// `p`, the probability that a page of the victim is invalid.
    pub fn p_invalid(&self) -> f64 {
        self.expected_invalid() / self.b
    }

    /// `E[X | X > 0]`.
    pub fn expected_invalid_given_some(&self) -> f64 {
        let p = self.p_invalid();
        self.expected_invalid() / (1.0 - (1.0 - p).powf(self.b))
    }

    /// (1): media pages written per page the cache writes.
    pub fn dlwa(&self) -> f64 {
        self.b / self.expected_invalid_given_some()
    }
}

/// The principal branch of Lambert's W on `[−1/e, ∞)`, by Halley's iteration.
pub fn lambert_w0(z: f64) -> f64 {
    let e_inv = -(-1.0f64).exp();
    if z <= e_inv {
        return -1.0;
    }
    // Start near the branch point for z close to −1/e, else from log1p.
    let mut w = if z < -0.3 {
        -1.0 + (2.0 * (1.0 + std::f64::consts::E * z)).sqrt()
    } else {
        z.ln_1p()
    };
    for _ in 0..100 {
        let ew = w.exp();
        let f = w * ew - z;
        let wp1 = w + 1.0;
        let step = f / (ew * wp1 - (w + 2.0) * f / (2.0 * wp1));
        w -= step;
        if step.abs() < 1e-15 * (1.0 + w.abs()) {
            break;
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambert_w_inverts_w_e_w() {
        for z in [-0.36, -0.3, -0.1, -1e-6, 0.0, 0.5, 3.0] {
            let w = lambert_w0(z);
            assert!((w * w.exp() - z).abs() < 1e-12, "z {z}: w {w}");
            assert!(w >= -1.0);
        }
    }

    #[test]
    fn closed_form_is_the_non_zero_fixed_point() {
        for b in [4.0, 32.0, 256.0] {
            let m = Fifo {
                b,
                t: 1070.0 / b * 16.0,
                u: 1000.0 / b * 16.0,
            };
            let (w, it) = (m.expected_invalid(), m.expected_invalid_iterated());
            assert!(w > 0.0 && (w - it).abs() < 1e-6 * b, "b {b}: {w} vs {it}");
        }
    }

    #[test]
    fn small_erase_units_amplify_less_and_large_ones_level_off() {
        // 7% over-provisioning, as Fig. 6.
        let dlwa = |b: f64| {
            Fifo {
                b,
                t: 1.07e6 / b,
                u: 1e6 / b,
            }
            .dlwa()
        };
        let (d4, d64, d256, d4096) = (dlwa(4.0), dlwa(64.0), dlwa(256.0), dlwa(4096.0));
        assert!(
            d4 < d64 && d64 < d256 && d256 <= d4096 * 1.0001,
            "{d4} {d64} {d256} {d4096}"
        );
        assert!(
            (d4096 - d256) / d256 < 0.02,
            "levels off past 1 MiB: {d256} vs {d4096}"
        );
        // With large EUs FIFO's amplification approaches the classic 1/(1 − p) with
        // p ≈ −(u/t) W(−(t/u) e^{−t/u}) (the W-form of prior work for random writes).
        let r: f64 = 1.07;
        let p = 1.0 - (-lambert_w0(-r * (-r).exp()) / r);
        let classic = 1.0 / p;
        assert!(
            (d4096 - classic).abs() / classic < 0.05,
            "{d4096} vs {classic}"
        );
    }
}
