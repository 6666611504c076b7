//! One client connection, served by two tasks, and the engine thread's registry of connections.
//!
//! The reader task always has a read posted, so a client close is seen at once whatever the
//! handler is doing (sleeping, hanging, streaming). It appends bytes to the connection's inbox and
//! wakes the handler. The handler (`exchange`) parses requests from the inbox in order and answers
//! each as the behavior current at its head says. Every read and write is cancelable through one
//! `Canceller`: closing a connection cancels them and waits for them to finish, so no io_uring
//! operation is ever dropped in flight (which would keep the socket open and could lose bytes).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use monoio::io::{CancelableAsyncWriteRentExt, OwnedWriteHalf, Splitable};
use monoio::net::TcpStream;

use super::exchange::serve;
use super::shared::Shared;
use super::types::Behavior;
use crate::clock::Clock;
pub(crate) use crate::conn_state::{next_head, read_body, read_loop, BodyError, Conn, NextHead};

/// The engine thread's state: its connections and caches. Lives on one thread only.
pub(crate) struct Local {
    /// State shared with the handle.
    pub(crate) shared: Arc<Shared>,
    conns: RefCell<HashMap<u64, Rc<Conn>>>,
    next_conn: Cell<u64>,
    tasks: Cell<usize>,
    behavior: RefCell<(u64, Rc<Behavior>)>,
    /// The `date` cache and the id generator.
    pub(super) clock: RefCell<Clock>,
}

impl Local {
    pub(crate) fn new(shared: Arc<Shared>) -> Local {
        let (generation, behavior) = shared.behavior();
        Local {
            shared,
            conns: RefCell::new(HashMap::new()),
            next_conn: Cell::new(0),
            tasks: Cell::new(0),
            behavior: RefCell::new((generation, Rc::new(behavior))),
            clock: RefCell::new(Clock::new()),
        }
    }

    /// The current behavior: one atomic load unless it changed since the last request.
    pub(super) fn behavior(&self) -> Rc<Behavior> {
        let generation = self.shared.behavior_generation();
        let mut cached = self.behavior.borrow_mut();
        if cached.0 != generation {
            let (g, b) = self.shared.behavior();
            *cached = (g, Rc::new(b));
        }
        cached.1.clone()
    }

    /// Connection tasks still running.
    pub(crate) fn live_tasks(&self) -> usize {
        self.tasks.get()
    }

    /// Closes every connection abruptly (their tasks finish shortly after).
    pub(crate) fn close_all(&self) {
        let conns: Vec<Rc<Conn>> = self.conns.borrow().values().cloned().collect();
        for c in conns {
            c.close();
        }
    }

    /// Takes over an accepted connection: spawns its reader and handler tasks.
    pub(crate) fn adopt(self: &Rc<Self>, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        self.shared.with_stats(|s| s.connections_accepted += 1);
        let id = self.next_conn.get();
        self.next_conn.set(id + 1);
        let conn = Rc::new(Conn::new());
        self.conns.borrow_mut().insert(id, conn.clone());
        let (rd, wr) = stream.into_split();

        let guard = TaskGuard::new(self);
        let reader_conn = conn.clone();
        monoio::spawn(async move {
            let _guard = guard;
            read_loop(&reader_conn, rd).await;
        });

        let guard = TaskGuard::new(self);
        let local = self.clone();
        monoio::spawn(async move {
            let _guard = guard;
            serve(&local, &conn, wr).await;
            conn.close();
            local.conns.borrow_mut().remove(&id);
        });
    }
}

/// Counts a running connection task for as long as it lives.
struct TaskGuard(Rc<Local>);

impl TaskGuard {
    fn new(local: &Rc<Local>) -> TaskGuard {
        local.tasks.set(local.tasks.get() + 1);
        TaskGuard(local.clone())
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.tasks.set(self.0.tasks.get() - 1);
    }
}

/// Who ended an exchange early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gone {
    /// The client closed (read returned 0 or failed, or a write failed).
    Client,
    /// The engine closed the connection (Refuse or stop).
    Engine,
}

/// Whether, and by whom, the connection was ended.
pub(super) fn gone(conn: &Conn) -> Option<Gone> {
    if conn.closed_by_engine() {
        Some(Gone::Engine)
    } else if conn.gone() {
        Some(Gone::Client)
    } else {
        None
    }
}

/// Waits until `until` (`None`: forever), or returns early when the connection ends.
pub(super) async fn pause(conn: &Conn, until: Option<Instant>) -> Result<(), Gone> {
    loop {
        if let Some(g) = gone(conn) {
            return Err(g);
        }
        let changed = conn.changed();
        match until {
            None => changed.await,
            Some(until) => {
                let now = Instant::now();
                if now >= until {
                    return Ok(());
                }
                let elapsed = monoio::select! {
                    _ = monoio::time::sleep(until - now) => true,
                    _ = changed => false,
                };
                if elapsed {
                    return Ok(());
                }
            }
        }
    }
}

/// `now + d`, or `None` (never) when that overflows.
pub(super) fn after(from: Instant, d: Duration) -> Option<Instant> {
    from.checked_add(d)
}

/// The handler's output side: the write half and two reusable buffers.
pub(super) struct Writer {
    wr: OwnedWriteHalf<TcpStream>,
    /// Bytes of the next write.
    pub(super) out: Vec<u8>,
    /// Room to build one SSE event or body before framing it into `out`.
    pub(super) scratch: Vec<u8>,
}

impl Writer {
    pub(super) fn new(wr: OwnedWriteHalf<TcpStream>) -> Writer {
        Writer {
            wr,
            out: Vec::with_capacity(4096),
            scratch: Vec::with_capacity(1024),
        }
    }

    /// Writes `out` in one write and empties it.
    pub(super) async fn flush(&mut self, conn: &Conn) -> Result<(), Gone> {
        if self.out.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut self.out);
        let (res, mut buf) =
            CancelableAsyncWriteRentExt::write_all(&mut self.wr, buf, conn.handle.clone()).await;
        buf.clear();
        self.out = buf;
        match res {
            Ok(_) => Ok(()),
            Err(_) => Err(gone(conn).unwrap_or(Gone::Client)),
        }
    }
}
