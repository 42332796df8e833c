//! How the suite runs a property: the corpus replayed file by file, then a bounded number of
//! proptest cases from a fixed seed, so every run of the suite tries the same inputs.
//! `LACHESIS_FUZZ_CASES` (cases per target) and `LACHESIS_FUZZ_SEED` widen a run by hand.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};

use crate::corpus::Seed;

const DEFAULT_SEED: u64 = 0x1ac4e515;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
    )
}

/// The runner's configuration: `cases` unless `LACHESIS_FUZZ_CASES` says otherwise, a fixed
/// seed, no regression files written into the tree.
pub fn config(cases: u32) -> Config {
    Config {
        cases: env_u64("LACHESIS_FUZZ_CASES").map_or(cases, |c| c as u32),
        rng_seed: RngSeed::Fixed(env_u64("LACHESIS_FUZZ_SEED").unwrap_or(DEFAULT_SEED)),
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..Config::default()
    }
}

/// Bytes shown as a byte string (`b"1 2 3\n"`) in failure messages.
#[derive(Clone, PartialEq, Eq)]
pub struct Input(pub Vec<u8>);

impl fmt::Debug for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes b\"{}\"", self.0.len(), self.0.escape_ascii())
    }
}

/// Runs `check` on every seed; a failure names the seed's file.
pub fn replay(target: &str, seeds: &[Seed], check: impl Fn(&[u8])) {
    for s in seeds {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| check(&s.bytes))) {
            panic!(
                "fuzz target {target}: corpus file {} fails: {}",
                s.path.display(),
                panic_text(&p)
            );
        }
    }
}

/// Runs `check` on `cases` values of `strategy`; a failure shows the smallest failing value
/// proptest found and how to run the target again.
pub fn fuzz<S: Strategy>(target: &str, cases: u32, strategy: S, check: impl Fn(&S::Value))
where
    S::Value: fmt::Debug,
{
    let mut runner = TestRunner::new(config(cases));
    let result = runner.run(&strategy, |v| {
        catch_unwind(AssertUnwindSafe(|| check(&v)))
            .map_err(|p| TestCaseError::fail(panic_text(&p)))
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, value)) => panic!(
            "fuzz target {target} fails: {why}\nsmallest failing input: {value:?}\n\
             (add it to agents/fuzz/corpus/{target}/ once fixed; LACHESIS_FUZZ_SEED and \
             LACHESIS_FUZZ_CASES repeat or widen the run)"
        ),
        Err(TestError::Abort(why)) => panic!("fuzz target {target}: proptest aborted: {why}"),
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic without a message".into())
}

/// What the suite does for one target: replay its corpus, then fuzz from it.
pub fn target(name: &str) {
    let t = crate::targets::get(name);
    let seeds = crate::corpus::load(&[crate::corpus::dir(name)]);
    replay(name, &seeds, t.check);
    let check = |i: &Input| (t.check)(&i.0);
    match t.edits {
        crate::targets::Edits::Bytes => {
            fuzz(name, t.cases, crate::mutate::bytes_from(&seeds), check)
        }
        crate::targets::Edits::Json => fuzz(
            name,
            t.cases,
            proptest::prop_oneof![
                3 => crate::mutate::json_from(&seeds),
                1 => crate::mutate::bytes_from(&seeds),
            ],
            check,
        ),
    }
}
