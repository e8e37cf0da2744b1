//! Random operation sequences (in the spirit of noq's multipath proptests) through the shared interpreter
//! `common::operations`: the protocol never panics, never delivers a byte that was not sent at that offset, and
//! delivers everything on a live connection once the network heals (an end may idle out if the outage outlasted its
//! idle timeout).

mod common;

use common::operations::{self, Op};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), 0usize..60_000).prop_map(|(from_client, len)| Op::Write { from_client, len }),
        2 => (1u64..2_000).prop_map(|millis| Op::Advance { millis }),
        2 => (1u32..20).prop_map(|count| Op::DropNext { count }),
        2 => (1u32..10).prop_map(|count| Op::DuplicateNext { count }),
        1 => (1u32..5).prop_map(|count| Op::MutateNext { count }),
        2 => (0usize..2, 0u64..30).prop_map(|(path, millis)| Op::Jitter { path, millis }),
        2 => (0usize..2, 0u8..30).prop_map(|(path, percent)| Op::Loss { path, percent }),
        2 => (0usize..2).prop_map(|path| Op::PathDown { path }),
        2 => (0usize..2).prop_map(|path| Op::PathUp { path }),
        2 => (0usize..2, 1024u16..60_000).prop_map(|(path, port)| Op::Move { path, port }),
        2 => (1u32..200).prop_map(|steps| Op::Drive { steps }),
        2 => (0usize..3, any::<bool>(), 0usize..5).prop_map(|(scheduler, alternate, cc)| Op::Policy { scheduler, alternate, cc }),
        1 => any::<bool>().prop_map(|from_client| Op::Close { from_client }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_never_panic_or_corrupt(
        ops in proptest::collection::vec(op(), 1..25),
        seed in any::<u64>(),
        alternate in any::<bool>(),
    ) {
        operations::run(ops, seed, alternate).map_err(TestCaseError::fail)?;
    }
}

/// Found by the `operations` fuzz target: both paths down for about an idle timeout with streams queued on the
/// server (some of them empty), then the network heals. The server, which heard nothing through the outage, times
/// out before a backed-off probe gets through; the interpreter excuses that only within one idle timeout of the heal.
/// Whether the timeout falls just before the heal or just after depends on when the channels' probe timeouts fell
/// (since they count from the last progress rather than the last send, before it).
#[test]
fn an_outage_as_long_as_the_idle_timeout_ends_the_connection_by_that_timeout() {
    let mut ops = vec![Op::Drive { steps: 167 }; 5];
    ops.push(Op::Write { from_client: false, len: 8192 });
    ops.push(Op::Write { from_client: true, len: 5439 });
    ops.push(Op::PathDown { path: 1 });
    ops.push(Op::Advance { millis: 209 });
    ops.push(Op::Write { from_client: false, len: 21080 });
    ops.push(Op::PathDown { path: 0 });
    ops.push(Op::Drive { steps: 133 });
    ops.extend(std::iter::repeat_n(Op::Write { from_client: false, len: 0 }, 12));
    let outcome = operations::run(ops, 12008468688895208011, false);
    assert!(
        matches!(outcome, Ok(operations::Healed::IdledOut | operations::Healed::AlreadyEnded)),
        "the idle timeout ends it around the heal: {outcome:?}"
    );
}

/// The same schedule with the outage cut short: the connection survives it and delivers every stream.
#[test]
fn a_short_outage_with_streams_queued_delivers_them_once_the_network_heals() {
    let mut ops = vec![Op::Drive { steps: 167 }; 5];
    ops.push(Op::Write { from_client: false, len: 8192 });
    ops.push(Op::PathDown { path: 1 });
    ops.push(Op::Write { from_client: false, len: 21080 });
    ops.push(Op::PathDown { path: 0 });
    ops.push(Op::Drive { steps: 10 });
    ops.extend(std::iter::repeat_n(Op::Write { from_client: false, len: 0 }, 12));
    assert_eq!(operations::run(ops, 12008468688895208011, false), Ok(operations::Healed::Delivered));
}
