//! The connection pool: idle keep-alive connections, more opened on demand up to a cap.
//!
//! A request takes the most recently used idle connection; when none is idle it opens a new one
//! while fewer than `max` are open, and otherwise waits (counted) until one is released or closed.
//! Everything lives on the runtime's one thread, so plain `Rc`/`RefCell` suffice. A borrowed
//! connection is a [`Lease`]: dropping it (a timeout, an error) closes the connection and frees
//! its slot, so the pool's count cannot leak.
//!
//! A connection idle longer than `max_idle` is closed instead of reused: servers close idle
//! keep-alive connections (uvicorn, hence vLLM, after 5 s), and a request written on a connection
//! the server is closing at that moment fails with no response. Reusing only connections idle
//! for less than the server's timeout avoids that race.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use inferrail_wire::Method;

use crate::conn::{BodySink, Conn, ExchangeError, Response, Streamed};

/// What a waiting request is handed.
#[derive(Debug)]
enum Handoff {
    /// A released, reusable connection.
    Conn(Conn),
    /// A slot freed by a closed connection: the waiter opens its own.
    Slot,
}

/// A request waiting for a connection.
#[derive(Debug, Default)]
struct Waiter {
    /// Set by the pool when it serves this waiter.
    handoff: Option<Handoff>,
    /// Woken when `handoff` is set.
    waker: Option<Waker>,
    /// The waiting request gave up (timed out); the pool skips it.
    gone: bool,
}

/// Mutable pool state.
#[derive(Debug, Default)]
struct State {
    /// Idle connections and when each went idle; the last is the most recently used.
    idle: Vec<(Conn, Instant)>,
    /// Connections open or being opened, idle ones included.
    open: usize,
    /// Requests waiting because `open == max`, oldest first.
    waiters: VecDeque<Rc<RefCell<Waiter>>>,
    /// Connections opened since the pool was made.
    opened: u64,
    /// Times a request had to wait for a connection.
    waits: u64,
    /// Idle connections closed for having idled longer than `max_idle`.
    expired: u64,
}

/// A pool of connections to one address.
#[derive(Debug)]
pub struct Pool {
    /// Where connections go.
    addr: SocketAddr,
    /// Most connections open at once.
    max: usize,
    /// Longest idle spell after which a connection is still reused.
    max_idle: Duration,
    /// Mutable state (single-threaded).
    state: RefCell<State>,
}

/// A connection borrowed from the pool. [`Lease::release`] returns it for reuse; dropping the
/// lease instead closes the connection.
#[derive(Debug)]
pub struct Lease {
    /// The pool the connection belongs to.
    pool: Rc<Pool>,
    /// The connection; `None` only after release.
    conn: Option<Conn>,
}

/// Why a connection could not be had.
#[derive(Debug, thiserror::Error)]
#[error("connect to {addr}: {source}")]
pub struct ConnectError {
    /// The address that refused.
    pub addr: SocketAddr,
    /// The socket error.
    pub source: io::Error,
}

impl Pool {
    /// An empty pool for `addr` allowing at most `max` (at least one) connections, reusing
    /// connections idle for at most `max_idle`.
    pub fn new(addr: SocketAddr, max: usize, max_idle: Duration) -> Rc<Pool> {
        Rc::new(Pool {
            addr,
            max: max.max(1),
            max_idle,
            state: RefCell::new(State::default()),
        })
    }

    /// Opens up to `n` connections (never beyond the cap) and parks them idle.
    pub async fn prefill(self: &Rc<Self>, n: usize) -> Result<(), ConnectError> {
        for _ in 0..n {
            if self.state.borrow().open >= self.max {
                break;
            }
            self.state.borrow_mut().open += 1;
            let lease = self.open_in_slot().await?;
            lease.release();
        }
        Ok(())
    }

    /// A connection for one request: idle, new, or (at the cap) the next one freed.
    pub async fn acquire(self: &Rc<Self>) -> Result<Lease, ConnectError> {
        let waiter = {
            let mut s = self.state.borrow_mut();
            while let Some((conn, since)) = s.idle.pop() {
                if since.elapsed() <= self.max_idle {
                    return Ok(self.lease(conn));
                }
                // Idled too long: the server may be closing it. Its slot is free again (nobody
                // waits while connections are idle).
                drop(conn);
                s.open = s.open.saturating_sub(1);
                s.expired += 1;
            }
            if s.open < self.max {
                s.open += 1;
                None
            } else {
                s.waits += 1;
                let w = Rc::new(RefCell::new(Waiter::default()));
                s.waiters.push_back(Rc::clone(&w));
                Some(w)
            }
        };
        let Some(waiter) = waiter else {
            return self.open_in_slot().await;
        };
        let guard = WaitGuard {
            pool: Rc::clone(self),
            waiter,
        };
        match guard.wait().await {
            Handoff::Conn(conn) => Ok(self.lease(conn)),
            Handoff::Slot => self.open_in_slot().await,
        }
    }

    /// Connections opened so far.
    pub fn opened(&self) -> u64 {
        self.state.borrow().opened
    }

    /// Times a request waited for a connection.
    pub fn waits(&self) -> u64 {
        self.state.borrow().waits
    }

    /// Idle connections closed for having idled longer than `max_idle`.
    pub fn expired(&self) -> u64 {
        self.state.borrow().expired
    }

    /// Connects using a slot already counted in `open`; gives the slot back on failure.
    async fn open_in_slot(self: &Rc<Self>) -> Result<Lease, ConnectError> {
        match Conn::connect(self.addr).await {
            Ok(conn) => {
                self.state.borrow_mut().opened += 1;
                Ok(self.lease(conn))
            }
            Err(source) => {
                self.free_slot();
                Err(ConnectError {
                    addr: self.addr,
                    source,
                })
            }
        }
    }

    fn lease(self: &Rc<Self>, conn: Conn) -> Lease {
        Lease {
            pool: Rc::clone(self),
            conn: Some(conn),
        }
    }

    /// The first waiter still waiting, if any.
    fn next_waiter(s: &mut State) -> Option<Rc<RefCell<Waiter>>> {
        while let Some(w) = s.waiters.pop_front() {
            if !w.borrow().gone {
                return Some(w);
            }
        }
        None
    }

    /// Hands `handoff` to the next waiter; gives it back when nobody waits.
    fn hand_off(&self, handoff: Handoff) -> Option<Handoff> {
        let Some(w) = Self::next_waiter(&mut self.state.borrow_mut()) else {
            return Some(handoff);
        };
        let waker = {
            let mut w = w.borrow_mut();
            w.handoff = Some(handoff);
            w.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        None
    }

    /// Returns a reusable connection: to a waiter, else to the idle list.
    fn put_back(&self, conn: Conn) {
        if let Some(Handoff::Conn(conn)) = self.hand_off(Handoff::Conn(conn)) {
            self.state.borrow_mut().idle.push((conn, Instant::now()));
        }
    }

    /// A connection closed (or never opened): its slot goes to a waiter, else is freed.
    fn free_slot(&self) {
        if self.hand_off(Handoff::Slot).is_some() {
            let mut s = self.state.borrow_mut();
            s.open = s.open.saturating_sub(1);
        }
    }
}

impl Lease {
    /// Runs one exchange on the borrowed connection (see [`Conn::exchange`]).
    pub async fn exchange(
        &mut self,
        request: Bytes,
        method: Method,
    ) -> Result<Response, ExchangeError> {
        match self.conn.as_mut() {
            Some(conn) => conn.exchange(request, method).await,
            // `release` consumes the lease, so the connection is always here.
            None => Err(io::Error::other("lease already released").into()),
        }
    }

    /// Runs one streamed exchange on the borrowed connection (see [`Conn::exchange_streaming`]).
    pub async fn exchange_streaming(
        &mut self,
        request: Bytes,
        method: Method,
        sink: &mut impl BodySink,
    ) -> Result<Streamed, ExchangeError> {
        match self.conn.as_mut() {
            Some(conn) => conn.exchange_streaming(request, method, sink).await,
            None => Err(io::Error::other("lease already released").into()),
        }
    }

    /// Returns the connection to the pool for another request.
    pub fn release(mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.put_back(conn);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.conn.take().is_some() {
            // Closing the socket happens as the connection drops here.
            self.pool.free_slot();
        }
    }
}

/// A request's place in the wait queue; leaving early passes whatever it was handed on.
struct WaitGuard {
    /// The pool waited on.
    pool: Rc<Pool>,
    /// This request's slot in the queue.
    waiter: Rc<RefCell<Waiter>>,
}

impl WaitGuard {
    async fn wait(&self) -> Handoff {
        poll_fn(|cx| {
            let mut w = self.waiter.borrow_mut();
            match w.handoff.take() {
                Some(h) => Poll::Ready(h),
                None => {
                    w.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        let handoff = {
            let mut w = self.waiter.borrow_mut();
            w.gone = true;
            w.handoff.take()
        };
        match handoff {
            Some(Handoff::Conn(conn)) => self.pool.put_back(conn),
            Some(Handoff::Slot) => self.pool.free_slot(),
            None => {}
        }
    }
}
