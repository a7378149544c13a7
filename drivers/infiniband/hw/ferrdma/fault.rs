// SPDX-License-Identifier: GPL-2.0

//! Test-only fault injection into object creation (module parameter `fault_every`).
//!
//! Every fallible step of creating a verbs object (an allocation, an id, a device command, a
//! user-memory claim) first asks [`step`]. With `fault_every=N` one step in N (picked by a
//! fixed hash of its number, so a rerun fails the same steps) fails with `ENOMEM` before doing
//! anything, so tests can walk the error paths of every
//! create (user and kernel) and check that each undoes what the steps before it did: no id,
//! ring, device object or event handle may outlive a failed create.

use kernel::{
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
};

/// Steps taken since the module was loaded.
static STEPS: Atomic<u32> = Atomic::new(0);
/// Steps made to fail.
static INJECTED: Atomic<u32> = Atomic::new(0);

/// Whether step number `n` (from 0) fails, one in `every` (`every` 0: none). Picked by a hash
/// of `n`, not `n % every`: creates take a fixed number of steps each, and a plain period
/// would fail the same step of every create and never reach the others.
const fn picked(n: u32, every: u32) -> bool {
    every != 0 && (n.wrapping_mul(0x9e37_79b9) >> 8) % every == 0
}

/// A fallible step of object creation: `ENOMEM` when fault injection picks it.
pub(crate) fn step() -> Result {
    let every = crate::module_parameters::fault_every.value();
    if every == 0 {
        return Ok(());
    }
    if picked(STEPS.fetch_add(1, Relaxed), every) {
        INJECTED.add(1, Relaxed);
        return Err(ENOMEM);
    }
    Ok(())
}

/// How many steps were made to fail.
pub(crate) fn injected() -> u32 {
    INJECTED.load(Relaxed)
}

#[kunit_tests(ferrdma_fault)]
mod tests {
    use super::*;

    #[test]
    fn about_one_step_in_n_fails_at_every_position_of_a_create() {
        let hits: u32 = (0..10_000).map(|n| u32::from(picked(n, 4))).sum();
        assert!((2_000..3_000).contains(&hits));
        // Creates of 3 steps each: each of the three positions gets failures.
        for pos in 0..3 {
            assert!((0..300).any(|c| picked(3 * c + pos, 3)));
        }
        assert!((0..100).all(|n| picked(n, 1)));
        assert!(!(0..100).any(|n| picked(n, 0)));
    }
}
