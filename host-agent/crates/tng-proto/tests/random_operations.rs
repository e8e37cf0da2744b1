//! Random operation sequences (in the spirit of noq's multipath proptests) through the shared interpreter
//! `common::operations`: the protocol never panics, never delivers a byte that was not sent at that offset, and
//! delivers everything on a live connection once the network heals.

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
