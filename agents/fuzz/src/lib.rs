//! Fuzzing of the agents' decoders: every trace reader, the bus messages, rules and stages,
//! the lachesis-fs rules file and the forwarding frame.
//!
//! One property per target lives in [`props`] (`check(&[u8])`: no panic, errors are errors,
//! round trips where an encoder exists, allocation bounded by the input). Two drivers run it:
//!
//! - the suite (`tests/fuzz_*.rs`, stable, part of `cargo test --workspace`): the committed
//!   corpus replayed, then a bounded, derandomized number of proptest cases, each a corpus
//!   seed put through random edits ([`mutate`]), plus generated well-formed inputs checked
//!   against a model of what they must decode to;
//! - cargo-fuzz (`fuzz/`, nightly, libFuzzer): the same `check` functions for as long as one
//!   wants, starting from the same corpus.
//!
//! See `README.md` in this folder for the commands.

pub mod alloc;
pub mod corpus;
pub mod mutate;
pub mod props;
pub mod run;
pub mod targets;
