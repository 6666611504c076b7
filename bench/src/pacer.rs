//! The pacer: a thread that wakes at each scheduled time and hands the arrival to the runtime.
//!
//! monoio's timer wheel has millisecond granularity, too coarse for arrivals 200 µs apart: a
//! `sleep_until` would send them in bursts, up to a millisecond late. A plain thread sleeping with
//! `std::thread::sleep` (nanosleep, with the timer slack lowered) wakes within microseconds; it
//! pushes the due arrival into a shared queue and wakes the runtime's dispatcher through a
//! cross-thread waker (monoio's `sync` feature). Arrivals that pile up while the runtime is busy
//! are drained together; the lateness that causes shows up as send lag, never hidden.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// One arrival handed from the pacer to the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// When the request was scheduled to be sent: latency and send lag count from here.
    pub at: Instant,
    /// False for warmup arrivals, which are sent but not recorded.
    pub measured: bool,
}

/// State shared by the pacer thread and the dispatcher.
#[derive(Debug, Default)]
struct Shared {
    /// Arrivals that are due and not yet taken.
    queue: VecDeque<Due>,
    /// The dispatcher waiting for the next arrival, if it is waiting.
    waker: Option<Waker>,
    /// The pacer has produced its last arrival.
    finished: bool,
    /// The dispatcher is gone; the pacer stops early.
    abandoned: bool,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // The critical sections cannot panic halfway; a poisoned lock still holds consistent state.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The dispatcher's end of the pacer: yields batches of due arrivals.
#[derive(Debug)]
pub struct DueArrivals {
    /// Shared with the pacer thread.
    shared: Arc<Mutex<Shared>>,
}

/// Starts the pacer thread. Each offset from `offsets` is due at `start + offset`; offsets before
/// `warmup` are marked unmeasured.
pub fn start<I>(offsets: I, start: Instant, warmup: Duration) -> std::io::Result<DueArrivals>
where
    I: Iterator<Item = Duration> + Send + 'static,
{
    lower_timer_slack();
    let shared = Arc::new(Mutex::new(Shared::default()));
    let theirs = Arc::clone(&shared);
    // Detached: it ends after the last arrival, or at the next one once the dispatcher is gone.
    std::thread::Builder::new()
        .name("bench-pacer".into())
        .spawn(move || pace(offsets, start, warmup, &theirs))?;
    Ok(DueArrivals { shared })
}

/// Asks the kernel to wake sleeping threads of this process within 1 µs of their deadline
/// instead of the default 50 µs. Best effort: threads spawned afterwards inherit the value.
fn lower_timer_slack() {
    let _ = std::fs::write("/proc/self/timerslack_ns", "1000");
}

fn pace<I: Iterator<Item = Duration>>(
    offsets: I,
    start: Instant,
    warmup: Duration,
    shared: &Mutex<Shared>,
) {
    for offset in offsets {
        let at = start + offset;
        loop {
            let now = Instant::now();
            if now >= at {
                break;
            }
            std::thread::sleep(at - now);
        }
        let waker = {
            let mut s = lock(shared);
            if s.abandoned {
                return;
            }
            s.queue.push_back(Due {
                at,
                measured: offset >= warmup,
            });
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
    let waker = {
        let mut s = lock(shared);
        s.finished = true;
        s.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}

impl DueArrivals {
    /// Waits until at least one arrival is due and moves every due arrival into `out`.
    /// Returns false once the schedule is exhausted and nothing is left.
    pub async fn next_batch(&self, out: &mut Vec<Due>) -> bool {
        poll_fn(|cx| {
            let mut s = lock(&self.shared);
            if !s.queue.is_empty() {
                out.extend(s.queue.drain(..));
                Poll::Ready(true)
            } else if s.finished {
                Poll::Ready(false)
            } else {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

impl Drop for DueArrivals {
    fn drop(&mut self) {
        lock(&self.shared).abandoned = true;
    }
}
