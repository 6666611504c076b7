//! State shared between the engine thread and the threads holding the [`crate::ScriptedEngine`].
//!
//! Test tooling, not a hot path: plain mutexes, plus one atomic so the engine notices a new
//! behavior with a single load per request.

use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use super::types::{Behavior, EngineStats, ReceivedRequest};

/// Locks `m`, ignoring poisoning (a panicked test thread must not hide the engine's counters).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the controlling threads ask of the engine thread.
#[derive(Default)]
struct Control {
    /// Bumped by every `set_behavior` and by `stop`.
    generation: u64,
    /// The latest generation the engine has applied.
    applied: u64,
    /// `stop` was called.
    stop: bool,
    /// The engine thread has finished (normally or not).
    exited: bool,
    /// The engine's control task, waiting for a new generation.
    waker: Option<Waker>,
}

/// State shared by the engine thread and its handle.
pub(crate) struct Shared {
    /// The served model name.
    pub model: String,
    /// Keep copies of completion requests.
    pub record: bool,
    behavior_generation: AtomicU64,
    behavior: Mutex<(u64, Behavior)>,
    stats: Mutex<EngineStats>,
    received: Mutex<Vec<ReceivedRequest>>,
    control: Mutex<Control>,
    applied_cv: Condvar,
}

impl Shared {
    pub(crate) fn new(model: String, record: bool, behavior: Behavior) -> Shared {
        Shared {
            model,
            record,
            behavior_generation: AtomicU64::new(0),
            behavior: Mutex::new((0, behavior)),
            stats: Mutex::new(EngineStats::default()),
            received: Mutex::new(Vec::new()),
            control: Mutex::new(Control::default()),
            applied_cv: Condvar::new(),
        }
    }

    // ----- behavior -----

    /// The generation of the current behavior (one atomic load).
    pub(crate) fn behavior_generation(&self) -> u64 {
        self.behavior_generation.load(Ordering::Acquire)
    }

    /// The current behavior and its generation.
    pub(crate) fn behavior(&self) -> (u64, Behavior) {
        lock(&self.behavior).clone()
    }

    /// Replaces the behavior and tells the engine thread; waits (bounded) until it has applied it,
    /// so a `Refuse` has closed the listener, and a later behavior has reopened it, on return.
    pub(crate) fn set_behavior(&self, b: Behavior) {
        {
            let mut cur = lock(&self.behavior);
            cur.0 += 1;
            cur.1 = b;
            self.behavior_generation.store(cur.0, Ordering::Release);
        }
        let target = self.bump_control(false);
        self.wait_applied(target, Duration::from_secs(5));
    }

    // ----- control -----

    /// Asks the engine to stop.
    pub(crate) fn request_stop(&self) {
        self.bump_control(true);
    }

    fn bump_control(&self, stop: bool) -> u64 {
        let (generation, waker) = {
            let mut c = lock(&self.control);
            c.generation += 1;
            c.stop |= stop;
            (c.generation, c.waker.take())
        };
        if let Some(w) = waker {
            w.wake();
        }
        generation
    }

    fn wait_applied(&self, target: u64, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut c = lock(&self.control);
        while c.applied < target && !c.exited {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            c = match self.applied_cv.wait_timeout(c, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Resolves with `(generation, stop)` once the control generation differs from `seen`.
    pub(crate) fn control_changed(&self, seen: u64) -> impl Future<Output = (u64, bool)> + '_ {
        poll_fn(move |cx| {
            let mut c = lock(&self.control);
            if c.generation != seen || c.stop {
                Poll::Ready((c.generation, c.stop))
            } else {
                c.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        })
    }

    /// The engine has applied everything up to `generation`.
    pub(crate) fn mark_applied(&self, generation: u64) {
        let mut c = lock(&self.control);
        c.applied = c.applied.max(generation);
        self.applied_cv.notify_all();
    }

    /// The engine thread is gone; nobody waits for it any more.
    pub(crate) fn mark_exited(&self) {
        let mut c = lock(&self.control);
        c.exited = true;
        self.applied_cv.notify_all();
    }

    // ----- counters and records -----

    /// A copy of the counters.
    pub(crate) fn stats(&self) -> EngineStats {
        lock(&self.stats).clone()
    }

    /// Runs `f` on the counters.
    pub(crate) fn with_stats(&self, f: impl FnOnce(&mut EngineStats)) {
        f(&mut lock(&self.stats));
    }

    /// Keeps a copy of a completion request.
    pub(crate) fn record(&self, r: ReceivedRequest) {
        lock(&self.received).push(r);
    }

    /// Copies of the completion requests received so far.
    pub(crate) fn received(&self) -> Vec<ReceivedRequest> {
        lock(&self.received).clone()
    }
}
