//! The request-path side of shadow policies and the decision log: what a data core hands to the
//! observer threads, and the never-blocking sinks it hands them through.
//!
//! A core fills a job or record only for sampled requests and gives it to its own [`Sink`]; when
//! the observer thread lags, the item is dropped and counted instead of delaying the request.

use crate::predict::PromptFacts;
use crate::snapshot::Snapshot;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use inferrail_config::PolicyKind;
use inferrail_routing::Candidate;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Salt for [`sampled`], so sampling is independent of the split arm a request id lands in.
pub const SAMPLE_SALT: u64 = 0x5a4d_504c_4544_0001;

/// One routing decision for the shadow worker to re-run with the shadow policies.
#[derive(Debug, Clone)]
pub struct ShadowJob {
    /// The snapshot the request was routed from (indices below refer to it).
    pub snapshot: Arc<Snapshot>,
    /// Index of the model in `snapshot.models`.
    pub model: usize,
    /// Policies to evaluate alongside the real one.
    pub shadow: Arc<[PolicyKind]>,
    /// The policy that made the real decision.
    pub policy: PolicyKind,
    /// The request's id (seeds the shadow decision's random numbers).
    pub request_id: String,
    /// Index in `snapshot.replicas` of the replica the real policy chose.
    pub chosen: usize,
    /// The candidates the real policy saw, in the order it saw them.
    pub candidates: Vec<Candidate>,
    /// The tokenized prompt, when a prediction was made.
    pub prompt: Option<PromptFacts>,
    /// The rough prompt length used without one.
    pub approx_tokens: u32,
}

/// One routing decision for the decision log.
#[derive(Debug, Clone)]
pub struct DecisionRecord {
    /// The snapshot the request was routed from (indices below refer to it).
    pub snapshot: Arc<Snapshot>,
    /// Index of the model in `snapshot.models`.
    pub model: usize,
    /// The policy that decided.
    pub policy: PolicyKind,
    /// The request's id.
    pub request_id: String,
    /// Attempt number, 1 for the first try.
    pub attempt: u32,
    /// Index in `snapshot.replicas` of the replica that won.
    pub winner: usize,
    /// The candidates the policy saw.
    pub candidates: Vec<Candidate>,
    /// The prompt bytes, only filled when prompt logging is on.
    pub prompt: Option<Vec<u8>>,
}

/// A data core's end of a bounded channel to an observer thread.
///
/// Guarantees: [`Sink::try_send`] never blocks and never allocates; every item it could not hand
/// over is counted in [`Sink::dropped_counter`]. Each sink has a counter of its own that only its
/// core writes, so the sink is deliberately not `Clone`: give each data core its own.
#[derive(Debug)]
pub struct Sink<T> {
    /// The channel.
    tx: Sender<T>,
    /// Items dropped because the channel was full or the observer gone (single writer).
    dropped: Arc<AtomicU64>,
}

impl<T> Sink<T> {
    /// Hands `item` over without waiting: true when queued, false when the channel was full or
    /// the receiver gone, in which case the item is dropped and the drop counted.
    pub fn try_send(&self, item: T) -> bool {
        match self.tx.try_send(item) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                // One core owns this sink, so a plain load + store is an exact count and avoids
                // a locked read-modify-write on the request path.
                let n = self.dropped.load(Ordering::Relaxed);
                self.dropped.store(n.wrapping_add(1), Ordering::Relaxed);
                false
            }
        }
    }

    /// The drop counter, for the control thread to read (it never writes it).
    pub fn dropped_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.dropped)
    }
}

/// One sink per data core (`cores` of them) feeding one receiver, over a channel holding at most
/// `capacity` items (at least 1: a zero-capacity channel would drop every item).
pub fn sink_pair<T>(capacity: usize, cores: usize) -> (Vec<Sink<T>>, Receiver<T>) {
    let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
    let sinks = (0..cores)
        .map(|_| Sink {
            tx: tx.clone(),
            dropped: Arc::new(AtomicU64::new(0)),
        })
        .collect();
    (sinks, rx)
}

/// Whether the request `request_id` is sampled at `rate`: deterministic for an id (every core
/// and every run agree), never for a rate of 0 or below, always for 1 or above, and for about
/// `rate` of distinct ids in between.
pub fn sampled(request_id: &str, rate: f64) -> bool {
    if rate.is_nan() || rate <= 0.0 {
        return false;
    }
    if rate >= 1.0 {
        return true;
    }
    let h = inferrail_routing::split::stable_hash64(SAMPLE_SALT, request_id.as_bytes());
    // The top 53 bits as a uniform fraction in [0, 1).
    ((h >> 11) as f64 / (1u64 << 53) as f64) < rate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_or_closed_sink_drops_and_counts() {
        let (sinks, rx) = sink_pair::<u32>(2, 2);
        assert_eq!(sinks.len(), 2);
        assert!(sinks[0].try_send(1));
        assert!(sinks[1].try_send(2));
        assert!(!sinks[0].try_send(3));
        assert!(!sinks[0].try_send(4));
        assert_eq!(sinks[0].dropped_counter().load(Ordering::Relaxed), 2);
        assert_eq!(sinks[1].dropped_counter().load(Ordering::Relaxed), 0);
        assert_eq!(rx.try_recv(), Ok(1));
        assert!(sinks[1].try_send(5));
        drop(rx);
        assert!(!sinks[1].try_send(6));
        assert_eq!(sinks[1].dropped_counter().load(Ordering::Relaxed), 1);
    }

    #[test]
    fn zero_capacity_still_queues_one() {
        let (sinks, rx) = sink_pair::<u8>(0, 1);
        assert!(sinks[0].try_send(9));
        assert_eq!(rx.try_recv(), Ok(9));
    }

    #[test]
    fn sampling_is_deterministic_and_proportional() {
        let ids: Vec<String> = (0..20_000).map(|i| format!("req-{i}")).collect();
        assert!(ids.iter().all(|id| !sampled(id, 0.0)));
        assert!(ids.iter().all(|id| sampled(id, 1.0)));
        assert!(!sampled("x", f64::NAN));
        let hits = ids.iter().filter(|id| sampled(id, 0.1)).count();
        assert!((1_700..=2_300).contains(&hits), "{hits}");
        for id in ids.iter().take(100) {
            assert_eq!(sampled(id, 0.37), sampled(id, 0.37));
        }
        // Monotone in the rate: sampled at 0.1 implies sampled at 0.5.
        assert!(ids
            .iter()
            .filter(|id| sampled(id, 0.1))
            .all(|id| sampled(id, 0.5)));
    }
}
