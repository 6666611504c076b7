//! A one-shot, cross-thread shutdown signal that data cores can await.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// Set once by the control thread; every core's accept loop awaits it and every connection
/// checks it between requests with one relaxed load.
#[derive(Debug, Default)]
pub struct ShutdownSignal {
    triggered: AtomicBool,
    /// Wakers of accept loops waiting for the signal. Locked once per waiter registration and
    /// once at trigger time, never on the request path.
    waiters: Mutex<Vec<Waker>>,
}

impl ShutdownSignal {
    /// A signal that has not fired.
    pub fn new() -> Arc<ShutdownSignal> {
        Arc::new(ShutdownSignal::default())
    }

    /// Fires the signal and wakes every waiter. Idempotent.
    pub fn trigger(&self) {
        self.triggered.store(true, Ordering::Release);
        let waiters = match self.waiters.lock() {
            Ok(mut w) => std::mem::take(&mut *w),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for w in waiters {
            w.wake();
        }
    }

    /// True once the signal has fired.
    pub fn is_triggered(&self) -> bool {
        self.triggered.load(Ordering::Acquire)
    }

    /// A future that completes when the signal fires. It registers its waker on first poll only,
    /// so keep one future alive across a loop rather than making a new one per iteration.
    pub fn wait(self: &Arc<Self>) -> Wait {
        Wait {
            signal: self.clone(),
            registered: false,
        }
    }
}

/// Future returned by [`ShutdownSignal::wait`].
#[derive(Debug)]
pub struct Wait {
    signal: Arc<ShutdownSignal>,
    registered: bool,
}

impl Future for Wait {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.is_triggered() {
            return Poll::Ready(());
        }
        if !self.registered {
            let mut w = match self.signal.waiters.lock() {
                Ok(w) => w,
                Err(poisoned) => poisoned.into_inner(),
            };
            w.push(cx.waker().clone());
            drop(w);
            self.registered = true;
            // The trigger may have happened between the first check and the registration.
            if self.signal.is_triggered() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    }
}
