//! A set of `u64` offsets kept as disjoint, non-adjacent half-open ranges.
//!
//! Used for everything the semantic layer tracks by byte offset: ranges the peer acknowledged, ranges waiting to be
//! retransmitted and ranges received out of order.

use std::collections::BTreeMap;
use std::ops::Range;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct RangeSet {
    /// start -> end; invariant: ranges are non-empty, disjoint and never touch (touching ranges are merged).
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// Adds `range`; returns how many offsets were not in the set before.
    pub fn insert(&mut self, range: Range<u64>) -> u64 {
        if range.is_empty() {
            return 0;
        }
        let (mut start, mut end) = (range.start, range.end);
        let mut already_present = 0;
        if let Some((&prev_start, &prev_end)) = self.ranges.range(..=start).next_back() {
            if prev_end >= start {
                already_present += prev_end.min(range.end) - range.start;
                start = prev_start;
                end = end.max(prev_end);
                self.ranges.remove(&prev_start);
            }
        }
        while let Some((&next_start, &next_end)) = self.ranges.range(start..=end).next() {
            already_present += next_end.min(range.end).saturating_sub(next_start);
            end = end.max(next_end);
            self.ranges.remove(&next_start);
        }
        self.ranges.insert(start, end);
        (range.end - range.start) - already_present
    }

    /// Removes `range` from the set, splitting ranges that straddle its edges.
    pub fn remove(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        if let Some((&prev_start, &prev_end)) = self.ranges.range(..range.start).next_back() {
            if prev_end > range.start {
                self.ranges.insert(prev_start, range.start);
                if prev_end > range.end {
                    self.ranges.insert(range.end, prev_end);
                }
            }
        }
        while let Some((&start, &end)) = self.ranges.range(range.start..range.end).next() {
            self.ranges.remove(&start);
            if end > range.end {
                self.ranges.insert(range.end, end);
            }
        }
    }

    /// Removes every offset below `offset`.
    pub fn remove_below(&mut self, offset: u64) {
        self.remove(0..offset);
    }

    /// Whether every offset of `range` is in the set.
    pub fn covers(&self, range: Range<u64>) -> bool {
        range.is_empty() || self.ranges.range(..=range.start).next_back().is_some_and(|(_, &end)| end >= range.end)
    }

    /// Calls `f` with each maximal part of `range` that is not in the set, in ascending order.
    pub fn for_each_gap(&self, range: Range<u64>, mut f: impl FnMut(Range<u64>)) {
        if range.is_empty() {
            return;
        }
        let mut cursor = range.start;
        let first_key = self.ranges.range(..=range.start).next_back().map_or(range.start, |(&start, _)| start);
        for (&start, &end) in self.ranges.range(first_key..range.end) {
            if start > cursor {
                f(cursor..start.min(range.end));
            }
            cursor = cursor.max(end);
            if cursor >= range.end {
                return;
            }
        }
        if cursor < range.end {
            f(cursor..range.end);
        }
    }

    /// Number of ranges the set would hold after inserting `range`.
    pub fn len_after_insert(&self, range: Range<u64>) -> usize {
        if range.is_empty() {
            return self.len();
        }
        let merge_from = match self.ranges.range(..=range.start).next_back() {
            Some((&start, &end)) if end >= range.start => start,
            _ => range.start,
        };
        let absorbed = self.ranges.range(merge_from..=range.end).count();
        self.len() + 1 - absorbed
    }

    pub fn first(&self) -> Option<Range<u64>> {
        self.ranges.first_key_value().map(|(&start, &end)| start..end)
    }

    /// Removes and returns up to `max_len` offsets from the start of the lowest range.
    pub fn pop_front(&mut self, max_len: u64) -> Option<Range<u64>> {
        let (start, end) = self.ranges.pop_first()?;
        let taken_end = end.min(start.saturating_add(max_len));
        if taken_end < end {
            self.ranges.insert(taken_end, end);
        }
        Some(start..taken_end)
    }

    pub fn iter(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.ranges.iter().map(|(&start, &end)| start..end)
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn clear(&mut self) {
        self.ranges.clear();
    }
}

#[cfg(test)]
// One-range lists of offsets are data here, not a mistaken `(a..b).collect()`.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn set(ranges: &[Range<u64>]) -> RangeSet {
        let mut set = RangeSet::default();
        for range in ranges {
            set.insert(range.clone());
        }
        set
    }

    fn ranges(set: &RangeSet) -> Vec<Range<u64>> {
        set.iter().collect()
    }

    #[test]
    fn insert_merges_overlapping_and_touching_ranges_and_counts_new_offsets() {
        let mut s = RangeSet::default();
        assert_eq!(s.insert(10..20), 10);
        assert_eq!(s.insert(30..40), 10);
        assert_eq!(s.insert(20..30), 10);
        assert_eq!(ranges(&s), [10..40]);
        assert_eq!(s.insert(5..45), 10);
        assert_eq!(s.insert(12..13), 0);
        assert_eq!(s.insert(7..7), 0);
        assert_eq!(ranges(&s), [5..45]);
    }

    #[test]
    fn remove_splits_straddling_ranges() {
        let mut s = set(&[0..10, 20..30]);
        s.remove(5..25);
        assert_eq!(ranges(&s), [0..5, 25..30]);
        s.remove(2..3);
        assert_eq!(ranges(&s), [0..2, 3..5, 25..30]);
        s.remove_below(4);
        assert_eq!(ranges(&s), [4..5, 25..30]);
        s.remove(0..100);
        assert!(s.is_empty());
    }

    #[test]
    fn gaps_are_reported_in_order() {
        let s = set(&[10..20, 30..40]);
        let mut gaps = Vec::new();
        s.for_each_gap(0..50, |g| gaps.push(g));
        assert_eq!(gaps, [0..10, 20..30, 40..50]);
        gaps.clear();
        s.for_each_gap(15..35, |g| gaps.push(g));
        assert_eq!(gaps, [20..30]);
        gaps.clear();
        s.for_each_gap(12..18, |g| gaps.push(g));
        assert!(gaps.is_empty());
    }

    #[test]
    fn coverage() {
        let s = set(&[10..20]);
        assert!(s.covers(10..20) && s.covers(12..13) && !s.covers(12..21) && !s.covers(9..11) && s.covers(3..3));
    }

    #[test]
    fn len_after_insert_predicts_merges() {
        let s = set(&[10..20, 30..40, 50..60]);
        assert_eq!(s.len_after_insert(0..5), 4);
        assert_eq!(s.len_after_insert(20..30), 2);
        assert_eq!(s.len_after_insert(15..55), 1);
        assert_eq!(s.len_after_insert(41..49), 4);
        assert_eq!(s.len_after_insert(40..41), 3);
    }

    #[test]
    fn pop_front_takes_at_most_max_len() {
        let mut s = set(&[10..20, 30..40]);
        assert_eq!(s.pop_front(4), Some(10..14));
        assert_eq!(s.pop_front(100), Some(14..20));
        assert_eq!(s.first(), Some(30..40));
    }
}
