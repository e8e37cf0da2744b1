//! Replay protection per channel and direction (wire-format section 6): a sliding window of 1024 packet numbers
//! below the largest one opened. Checked before opening, updated only after a packet proved authentic, so a forged
//! packet can never move the window.

const WINDOW: u64 = 1024;
const WORDS: usize = (WINDOW / 64) as usize;

#[derive(Debug, Clone)]
pub(crate) struct ReplayWindow {
    largest: Option<u64>,
    /// Bit `pn % WINDOW` is set when `pn` (within the window) was opened.
    seen: [u64; WORDS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow { largest: None, seen: [0; WORDS] }
    }
}

impl ReplayWindow {
    /// Largest packet number opened so far, the base for expanding truncated packet numbers.
    pub(crate) fn largest(&self) -> Option<u64> {
        self.largest
    }

    /// Whether `pn` may be new: above the window, or inside it and not yet seen.
    pub(crate) fn is_fresh(&self, pn: u64) -> bool {
        match self.largest {
            None => true,
            Some(largest) if pn > largest => true,
            Some(largest) if largest - pn >= WINDOW => false,
            Some(_) => !self.bit(pn),
        }
    }

    /// Records an authentic packet.
    pub(crate) fn mark(&mut self, pn: u64) {
        match self.largest {
            Some(largest) if pn <= largest => {}
            Some(largest) => {
                if pn - largest >= WINDOW {
                    self.seen = [0; WORDS];
                } else {
                    for cleared in largest + 1..pn {
                        self.clear_bit(cleared);
                    }
                }
                self.largest = Some(pn);
            }
            None => {
                self.seen = [0; WORDS];
                self.largest = Some(pn);
            }
        }
        self.set_bit(pn);
    }

    fn index(pn: u64) -> (usize, u64) {
        let slot = pn % WINDOW;
        ((slot / 64) as usize, 1 << (slot % 64))
    }

    fn bit(&self, pn: u64) -> bool {
        let (word, mask) = Self::index(pn);
        self.seen.get(word).is_some_and(|bits| bits & mask != 0)
    }

    fn set_bit(&mut self, pn: u64) {
        let (word, mask) = Self::index(pn);
        if let Some(bits) = self.seen.get_mut(word) {
            *bits |= mask;
        }
    }

    fn clear_bit(&mut self, pn: u64) {
        let (word, mask) = Self::index(pn);
        if let Some(bits) = self.seen.get_mut(word) {
            *bits &= !mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_duplicates_and_packets_below_the_window() {
        let mut window = ReplayWindow::default();
        assert!(window.is_fresh(0));
        window.mark(0);
        assert!(!window.is_fresh(0));
        window.mark(5);
        assert!(window.is_fresh(3), "reordered packet inside the window");
        window.mark(3);
        assert!(!window.is_fresh(3));
        window.mark(2000);
        assert!(!window.is_fresh(976), "at the low edge");
        assert!(window.is_fresh(977));
        assert!(!window.is_fresh(2000));
        assert!(window.is_fresh(1999));
        assert_eq!(window.largest(), Some(2000));
    }

    #[test]
    fn sliding_clears_reused_slots() {
        let mut window = ReplayWindow::default();
        window.mark(10);
        window.mark(10 + WINDOW - 1);
        window.mark(10 + WINDOW + 5);
        // Slot of 10 + WINDOW was set by nobody: 10's bit must not make it look seen.
        assert!(window.is_fresh(10 + WINDOW));
    }
}
