//! tarn-testkit: what tarn's tests share, below every other crate (it
//! depends on none of them, and only tests depend on it).
//!
//! ## Seeds
//! Every simulation and crash test draws its operations, crash points and
//! faults from one `u64` seed, and every one of them is driven by the same
//! three environment variables:
//!
//! - `TARN_SEED=n` runs seed `n` alone (a failure prints the line that
//!   replays it: `replay: TARN_SEED=n`);
//! - `TARN_SEEDS=n` runs `n` seeds instead of the test's default count;
//! - `TARN_SEED_START=n` starts at seed `n` instead of the test's first.
//!
//! A failing seed replays exactly where the test is single-threaded;
//! tests that race threads against a crash say so in their module
//! comment (the same seed then needs a few runs to fail again).

use std::fmt::Display;
use std::panic::{catch_unwind, resume_unwind, UnwindSafe};

/// The variable that names the one seed to run.
pub const SEED_VAR: &str = "TARN_SEED";
/// The variable that says how many seeds to run.
pub const SEEDS_VAR: &str = "TARN_SEEDS";
/// The variable that names the first seed of a run of them.
pub const SEED_START_VAR: &str = "TARN_SEED_START";

/// A number from the environment; a value that is not one is a mistake
/// the person running the test must hear about.
fn var(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    match text.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => panic!("{name}={text:?} is not a number"),
    }
}

/// The seeds a test runs: `TARN_SEED` alone when set, else `TARN_SEEDS`
/// of them (default `count`) from `TARN_SEED_START` (default `first`).
pub fn seeds(first: u64, count: u64) -> Vec<u64> {
    if let Some(seed) = var(SEED_VAR) {
        return vec![seed];
    }
    let first = var(SEED_START_VAR).unwrap_or(first);
    let count = var(SEEDS_VAR).unwrap_or(count);
    (first..first.saturating_add(count)).collect()
}

/// Whether one seed was asked for (tests that run a longer workload for a
/// replayed seed than in their sweep use it).
pub fn replaying() -> bool {
    var(SEED_VAR).is_some()
}

/// The line a failure prints so that it can be replayed.
pub fn replay_line(test: impl Display, seed: u64) -> String {
    format!("{test} failed with seed {seed} (replay: {SEED_VAR}={seed})")
}

/// Runs `run` for every seed of [`seeds`]; the first that panics prints
/// [`replay_line`] and the panic goes on.
pub fn for_each_seed<F>(test: &str, first: u64, count: u64, run: F)
where
    F: Fn(u64) + UnwindSafe + Copy,
{
    for seed in seeds(first, count) {
        if let Err(panic) = catch_unwind(move || run(seed)) {
            eprintln!("{}", replay_line(test, seed));
            resume_unwind(panic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replay_line_names_the_variable() {
        assert_eq!(
            replay_line("crash", 7),
            "crash failed with seed 7 (replay: TARN_SEED=7)"
        );
    }

    #[test]
    fn default_range_without_variables() {
        // The test process may have TARN_SEED set by whoever runs it.
        if std::env::var_os(SEED_VAR).is_none()
            && std::env::var_os(SEEDS_VAR).is_none()
            && std::env::var_os(SEED_START_VAR).is_none()
        {
            assert_eq!(seeds(3, 4), vec![3, 4, 5, 6]);
        }
    }
}
