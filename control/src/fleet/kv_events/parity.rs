//! The live hash-parity check of one model (pure: fed outcomes and the time).
//!
//! Every prompt a gateway routes in exact mode is held as a speculative entry under the block
//! names the gateway computed from its own tokens; the engine's BlockStored events name blocks
//! from the engine's token ids by the same chain. An entry is *confirmed* when the mirror holds
//! its last block (the engine stored exactly our tokens) and *expired* when it never does. When
//! the gateway tokenizes differently from the engine (most often a chat template that is not
//! the engine's), nothing is ever confirmed: that is a parity mismatch. Confirmed entries count
//! as `match`, expired ones as `mismatch`.
//!
//! Over a sliding [`WINDOW`], with at least [`MIN_OUTCOMES`] outcomes, predictions switch off
//! when at least [`OFF_AT`] of them are mismatches and back on when at most [`ON_AT`] are (the
//! gap keeps it from flapping). A few mismatches are normal: a request the engine refused, or
//! blocks it evicted within the same step.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How far back outcomes count.
pub const WINDOW: Duration = Duration::from_secs(30);
/// Outcomes needed in the window before any decision.
pub const MIN_OUTCOMES: u64 = 20;
/// Mismatch fraction at which predictions switch off.
pub const OFF_AT: f64 = 0.5;
/// Mismatch fraction at which they switch back on.
pub const ON_AT: f64 = 0.1;

/// A change of a model's parity state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Transition {
    /// Predictions switch off: this fraction of the window's outcomes were mismatches.
    Off(f64),
    /// Predictions switch back on.
    On(f64),
}

/// One model's outcomes and state.
#[derive(Debug, Default)]
pub struct ParityWatch {
    window: VecDeque<(Instant, u64, u64)>,
    /// Matches and mismatches since the gateway started.
    pub matches: u64,
    /// See [`ParityWatch::matches`].
    pub mismatches: u64,
    off: bool,
}

impl ParityWatch {
    /// Whether predictions are switched off.
    pub fn off(&self) -> bool {
        self.off
    }

    /// Matches and mismatches in the window now.
    pub fn in_window(&self) -> (u64, u64) {
        self.window
            .iter()
            .fold((0, 0), |(m, x), &(_, a, b)| (m + a, x + b))
    }

    /// `matches` and `mismatches` new outcomes at `now`; returns the transition, if any.
    pub fn observe(&mut self, now: Instant, matches: u64, mismatches: u64) -> Option<Transition> {
        self.matches += matches;
        self.mismatches += mismatches;
        if matches + mismatches > 0 {
            self.window.push_back((now, matches, mismatches));
        }
        while self
            .window
            .front()
            .is_some_and(|&(t, _, _)| now.saturating_duration_since(t) > WINDOW)
        {
            self.window.pop_front();
        }
        let (m, x) = self.in_window();
        if m + x < MIN_OUTCOMES {
            return None;
        }
        let fraction = x as f64 / (m + x) as f64;
        if !self.off && fraction >= OFF_AT {
            self.off = true;
            return Some(Transition::Off(fraction));
        }
        if self.off && fraction <= ON_AT {
            self.off = false;
            return Some(Transition::On(fraction));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatches_switch_predictions_off_and_a_recovery_switches_them_on() {
        let t0 = Instant::now();
        let mut w = ParityWatch::default();
        // Too few outcomes to judge.
        assert_eq!(w.observe(t0, 0, 19), None);
        assert!(!w.off());
        assert_eq!(w.observe(t0, 0, 1), Some(Transition::Off(1.0)));
        assert!(w.off());
        // Matches come back, but the old mismatches are still in the window.
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(w.observe(t1, 30, 0), None);
        // Once they age out, the window is clean.
        let t2 = t0 + WINDOW + Duration::from_secs(1);
        assert_eq!(w.observe(t2, 1, 0), Some(Transition::On(0.0)));
        assert_eq!((w.matches, w.mismatches), (31, 20));
    }

    #[test]
    fn a_few_mismatches_among_matches_change_nothing() {
        let t0 = Instant::now();
        let mut w = ParityWatch::default();
        for i in 0..100 {
            let t = t0 + Duration::from_millis(100 * i);
            assert_eq!(w.observe(t, 9, 1), None);
        }
        assert!(!w.off());
    }
}
