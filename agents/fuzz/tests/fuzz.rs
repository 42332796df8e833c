//! Every fuzz target, as the suite runs it: its committed corpus replayed, then a fixed number
//! of derandomized cases of edited seeds (`lachesis_fuzz::run::target`).

use lachesis_fuzz::alloc::{is_tracking, Tracking};
use lachesis_fuzz::run::target;
use lachesis_fuzz::targets::TARGETS;

#[global_allocator]
static ALLOC: Tracking = Tracking;

macro_rules! targets {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                assert!(is_tracking(), "the allocation bound needs the tracking allocator");
                target(stringify!($name));
            }
        )*

        #[test]
        fn every_target_is_run_here() {
            let here = [$(stringify!($name)),*];
            for t in TARGETS {
                assert!(here.contains(&t.name), "fuzz target {} has no test", t.name);
            }
        }
    };
}

targets!(
    trace_arc,
    trace_cloudphysics,
    trace_msr,
    trace_oracle,
    trace_lines,
    desired_state,
    detour_verdict,
    registration,
    heartbeat,
    ack,
    detour_request,
    telemetry,
    rules,
    stages,
    rules_file,
    frame,
    kv_protocol,
);
