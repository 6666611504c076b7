//! One-shot replies gathered from several shard threads, for a caller that must not block:
//! poll or await them on a data core (the last shard to answer rings an
//! [`inferrail_sync::Doorbell`]), or wait on them from a plain thread.
//!
//! No reply is ever lost: a request dropped by a shard without an answer (its thread ended)
//! completes the reply with [`IndexError::Lost`] instead of leaving it pending forever.

use super::error::IndexError;
use super::held::HeldBlocks;
use super::ReplicaIndexStats;
use inferrail_sync::Doorbell;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

/// The answers of `parts.len()` shards to one request.
#[derive(Debug)]
pub(crate) struct Gather<P> {
    parts: Box<[OnceLock<P>]>,
    /// Parts not answered yet; the shard that takes it to zero rings `bell`.
    remaining: AtomicUsize,
    /// Set when some part was dropped unanswered.
    lost: AtomicBool,
    bell: Doorbell,
}

impl<P> Gather<P> {
    /// A gather of `n` parts and the senders the shards answer through.
    pub(crate) fn new(n: usize) -> (Arc<Gather<P>>, Vec<PartSender<P>>) {
        let gather = Arc::new(Gather {
            parts: (0..n).map(|_| OnceLock::new()).collect(),
            remaining: AtomicUsize::new(n),
            lost: AtomicBool::new(false),
            bell: Doorbell::new(),
        });
        let senders = (0..n)
            .map(|index| PartSender {
                gather: Arc::clone(&gather),
                index,
                sent: false,
            })
            .collect();
        (gather, senders)
    }

    fn finish_one(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.bell.ring();
        }
    }

    fn is_done(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }

    /// The parts, once every shard answered; `Lost` if one dropped its part.
    fn result(&self) -> Result<impl Iterator<Item = &P>, IndexError> {
        if self.lost.load(Ordering::Acquire) {
            return Err(IndexError::Lost);
        }
        Ok(self.parts.iter().filter_map(OnceLock::get))
    }

    /// Ready once every shard answered; registers the task's waker otherwise.
    fn poll_done(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_done() {
            return Poll::Ready(());
        }
        // Registers the waker, then looks at the bell again, so a ring in between is not lost.
        let _ = pin!(self.bell.rung()).poll(cx);
        if self.is_done() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// One shard's way to answer its part. Dropping it unanswered marks the reply lost (and still
/// completes it), so a waiting caller always wakes.
#[derive(Debug)]
pub(crate) struct PartSender<P> {
    gather: Arc<Gather<P>>,
    index: usize,
    sent: bool,
}

impl<P> PartSender<P> {
    /// Delivers this shard's part.
    pub(crate) fn send(mut self, part: P) {
        // Each sender owns its own slot, so the slot is always empty here.
        let _ = self.gather.parts[self.index].set(part);
        self.sent = true;
        self.gather.finish_one();
    }
}

impl<P> Drop for PartSender<P> {
    fn drop(&mut self) {
        if !self.sent {
            self.gather.lost.store(true, Ordering::Release);
            self.gather.finish_one();
        }
    }
}

/// Wakes a parked thread: the waker of [`wait`].
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this thread, parking between polls. For tests and threads that may block;
/// never call it on a data core.
pub(crate) fn wait<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        thread::park();
    }
}

/// One shard's part of a lookup's answer: (position in the caller's list, what that replica
/// holds), one entry per replica the shard owns.
pub(crate) type LookupPart = Vec<(u32, HeldBlocks)>;

/// The answer to [`IndexShards::lookup`](super::IndexShards::lookup): for each replica asked
/// about, in the order asked, the leading prompt blocks it holds by tier ([`HeldBlocks`];
/// a replica no shard answered for holds none). Await it (it is a `Future`), poll it with
/// [`LookupReply::try_get`], or block with [`LookupReply::wait`].
#[derive(Debug)]
pub struct LookupReply {
    gather: Arc<Gather<LookupPart>>,
    replicas: usize,
}

impl LookupReply {
    pub(crate) fn new(gather: Arc<Gather<LookupPart>>, replicas: usize) -> LookupReply {
        LookupReply { gather, replicas }
    }

    fn collect(&self) -> Result<Vec<HeldBlocks>, IndexError> {
        let mut out = vec![HeldBlocks::default(); self.replicas];
        for part in self.gather.result()? {
            for &(position, held) in part {
                if let Some(slot) = out.get_mut(position as usize) {
                    *slot = held;
                }
            }
        }
        Ok(out)
    }

    /// The answer if every shard has given its part, without waiting.
    pub fn try_get(&self) -> Option<Result<Vec<HeldBlocks>, IndexError>> {
        self.gather.is_done().then(|| self.collect())
    }

    /// Blocks this thread until the answer is complete (tests and non-core threads only).
    pub fn wait(self) -> Result<Vec<HeldBlocks>, IndexError> {
        wait(self)
    }
}

impl Future for LookupReply {
    type Output = Result<Vec<HeldBlocks>, IndexError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.gather.poll_done(cx) {
            Poll::Ready(()) => Poll::Ready(self.collect()),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The answer to [`IndexShards::request_stats`](super::IndexShards::request_stats): one entry per
/// replica known to any shard, sorted by key. A `Future`, like [`LookupReply`].
#[derive(Debug)]
pub struct StatsReply {
    gather: Arc<Gather<Vec<ReplicaIndexStats>>>,
}

impl StatsReply {
    pub(crate) fn new(gather: Arc<Gather<Vec<ReplicaIndexStats>>>) -> StatsReply {
        StatsReply { gather }
    }

    fn collect(&self) -> Result<Vec<ReplicaIndexStats>, IndexError> {
        let mut out: Vec<ReplicaIndexStats> = self.gather.result()?.flatten().copied().collect();
        out.sort_by_key(|s| s.key);
        Ok(out)
    }

    /// Blocks this thread until every shard answered (tests and non-core threads only).
    pub fn wait(self) -> Result<Vec<ReplicaIndexStats>, IndexError> {
        wait(self)
    }
}

impl Future for StatsReply {
    type Output = Result<Vec<ReplicaIndexStats>, IndexError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.gather.poll_done(cx) {
            Poll::Ready(()) => Poll::Ready(self.collect()),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(gpu: u32, cpu: u32, storage: u32) -> HeldBlocks {
        HeldBlocks {
            gpu,
            cpu,
            storage,
            room: None,
        }
    }

    #[test]
    fn parts_from_other_threads_complete_the_reply() {
        let (gather, senders) = Gather::<LookupPart>::new(3);
        let reply = LookupReply::new(gather, 4);
        assert!(reply.try_get().is_none());
        let handles: Vec<_> = senders
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let i = i as u32;
                thread::spawn(move || s.send(vec![(i, held(10 + i, i, 2 * i))]))
            })
            .collect();
        let answer = reply.wait();
        for h in handles {
            h.join().ok();
        }
        let want = vec![
            held(10, 0, 0),
            held(11, 1, 2),
            held(12, 2, 4),
            HeldBlocks::default(),
        ];
        assert_eq!(
            answer.ok(),
            Some(want),
            "each tier lands in its replica's slot"
        );
    }

    #[test]
    fn a_dropped_part_completes_the_reply_as_lost() {
        let (gather, mut senders) = Gather::<LookupPart>::new(2);
        let reply = LookupReply::new(gather, 2);
        if let Some(s) = senders.pop() {
            s.send(vec![(1, held(3, 0, 0))]);
        }
        drop(senders);
        assert!(matches!(reply.wait(), Err(IndexError::Lost)));
    }

    #[test]
    fn no_parts_is_ready_at_once() {
        let (gather, _none) = Gather::<LookupPart>::new(0);
        let reply = LookupReply::new(gather, 0);
        assert_eq!(reply.try_get().and_then(Result::ok), Some(vec![]));
    }
}
