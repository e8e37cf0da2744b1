//! The ACK frame's content: acknowledged packet-number ranges and ECN counts, and their RFC 9000 field view.

use std::ops::RangeInclusive;

/// ECN counts of an ACK frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EcnCounts {
    /// Packets received with ECT(0).
    pub ect0: u64,
    /// Packets received with ECT(1).
    pub ect1: u64,
    /// Packets received with CE.
    pub ce: u64,
}

/// An ACK frame (RFC 9000 section 19.3 encoding, ECN counts always present).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AckFrame {
    /// Largest packet number acknowledged; the end of `ranges[0]`.
    pub largest: u64,
    /// Time from receiving `largest` to sending this frame, in microseconds.
    pub ack_delay_micros: u64,
    /// Acknowledged packet numbers: descending, the first containing `largest`, with a gap of at least one
    /// packet number between neighbours. Never empty.
    pub ranges: Vec<RangeInclusive<u64>>,
    /// ECN counts.
    pub ecn: EcnCounts,
}

impl AckFrame {
    /// Builds an ACK from packet-number ranges in any order, merging overlapping and adjacent ones and dropping
    /// empty ones. `None` if nothing is acknowledged.
    pub fn from_ranges(
        ranges: impl IntoIterator<Item = RangeInclusive<u64>>,
        ack_delay_micros: u64,
        ecn: EcnCounts,
    ) -> Option<Self> {
        let mut sorted: Vec<_> = ranges.into_iter().filter(|range| !range.is_empty()).collect();
        sorted.sort_unstable_by_key(|range| std::cmp::Reverse(*range.end()));
        let mut merged: Vec<RangeInclusive<u64>> = Vec::with_capacity(sorted.len());
        for range in sorted {
            match merged.last_mut() {
                // Sorted by end, so `range` ends at or below `last`; touching or overlapping means one range.
                Some(last) if range.end().saturating_add(1) >= *last.start() => {
                    *last = (*last.start()).min(*range.start())..=*last.end();
                }
                _ => merged.push(range),
            }
        }
        let largest = *merged.first()?.end();
        Some(Self { largest, ack_delay_micros, ranges: merged, ecn })
    }

    /// Every acknowledged packet number, descending.
    pub fn packet_numbers(&self) -> impl Iterator<Item = u64> + '_ {
        self.ranges.iter().flat_map(|range| range.clone().rev())
    }

    /// Whether `packet_number` is acknowledged.
    pub fn contains(&self, packet_number: u64) -> bool {
        self.ranges.iter().any(|range| range.contains(&packet_number))
    }

    /// The RFC 9000 fields: `first_range`, then (`gap`, `range_len`) pairs. Saturates where the documented
    /// invariants of `ranges` do not hold rather than panicking.
    pub(super) fn wire_ranges(&self) -> (u64, impl Iterator<Item = (u64, u64)> + '_) {
        debug_assert!(self.is_well_formed(), "malformed AckFrame: {self:?}");
        let first_smallest = self.ranges.first().map_or(self.largest, |range| *range.start());
        let first_range = self.largest.saturating_sub(first_smallest);
        let pairs = self.ranges.windows(2).map(|pair| {
            let (above, below) = (&pair[0], &pair[1]);
            let gap = above.start().saturating_sub(*below.end()).saturating_sub(2);
            (gap, below.end().saturating_sub(*below.start()))
        });
        (first_range, pairs)
    }

    fn is_well_formed(&self) -> bool {
        self.ranges.first().is_some_and(|first| *first.end() == self.largest)
            && self.ranges.iter().all(|range| !range.is_empty())
            && self.ranges.windows(2).all(|pair| pair[1].end().saturating_add(1) < *pair[0].start())
    }

    pub(super) fn range_count(&self) -> u64 {
        self.ranges.len().saturating_sub(1) as u64
    }
}
