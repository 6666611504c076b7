//! The engine handle and the engine thread: one monoio runtime (io_uring, or epoll where io_uring
//! is missing), a control task that applies behavior changes, and an acceptor task while listening.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use monoio::io::{CancelHandle, Canceller};
use monoio::net::{ListenerOpts, TcpListener};
use monoio::task::JoinHandle;

use super::conn::Local;
use super::shared::Shared;
use super::types::{Behavior, EngineOptions, EngineStats, ReceivedRequest};

/// ECANCELED: what a canceled monoio operation returns.
const ECANCELED: i32 = 125;

/// An OpenAI-compatible engine on its own thread that does what it is told: answer at once,
/// stream slowly, hang, fail, close or refuse connections. Dropping it stops it.
///
/// ```no_run
/// use inferrail_sim::{Behavior, EngineOptions, ScriptedEngine};
/// let engine = ScriptedEngine::start(EngineOptions::new("tiny")).unwrap();
/// engine.set_behavior(Behavior::Status { code: 503 });
/// println!("{} has seen {} requests", engine.url(), engine.stats().requests);
/// ```
pub struct ScriptedEngine {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<thread::JoinHandle<()>>,
}

impl std::fmt::Debug for ScriptedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedEngine")
            .field("addr", &self.addr)
            .field("model", &self.shared.model)
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl ScriptedEngine {
    /// Starts an engine on 127.0.0.1 (`opts.port`, 0 for an ephemeral port) in a new thread with
    /// its own monoio runtime. Returns once the engine listens (or, when started with
    /// [`Behavior::Refuse`], once it has reserved its port and closed it again).
    pub fn start(opts: EngineOptions) -> io::Result<ScriptedEngine> {
        Self::start_on(IpAddr::V4(Ipv4Addr::LOCALHOST), opts)
    }

    /// As [`ScriptedEngine::start`], listening on `host` instead of 127.0.0.1.
    pub fn start_on(host: IpAddr, opts: EngineOptions) -> io::Result<ScriptedEngine> {
        let shared = Arc::new(Shared::new(opts.model, opts.record, opts.behavior));
        let bind_to = SocketAddr::new(host, opts.port);
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let engine_shared = shared.clone();
        let thread = thread::Builder::new()
            .name(format!("inferrail-sim:{}", opts.port))
            .spawn(move || run_thread(engine_shared, bind_to, ready_tx))?;
        match ready_rx.recv() {
            Ok(Ok(addr)) => Ok(ScriptedEngine {
                addr,
                shared,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(io::Error::other(
                    "the engine thread ended before it listened",
                ))
            }
        }
    }

    /// The address the engine listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://HOST:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Changes the behavior for requests whose head arrives after this call. Waits (at most 5 s)
    /// until the engine thread has applied it, so after `Refuse` connects fail, and after leaving
    /// `Refuse` the engine listens again on the same port.
    pub fn set_behavior(&self, b: Behavior) {
        self.shared.set_behavior(b);
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> EngineStats {
        self.shared.stats()
    }

    /// The completion requests received so far, in order (empty unless `record` was set).
    pub fn received(&self) -> Vec<ReceivedRequest> {
        self.shared.received()
    }

    /// Closes the listener and every connection abruptly (like a crash) and joins the engine
    /// thread. Calling it again does nothing.
    pub fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.shared.request_stop();
            let _ = thread.join();
        }
    }
}

impl Drop for ScriptedEngine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Marks the engine as gone when the thread ends, however it ends.
struct ExitGuard(Arc<Shared>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.0.mark_exited();
    }
}

type Ready = mpsc::SyncSender<io::Result<SocketAddr>>;

fn run_thread(shared: Arc<Shared>, bind_to: SocketAddr, ready: Ready) {
    let _exit = ExitGuard(shared.clone());
    let runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .with_entries(256)
        .enable_timer()
        .build();
    match runtime {
        Ok(mut rt) => rt.block_on(engine_main(shared, bind_to, ready)),
        Err(e) => {
            let _ = ready.send(Err(e));
        }
    }
}

fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    // No SO_REUSEPORT: a second engine on a taken port must fail, not share it.
    let opts = ListenerOpts::new()
        .reuse_port(false)
        .reuse_addr(true)
        .backlog(1024);
    TcpListener::bind_with_config(addr, &opts)
}

/// The acceptor task and the canceller that ends it.
struct Acceptor {
    canceller: Canceller,
    task: JoinHandle<()>,
}

impl Acceptor {
    fn start(local: &Rc<Local>, listener: TcpListener) -> Acceptor {
        let canceller = Canceller::new();
        let handle = canceller.handle();
        let task = monoio::spawn(accept_loop(local.clone(), listener, handle));
        Acceptor { canceller, task }
    }

    /// Cancels the pending accept, waits for the task (which drops the listener), then waits
    /// until the port really refuses connections.
    async fn stop(self, addr: SocketAddr) {
        drop(self.canceller.cancel());
        self.task.await;
        wait_until_refused(addr).await;
    }
}

async fn accept_loop(local: Rc<Local>, listener: TcpListener, handle: CancelHandle) {
    loop {
        match listener.cancelable_accept(handle.clone()).await {
            Ok((stream, _peer)) => local.adopt(stream),
            Err(e) if e.raw_os_error() == Some(ECANCELED) => return,
            // Out of descriptors and the like: back off instead of spinning.
            Err(_) => monoio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// The listening socket's close may complete asynchronously (an io_uring close op): probe until a
/// connect is refused, so `set_behavior(Refuse)` returns only once it holds.
async fn wait_until_refused(addr: SocketAddr) {
    let probe = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        monoio::time::sleep(Duration::from_millis(1)).await;
        match std::net::TcpStream::connect_timeout(&probe, Duration::from_millis(100)) {
            Ok(s) => drop(s),
            Err(_) => return,
        }
    }
}

/// Binds `addr` again after a `Refuse`, retrying briefly while the old socket finishes closing.
async fn rebind(addr: SocketAddr) -> io::Result<TcpListener> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match bind(addr) {
            Ok(l) => return Ok(l),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => monoio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// Waits (bounded) until every connection task has finished.
async fn drain(local: &Local) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while local.live_tasks() > 0 && Instant::now() < deadline {
        monoio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn engine_main(shared: Arc<Shared>, bind_to: SocketAddr, ready: Ready) {
    let local = Rc::new(Local::new(shared.clone()));
    let listener = match bind(bind_to) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut acceptor = Some(Acceptor::start(&local, listener));
    if matches!(shared.behavior().1, Behavior::Refuse) {
        if let Some(a) = acceptor.take() {
            a.stop(addr).await;
        }
    }
    let _ = ready.send(Ok(addr));

    let mut seen = 0;
    loop {
        let (generation, stop) = shared.control_changed(seen).await;
        seen = generation;
        if stop {
            break;
        }
        let refuse = matches!(shared.behavior().1, Behavior::Refuse);
        if refuse {
            if let Some(a) = acceptor.take() {
                a.stop(addr).await;
            }
            local.close_all();
            drain(&local).await;
        } else if acceptor.is_none() {
            match rebind(addr).await {
                Ok(l) => acceptor = Some(Acceptor::start(&local, l)),
                Err(e) => eprintln!("inferrail-sim: cannot listen on {addr} again: {e}"),
            }
        }
        shared.mark_applied(generation);
    }

    if let Some(a) = acceptor.take() {
        a.stop(addr).await;
    }
    local.close_all();
    drain(&local).await;
    shared.mark_applied(seen);
}
