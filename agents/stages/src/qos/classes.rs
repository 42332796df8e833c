//! A tenant's class in the scheduler from what its qos stage declares: the priority's
//! weight, the reservation and the limits (Moirai §5.3.1-5.3.2).

use lachesis_switch::{Priority, RateLimitConfig};

use super::mclock::{Params, ParamsError};

/// Weights of the priorities: a high tenant's queued IO goes 4 times as often as a normal
/// one's, 16 times as often as a low one's (and a low one's is never starved).
pub fn weight(p: Option<Priority>) -> f64 {
    match p.unwrap_or(Priority::Normal) {
        Priority::High => 32.0,
        Priority::Normal => 8.0,
        Priority::Low => 2.0,
    }
}

/// The declared-IO dispatcher's weight (scrubs and other maintenance reads): below every
/// tenant's, so it takes what tenants leave and still moves.
pub const DECLARED_WEIGHT: f64 = 1.0;

/// The scheduler parameters a stage's config asks for.
pub fn params(config: &RateLimitConfig) -> Result<Params, ParamsError> {
    Params::new(
        config.min_bytes_per_s.unwrap_or(0) as f64,
        weight(config.priority),
        config.bytes_per_s.map(|b| b as f64),
        config.iops.map(|i| i as f64),
    )
}
