//! Idle keep-alive connections to one replica, owned by one core.

use monoio::net::TcpStream;
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// A stack of idle connections, newest on top. Connections idle longer than the timeout are
/// closed instead of reused (engines close idle keep-alive connections on their own, vLLM after
/// 5 s, and a reused connection the engine already closed costs a failed attempt).
#[derive(Debug, Default)]
pub struct IdlePool {
    idle: RefCell<Vec<(TcpStream, Instant)>>,
}

impl IdlePool {
    /// The most recently used connection idle for less than `max_idle` at `now`, if any.
    pub fn checkout(&self, max_idle: Duration, now: Instant) -> Option<TcpStream> {
        let mut idle = self.idle.borrow_mut();
        // Everything below a stale entry is older still: drop them all.
        if let Some(fresh_from) = idle
            .iter()
            .position(|(_, since)| now.duration_since(*since) < max_idle)
        {
            idle.drain(..fresh_from);
        } else {
            idle.clear();
        }
        idle.pop().map(|(s, _)| s)
    }

    /// Returns a connection after a complete exchange at `now`; the oldest is closed beyond
    /// `max_count`.
    pub fn checkin(&self, stream: TcpStream, max_count: usize, now: Instant) {
        let mut idle = self.idle.borrow_mut();
        idle.push((stream, now));
        if idle.len() > max_count {
            let excess = idle.len() - max_count;
            idle.drain(..excess);
        }
    }

    /// Idle connections held now.
    pub fn len(&self) -> usize {
        self.idle.borrow().len()
    }

    /// True when no idle connection is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
