//! Two endpoints driven through a fuzzed schedule: writes, time, drops, duplicates, byte mutations, jitter, loss,
//! paths down and up, address changes, policy changes and closes, interpreted by the same code as tng-proto's
//! `random_operations` proptest. Never a panic, never a byte delivered that was not sent at that offset, and after
//! the network heals a live connection delivers everything (unless an end idles out within an idle timeout of it).

#![no_main]

#[path = "../../crates/tng-proto/tests/common/mod.rs"]
mod common;

use common::operations::{self, Op, MAX_WRITE, PATHS};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

/// Operations per input: enough for losses, moves and a heal, few enough for thousands of runs a minute.
const MAX_OPS: usize = 24;

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    let path = usize::from(u.int_in_range(0..=(PATHS as u8 - 1))?);
    Ok(match u.int_in_range(0..=12u8)? {
        0 => Op::Write { from_client: u.arbitrary()?, len: u.int_in_range(0..=MAX_WRITE)? },
        1 => Op::Advance { millis: u.int_in_range(1..=2_000)? },
        2 => Op::DropNext { count: u.int_in_range(1..=20)? },
        3 => Op::DuplicateNext { count: u.int_in_range(1..=10)? },
        4 => Op::MutateNext { count: u.int_in_range(1..=5)? },
        5 => Op::Jitter { path, millis: u.int_in_range(0..=30)? },
        6 => Op::Loss { path, percent: u.int_in_range(0..=30)? },
        7 => Op::PathDown { path },
        8 => Op::PathUp { path },
        9 => Op::Move { path, port: u.int_in_range(1024..=60_000)? },
        10 => Op::Drive { steps: u.int_in_range(1..=200)? },
        11 => Op::Policy { scheduler: u.arbitrary()?, alternate: u.arbitrary()?, cc: u.arbitrary()? },
        _ => Op::Close { from_client: u.arbitrary()? },
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let seed = u.arbitrary::<u64>().unwrap_or(0);
    let alternate = u.arbitrary::<bool>().unwrap_or(false);
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS {
        match op(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    if let Err(problem) = operations::run(ops, seed, alternate) {
        panic!("{problem}");
    }
});
