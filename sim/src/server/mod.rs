//! The simulated vLLM engine served over HTTP: [`SimServer`] wires the [`Scheduler`], the
//! latency model, the builtin tokenizer, the [`crate::openai`] formatting and the
//! [`crate::prom`] metrics into one monoio runtime on its own thread.
//!
//! # Decisions
//! - **One thread, one runtime.** An acceptor task, one reader and one handler task per
//!   connection, and one engine task that runs the scheduler on a virtual timeline (see the
//!   `core` module). Response tasks and the engine talk through `Rc<RefCell<_>>` mailboxes and
//!   wakers; nothing crosses threads but the stop flag.
//! - **Chat template** (deterministic, for the builtin tokenizer): BOS, then for each message
//!   `"<role>: <content>\n"`, then `"assistant: "` when `add_generation_prompt` (default). With
//!   `continue_final_message` the last message has no newline and no generation prompt follows.
//!   Every turn ends at a tokenizer boundary (newline or space), so a conversation's next turn
//!   starts with the previous prompt's ids. Completions: the prompt string with BOS (unless
//!   `add_special_tokens: false`); token-id prompts are taken as they are.
//! - **`x-request-id`.** As vLLM: the header (else the body's `request_id`, else 16 random hex
//!   digits) becomes the response id; the response carries an `x-request-id` header only with
//!   `enable_request_id_headers` (`--enable-request-id-headers`), echoing a valid client value or
//!   32 random hex digits. Default off, as in the vLLM captures.
//! - **`cache_salt`** (non-empty, else 400 as vLLM) goes into the first block's hash as the
//!   extra key `("cache_salt", salt)`, so different salts (or none) never share cached blocks;
//!   the hashes equal vLLM's. KV events publish the bare salt as the first block's `extra_keys`
//!   (`["abc"]`, later blocks `None`), as vLLM does.
//! - **Keep-alive** as uvicorn: `Connection: close` is answered with `connection: close` and the
//!   socket closed after the body; an idle keep-alive connection is closed after 5 s.
//! - **Stop strings** end the text before the match (`finish_reason: stop`,
//!   `stop_reason: "<string>"`); the request leaves the scheduler at that step's end and counts
//!   as `stop`. Text is not held back while a stop string could still be forming (vLLM holds it).
//! - **Cancellation.** A client gone while its request waits withdraws it at once; while the
//!   step in flight computes it, at that step's end. It counts as `abort`.
//! - **Streams.** Headers at once; the role chunk and the first token when the first token is
//!   produced; one write and one HTTP chunk per SSE event; the last token carries the finish.
//! - **Render routes** (`POST /v1/chat/completions/render`, `/v1/completions/render`,
//!   `/v1/messages/render`): vLLM's scale-out endpoints. Without `--enable-scale-out`
//!   ([`SimOptions::enable_scale_out`]) they exist but answer vLLM's 403
//!   `PermissionDeniedError`. With it they run the completion handlers' parsing, validation,
//!   chat template, tokenizer and context check (so errors are those handlers' bytes and
//!   `token_ids` are exactly what the engine would prefill), then answer the `GenerateRequest`
//!   (chat and messages: one object; completions: an array) with no engine work: nothing is
//!   scheduled and no engine metric moves (the `http_*` families count them like any route).
//!   Messages bodies are translated to chat (system first). Tools need `tool_choice: "none"`;
//!   otherwise "auto" applies and vLLM's 400 (no tool parser) is the answer, as on
//!   `/v1/chat/completions`.
//! - **`/server_info`** exists only with `VLLM_SERVER_DEV_MODE=1` (the binary reads it into
//!   [`SimOptions::server_dev_mode`]); else it is the unknown-route 404. It describes the
//!   simulator's real configuration (`config_format=text|json`), its `VLLM_*` environment
//!   without names containing `KEY`, and the few system facts it knows.
//! - **SGLang's info probes** (`/get_server_info`, `/model_info`, `/get_model_info`) are not
//!   vLLM routes: they get the unknown-route 404, so an SGLang router falls back as with vLLM.

mod conn;
mod core;
mod http;
mod info;

use inferrail_shards::tokenize::ModelTokenizer;
use std::cell::RefCell;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use monoio::io::{CancelHandle, Canceller, Splitable};
use monoio::net::{ListenerOpts, TcpListener, TcpStream};

use crate::engine::{LatencyModel, Scheduler, SchedulerConfig, SchedulerConfigError};
use crate::kv_events::{KvEventPublisher, KvEventsConfig, PublisherError};
use crate::openai::{ServerInfo, VLLM_VERSION};
use crate::prom::{CacheConfigInfo, VllmMetrics};

pub use http::{apply_chat_template, prompt_ids};

/// ECANCELED: what a canceled monoio operation returns.
const ECANCELED: i32 = 125;

/// The simulator's settings, with `vllm serve`'s flag names.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOptions {
    /// `--host`.
    pub host: IpAddr,
    /// `--port` (0: an ephemeral port).
    pub port: u16,
    /// `--served-model-name` (the first is echoed in responses).
    pub served_model_name: Vec<String>,
    /// `--max-num-batched-tokens`.
    pub max_num_batched_tokens: usize,
    /// `--max-num-seqs`.
    pub max_num_seqs: usize,
    /// `--block-size`.
    pub block_size: usize,
    /// `--num-gpu-blocks-override` (`None`: the default pool, 2,560 blocks).
    pub num_gpu_blocks_override: Option<usize>,
    /// `--enable-prefix-caching` / `--no-enable-prefix-caching`.
    pub enable_prefix_caching: bool,
    /// `--enable-prompt-tokens-details`: `usage.prompt_tokens_details.cached_tokens`.
    pub enable_prompt_tokens_details: bool,
    /// `--enable-request-id-headers`: an `x-request-id` header on every response.
    pub enable_request_id_headers: bool,
    /// `--max-model-len`.
    pub max_model_len: usize,
    /// `--long-prefill-token-threshold` (0: no cap but the budget).
    pub long_prefill_token_threshold: usize,
    /// `--zero-latency`: every step free, steps back to back.
    pub zero_latency: bool,
    /// `--latency-model` and its coefficients (ignored with `zero_latency`): the stepped model
    /// by default, [`LatencyModel::linear`] for the router's own formula (what the calibration
    /// tests fit).
    pub latency: LatencyModel,
    /// `--time-scale`: every modelled latency multiplied by this (finite, above zero; 1 is
    /// real time). At 0.1 a workload sent at 10x its rate plays out as it would at its rate,
    /// in a tenth of the time.
    pub time_scale: f64,
    /// `--seed`: mixed into every request's sampler seed.
    pub seed: u64,
    /// `--kv-events-config`: KV cache events published over ZMQ as vLLM does (`None`: off).
    pub kv_events_config: Option<KvEventsConfig>,
    /// `--tokenizer`: a tokenizer directory, a local Hugging Face cache repo, or `builtin:sim`
    /// (`None`: the builtin tokenizer). Prompts are then tokenized exactly as the gateway does.
    pub tokenizer: Option<String>,
    /// `--chat-template`: a template file or text overriding the tokenizer's.
    pub chat_template: Option<String>,
    /// `--enable-scale-out`: serve the render routes (`/v1/chat/completions/render`,
    /// `/v1/completions/render`, `/v1/messages/render`); without it they answer vLLM's 403.
    pub enable_scale_out: bool,
    /// vLLM's `VLLM_SERVER_DEV_MODE=1` (the binary reads the variable): registers
    /// `GET /server_info`, a 404 otherwise.
    pub server_dev_mode: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        let s = SchedulerConfig::default();
        SimOptions {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 8000,
            served_model_name: vec!["sim-llama".to_owned()],
            max_num_batched_tokens: s.max_num_batched_tokens,
            max_num_seqs: s.max_num_seqs,
            block_size: s.block_size,
            num_gpu_blocks_override: None,
            enable_prefix_caching: true,
            enable_prompt_tokens_details: false,
            enable_request_id_headers: false,
            max_model_len: s.max_model_len.unwrap_or(32768),
            long_prefill_token_threshold: 0,
            zero_latency: false,
            latency: LatencyModel::default(),
            time_scale: 1.0,
            seed: 0,
            kv_events_config: None,
            tokenizer: None,
            chat_template: None,
            enable_scale_out: false,
            server_dev_mode: false,
        }
    }
}

impl SimOptions {
    /// Defaults serving `model` on an ephemeral 127.0.0.1 port (for tests).
    pub fn new(model: &str) -> Self {
        SimOptions {
            port: 0,
            served_model_name: vec![model.to_owned()],
            ..SimOptions::default()
        }
    }

    /// The scheduler configuration these options describe.
    pub fn scheduler_config(&self) -> SchedulerConfig {
        SchedulerConfig {
            max_num_batched_tokens: self.max_num_batched_tokens,
            max_num_seqs: self.max_num_seqs,
            block_size: self.block_size,
            num_gpu_blocks: self
                .num_gpu_blocks_override
                .unwrap_or(SchedulerConfig::default().num_gpu_blocks),
            enable_prefix_caching: self.enable_prefix_caching,
            enable_kv_events: self
                .kv_events_config
                .as_ref()
                .is_some_and(KvEventsConfig::publishes),
            long_prefill_token_threshold: self.long_prefill_token_threshold,
            max_model_len: Some(self.max_model_len),
        }
    }

    /// The latency model the engine runs: zero with `zero_latency`, else `latency` scaled by
    /// `time_scale`.
    pub fn effective_latency(&self) -> LatencyModel {
        if self.zero_latency {
            LatencyModel::zero()
        } else {
            self.latency.scaled(self.time_scale)
        }
    }

    /// Checks what vLLM checks at start (see [`Scheduler::new`]).
    pub fn validate(&self) -> Result<(), SchedulerConfigError> {
        Scheduler::new(self.scheduler_config(), LatencyModel::zero()).map(|_| ())
    }
}

/// Why [`SimServer::start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is one vLLM refuses at start.
    #[error("invalid engine configuration: {0}")]
    Config(#[from] SchedulerConfigError),
    /// Listening failed.
    #[error("cannot listen: {0}")]
    Io(#[from] io::Error),
    /// The KV events publisher (`--kv-events-config`) could not start.
    #[error("cannot start KV events: {0}")]
    KvEvents(#[from] PublisherError),
    /// The tokenizer (`--tokenizer`, `--chat-template`) could not be loaded.
    #[error("cannot load the tokenizer: {0}")]
    Tokenizer(String),
}

impl From<StartError> for io::Error {
    fn from(e: StartError) -> io::Error {
        match e {
            StartError::Io(e) => e,
            StartError::Config(c) => io::Error::new(io::ErrorKind::InvalidInput, c.to_string()),
            StartError::KvEvents(k) => io::Error::other(k.to_string()),
            StartError::Tokenizer(t) => io::Error::new(io::ErrorKind::InvalidInput, t),
        }
    }
}

/// The simulated engine on its own thread. Dropping it stops it.
///
/// ```no_run
/// use inferrail_sim::server::{SimOptions, SimServer};
/// let mut opts = SimOptions::new("tiny");
/// opts.zero_latency = true;
/// let server = SimServer::start(opts).unwrap();
/// println!("serving on {}", server.url());
/// ```
pub struct SimServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
    kv_events: Option<Arc<KvEventPublisher>>,
}

impl std::fmt::Debug for SimServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimServer")
            .field("addr", &self.addr)
            .field("running", &self.thread.is_some())
            .finish()
    }
}

type Ready = mpsc::SyncSender<Result<SocketAddr, StartError>>;
type KvPublisher = Option<Arc<KvEventPublisher>>;

impl SimServer {
    /// Validates the options, then starts the engine thread; returns once it listens.
    pub fn start(opts: SimOptions) -> io::Result<SimServer> {
        Self::try_start(opts).map_err(io::Error::from)
    }

    /// As [`SimServer::start`], telling configuration refusals apart from I/O errors.
    pub fn try_start(opts: SimOptions) -> Result<SimServer, StartError> {
        if opts.served_model_name.is_empty() {
            return Err(StartError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no served model name",
            )));
        }
        if !(opts.time_scale.is_finite() && opts.time_scale > 0.0) {
            return Err(StartError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "time scale must be a finite number above 0, got {}",
                    opts.time_scale
                ),
            )));
        }
        let latency = opts.effective_latency();
        // Validate on this thread so the caller gets the refusal.
        Scheduler::new(opts.scheduler_config(), latency)?;
        let tokenizer = Arc::new(
            inferrail_shards::tokenize::load(
                opts.tokenizer.as_deref().unwrap_or("builtin:sim"),
                opts.chat_template.as_deref(),
            )
            .map_err(|e| StartError::Tokenizer(e.to_string()))?,
        );
        // Bind the KV event sockets here so their errors reach the caller.
        let kv_events = match &opts.kv_events_config {
            Some(c) if c.publishes() => {
                Some(Arc::new(KvEventPublisher::start(c.publisher_config())?))
            }
            _ => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let thread_stop = stop.clone();
        let thread_kv = kv_events.clone();
        let thread = thread::Builder::new()
            .name(format!("inferrail-sim:{}", opts.port))
            .spawn(move || run_thread(opts, thread_stop, ready_tx, thread_kv, tokenizer))?;
        match ready_rx.recv() {
            Ok(Ok(addr)) => Ok(SimServer {
                addr,
                stop,
                thread: Some(thread),
                kv_events,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(StartError::Io(io::Error::other(
                    "the engine thread ended before it listened",
                )))
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

    /// The KV event publisher (`--kv-events-config` with events on): its bound addresses
    /// (`local_addr`, `replay_addr`), subscriber and batch counts.
    pub fn kv_events(&self) -> Option<&KvEventPublisher> {
        self.kv_events.as_deref()
    }

    /// Closes the listener and every connection and joins the engine thread, then closes
    /// the KV event sockets (after sending what is queued). Idempotent.
    pub fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.store(true, Ordering::Release);
            let _ = thread.join();
        }
        drop(self.kv_events.take());
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run_thread(
    opts: SimOptions,
    stop: Arc<AtomicBool>,
    ready: Ready,
    kv: KvPublisher,
    tokenizer: Arc<ModelTokenizer>,
) {
    let runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .with_entries(1024)
        .enable_timer()
        .build();
    match runtime {
        Ok(mut rt) => rt.block_on(server_main(opts, stop, ready, kv, tokenizer)),
        Err(e) => {
            let _ = ready.send(Err(StartError::Io(e)));
        }
    }
}

/// The server thread's connection registry.
struct Local {
    ctx: http::Ctx,
    conns: RefCell<std::collections::HashMap<u64, Rc<conn::Conn>>>,
    next_conn: std::cell::Cell<u64>,
    tasks: std::cell::Cell<usize>,
}

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

fn adopt(local: &Rc<Local>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let id = local.next_conn.get();
    local.next_conn.set(id + 1);
    let c = Rc::new(conn::Conn::new());
    local.conns.borrow_mut().insert(id, c.clone());
    let (rd, wr) = stream.into_split();
    let guard = TaskGuard::new(local);
    let reader = c.clone();
    monoio::spawn(async move {
        let _guard = guard;
        conn::read_loop(&reader, rd).await;
    });
    let guard = TaskGuard::new(local);
    let l = local.clone();
    monoio::spawn(async move {
        let _guard = guard;
        http::serve(&l.ctx, &c, wr).await;
        c.close();
        l.conns.borrow_mut().remove(&id);
    });
}

async fn accept_loop(local: Rc<Local>, listener: TcpListener, handle: CancelHandle) {
    loop {
        match listener.cancelable_accept(handle.clone()).await {
            Ok((stream, _)) => adopt(&local, stream),
            Err(e) if e.raw_os_error() == Some(ECANCELED) => return,
            Err(_) => monoio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

fn fingerprint(model: &str) -> String {
    // FNV-1a of the model name, 8 hex digits (vLLM hashes the model path).
    let mut h: u32 = 0x811c_9dc5;
    for b in model.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("vllm-{VLLM_VERSION}-{h:08x}")
}

async fn server_main(
    opts: SimOptions,
    stop: Arc<AtomicBool>,
    ready: Ready,
    kv: KvPublisher,
    tokenizer: Arc<ModelTokenizer>,
) {
    let latency = opts.effective_latency();
    let config = opts.scheduler_config();
    let sched = match Scheduler::new(config.clone(), latency) {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let model = opts.served_model_name[0].clone();
    let cache = CacheConfigInfo::new(
        config.block_size as u32,
        config.num_gpu_blocks as u32,
        opts.max_model_len as u32,
    )
    .set(
        "enable_prefix_caching",
        if opts.enable_prefix_caching {
            "True"
        } else {
            "False"
        },
    );
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let metrics = VllmMetrics::new(model.clone(), 0, cache, created);
    let mut engine_core = core::Core::new(sched, metrics, opts.zero_latency);
    // vLLM 0.32 publishes the endpoints it bound when asked for port 0 (the node's address and
    // the port the OS chose); the simulator's node address is the one it serves HTTP on.
    let bound = kv.as_ref().map(|p| {
        let node = |a: SocketAddr| tcp_endpoint(SocketAddr::new(opts.host, a.port()));
        (p.local_addr().map(node), p.replay_addr().map(node))
    });
    if let Some(p) = kv {
        engine_core.set_kv_publisher(p);
    }
    let core = Rc::new(RefCell::new(engine_core));
    let bind_to = SocketAddr::new(opts.host, opts.port);
    let listener = match TcpListener::bind_with_config(
        bind_to,
        &ListenerOpts::new()
            .reuse_port(false)
            .reuse_addr(true)
            .backlog(4096),
    ) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let local = Rc::new(Local {
        ctx: http::Ctx {
            core: core.clone(),
            clock: RefCell::new(crate::clock::Clock::new()),
            http_metrics: RefCell::new(crate::prom::HttpMetrics::new(created)),
            server: ServerInfo {
                served_model_names: opts.served_model_name.clone(),
                max_model_len: opts.max_model_len as u32,
            },
            fingerprint: fingerprint(&model),
            prompt_tokens_details: opts.enable_prompt_tokens_details,
            request_id_headers: opts.enable_request_id_headers,
            seed: opts.seed,
            kv_event_sources: kv_event_sources(opts.kv_events_config.as_ref(), bound),
            tokenizer,
            enable_scale_out: opts.enable_scale_out,
            server_info: opts
                .server_dev_mode
                .then(|| Box::new((opts.clone(), info::SystemFacts::read()))),
        },
        conns: RefCell::new(std::collections::HashMap::new()),
        next_conn: std::cell::Cell::new(0),
        tasks: std::cell::Cell::new(0),
    });
    // Build the tokenizer's tables now rather than on the first request.
    inferrail_shards::builtin::BuiltinTokenizer::new().warm_up();
    let engine = monoio::spawn(core::run(core.clone()));
    let canceller = Canceller::new();
    let acceptor = monoio::spawn(accept_loop(local.clone(), listener, canceller.handle()));
    let _ = ready.send(Ok(addr));

    while !stop.load(Ordering::Acquire) {
        monoio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(canceller.cancel());
    acceptor.await;
    let conns: Vec<Rc<conn::Conn>> = local.conns.borrow().values().cloned().collect();
    for c in conns {
        c.close();
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while local.tasks.get() > 0 && Instant::now() < deadline {
        monoio::time::sleep(Duration::from_millis(1)).await;
    }
    {
        let mut c = core.borrow_mut();
        c.stopping = true;
        c.wake();
    }
    engine.await;
}

/// `tcp://IP:PORT`, an IPv6 address bracketed.
fn tcp_endpoint(a: SocketAddr) -> String {
    format!("tcp://{a}")
}

/// The `/kv_event_sources` body vLLM serves: rank 0's KV events config when it publishes over
/// ZMQ, `{}` otherwise.
fn kv_event_sources(
    config: Option<&crate::kv_events::KvEventsConfig>,
    bound: Option<(Option<String>, Option<String>)>,
) -> String {
    let (bound_pub, bound_replay) = bound.unwrap_or_default();
    // Port 0 is reported as the endpoint actually bound; any other endpoint as configured.
    let shown = |configured: &str, bound: Option<String>| match bound {
        Some(b) if configured.ends_with(":0") => b,
        _ => configured.to_string(),
    };
    let endpoints = config.map(|c| {
        (
            shown(&c.endpoint, bound_pub),
            c.replay_endpoint.as_deref().map(|r| shown(r, bound_replay)),
        )
    });
    let sources: Vec<crate::openai::KvEventSource<'_>> = config
        .zip(endpoints.as_ref())
        .filter(|(c, _)| c.publishes())
        .map(
            |(c, (endpoint, replay_endpoint))| crate::openai::KvEventSource {
                rank: 0,
                publisher: c.publisher_kind(),
                endpoint,
                replay_endpoint: replay_endpoint.as_deref(),
                buffer_steps: c.buffer_steps as u64,
                hwm: c.hwm as u64,
                max_queue_size: c.max_queue_size as u64,
                topic: &c.topic,
            },
        )
        .into_iter()
        .collect();
    crate::openai::kv_event_sources_body(&sources)
}
