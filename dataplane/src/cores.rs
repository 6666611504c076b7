//! Starting the data cores: one pinned thread per core, each with its own monoio runtime,
//! SO_REUSEPORT listener and [`CoreContext`].

use crate::core_state::{CoreContext, CoreLinks};
use crate::core_stats::{BrainStats, CoreStats, PredictionStats};
use crate::doorbell::Doorbell;
use crate::fleet::FleetClock;
use crate::http::serve_connection;
use crate::observe::{DecisionRecord, ShadowJob, Sink};
use crate::predict::Predictor;
use crate::reports::ReportQueue;
use crate::shutdown::ShutdownSignal;
use crate::snapshot::Snapshot;
use inferrail_routing::FleetFacts;
use inferrail_sync::Mailbox;
use monoio::net::TcpListener;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Why the data cores could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A core thread or its runtime could not be created.
    #[error("cannot start data core {core}: {source}")]
    Core {
        /// Core index.
        core: usize,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// How to run the data cores.
#[derive(Debug, Clone)]
pub struct CoreOptions {
    /// Number of data cores (at least 1).
    pub cores: usize,
    /// Client listen address; port 0 picks a free port shared by every core.
    pub listen: SocketAddr,
    /// Pin each core thread to a CPU.
    pub pin: bool,
    /// Seed for the randomized policies (each core derives its own stream).
    pub seed: u64,
    /// How long running requests may finish after shutdown starts.
    pub shutdown_timeout: Duration,
}

/// The running data cores.
pub struct CoreSet {
    threads: Vec<JoinHandle<()>>,
    /// Per-core snapshot mailboxes, written by the control thread.
    pub mailboxes: Vec<Arc<Mailbox<Snapshot>>>,
    /// Per-core doorbells, rung by the control thread after it publishes.
    pub doorbells: Vec<Arc<Doorbell>>,
    /// The bound listen address (the real port when 0 was asked for).
    pub local_addr: SocketAddr,
}

impl CoreSet {
    /// Waits for every core to finish (after the shutdown signal and drain).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The I/O driver monoio picks on this kernel: "io_uring", or "epoll" when io_uring is missing
/// or `MONOIO_FORCE_LEGACY_DRIVER` is set.
pub fn driver_name() -> &'static str {
    if monoio::utils::detect_uring() {
        "io_uring"
    } else {
        "epoll"
    }
}

fn bind_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    socket.set_reuse_port(true)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

/// What the cores share with the control thread besides snapshots.
pub struct CoreWiring {
    /// Request results for passive ejection.
    pub reports: Arc<ReportQueue>,
    /// One shadow sink per core (empty: no shadow worker).
    pub shadow: Vec<Sink<ShadowJob>>,
    /// One decision log sink per core (empty: no decision log).
    pub decisions: Vec<Sink<DecisionRecord>>,
    /// One statistics block per core.
    pub stats: Vec<Arc<CoreStats>>,
    /// Tokenizers, pool and index (none when no model has a tokenizer).
    pub predictor: Option<Arc<Predictor>>,
    /// One prediction counter block per core.
    pub prediction_stats: Vec<Arc<PredictionStats>>,
    /// Fleet-wide sessions and prefix demand.
    pub fleet: Arc<FleetFacts>,
    /// Their clock, shared with the control thread (explain reads the same time).
    pub fleet_clock: FleetClock,
    /// One routing-brain counter block per core.
    pub brain_stats: Vec<Arc<BrainStats>>,
}

/// Binds one SO_REUSEPORT listener per core and starts the core threads. Returns once every core
/// is accepting. `snapshot.metrics` must have a recorder per core.
pub fn start_cores(
    opts: CoreOptions,
    snapshot: Arc<Snapshot>,
    wiring: CoreWiring,
    shutdown: Arc<ShutdownSignal>,
) -> Result<CoreSet, StartError> {
    let CoreWiring {
        reports,
        shadow,
        decisions,
        stats,
        predictor,
        prediction_stats,
        fleet,
        fleet_clock,
        brain_stats,
    } = wiring;
    let mut shadow = shadow.into_iter();
    let mut decisions = decisions.into_iter();
    let cores = opts.cores.max(1);
    let mut listeners = Vec::with_capacity(cores);
    let mut addr = opts.listen;
    for _ in 0..cores {
        let l = bind_listener(addr).map_err(|source| StartError::Bind { addr, source })?;
        // Port 0: the first listener picks the port, the others join it.
        addr = l
            .local_addr()
            .map_err(|source| StartError::Bind { addr, source })?;
        listeners.push(l);
    }
    let cpu_ids = if opts.pin {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let id_seed_base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(32);

    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), StartError>>();
    let mut set = CoreSet {
        threads: Vec::with_capacity(cores),
        mailboxes: Vec::with_capacity(cores),
        doorbells: Vec::with_capacity(cores),
        local_addr: addr,
    };
    for (index, listener) in listeners.into_iter().enumerate() {
        let mailbox = Arc::new(Mailbox::new());
        let doorbell = Arc::new(Doorbell::new());
        set.mailboxes.push(mailbox.clone());
        set.doorbells.push(doorbell.clone());
        let cpu = (!cpu_ids.is_empty()).then(|| cpu_ids[index % cpu_ids.len()]);
        let snapshot = snapshot.clone();
        let reports = reports.clone();
        let shadow = shadow.next();
        let decisions = decisions.next();
        let stats = stats.get(index).cloned().unwrap_or_default();
        let predictor = predictor.clone();
        let prediction_stats = prediction_stats.get(index).cloned().unwrap_or_default();
        let brain_stats = brain_stats.get(index).cloned().unwrap_or_default();
        let fleet = fleet.clone();
        let shutdown = shutdown.clone();
        let ready = ready_tx.clone();
        let opts = opts.clone();
        let id_seed = id_seed_base.wrapping_add((index as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
        let thread = std::thread::Builder::new()
            .name(format!("inferrail-core-{index}"))
            .spawn(move || {
                if let Some(cpu) = cpu {
                    core_affinity::set_for_current(cpu);
                }
                let mut rt = match build_runtime() {
                    Ok(rt) => rt,
                    Err(source) => {
                        let _ = ready.send(Err(StartError::Core {
                            core: index,
                            source,
                        }));
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(source) => {
                            let _ = ready.send(Err(StartError::Core {
                                core: index,
                                source,
                            }));
                            return;
                        }
                    };
                    let ctx = Rc::new(CoreContext::new(
                        index,
                        cores,
                        snapshot,
                        CoreLinks {
                            mailbox,
                            doorbell,
                            reports,
                            shadow,
                            decisions,
                            stats,
                            predictor,
                            prediction_stats,
                            fleet,
                            fleet_clock,
                            brain_stats,
                            shutdown: shutdown.clone(),
                        },
                        opts.seed,
                        id_seed,
                    ));
                    let _ = ready.send(Ok(()));
                    drop(ready);
                    monoio::spawn(adopt_snapshots(ctx.clone()));
                    accept_loop(&ctx, listener, &shutdown).await;
                    drain(&ctx, opts.shutdown_timeout).await;
                });
            })
            .map_err(|source| StartError::Core {
                core: index,
                source,
            })?;
        set.threads.push(thread);
    }
    drop(ready_tx);
    for _ in 0..cores {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                shutdown.trigger();
                return Err(e);
            }
            Err(_) => {
                shutdown.trigger();
                return Err(StartError::Core {
                    core: usize::MAX,
                    source: std::io::Error::other("a core thread exited during start"),
                });
            }
        }
    }
    Ok(set)
}

/// Builds a core's runtime. On io_uring the ring is set up for one thread that runs its own
/// completions: `SINGLE_ISSUER | DEFER_TASKRUN | COOP_TASKRUN` (Linux 6.1+) makes the kernel run
/// completion work when the core asks for events instead of interrupting it. Kernels without
/// those flags get a plain ring; kernels without io_uring get epoll.
type CoreRuntime = monoio::FusionRuntime<
    monoio::time::TimeDriver<monoio::IoUringDriver>,
    monoio::time::TimeDriver<monoio::LegacyDriver>,
>;

fn build_runtime() -> std::io::Result<CoreRuntime> {
    let mut tuned = io_uring::IoUring::builder();
    tuned
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_coop_taskrun();
    monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .uring_builder(tuned)
        .enable_timer()
        .build()
        .or_else(|_| {
            monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
                .enable_timer()
                .build()
        })
}

/// Adopts each snapshot as soon as the control thread rings, so that requests waiting on a
/// replica that left rotation move at once, and old snapshots are let go even on an idle core.
async fn adopt_snapshots(ctx: Rc<CoreContext>) {
    let mut stop = std::pin::pin!(ctx.shutdown.wait());
    loop {
        monoio::select! {
            _ = &mut stop => break,
            _ = ctx.doorbell.rung() => {
                ctx.refresh();
            }
        }
    }
}

async fn accept_loop(ctx: &Rc<CoreContext>, listener: TcpListener, shutdown: &Arc<ShutdownSignal>) {
    let mut stop = std::pin::pin!(shutdown.wait());
    let mut last_error_log: Option<Instant> = None;
    loop {
        monoio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    monoio::spawn(serve_connection(ctx.clone(), stream));
                }
                Err(e) => {
                    // Out of file descriptors or similar: log at most once a second and back off
                    // so the loop does not spin.
                    if last_error_log.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                        eprintln!("inferrail: core {}: accept failed: {e}", ctx.index);
                        last_error_log = Some(Instant::now());
                    }
                    monoio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}

/// After the listener closed: idle connections are closed at once, running requests get
/// `timeout` to finish, then every remaining connection is shut down (its task sees the socket
/// end, drops its upstream request and closes).
async fn drain(ctx: &Rc<CoreContext>, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    ctx.close_connections(false);
    while ctx.active_requests.get() > 0 && Instant::now() < deadline {
        // Connections that went idle after a response are closed as they appear.
        ctx.close_connections(false);
        monoio::time::sleep(Duration::from_millis(5)).await;
    }
    ctx.close_connections(true);
    let grace = Instant::now() + Duration::from_secs(1);
    while ctx.connection_count() > 0 && Instant::now() < grace {
        monoio::time::sleep(Duration::from_millis(5)).await;
    }
}
