//! A fleet: N fresh `inferrail-sim` engines and one front in front of them (an `inferrail serve`
//! gateway, or a peer router: see [`super::peers`]), all on 127.0.0.1 ports found free by binding
//! port 0, all killed when the fleet is dropped (also while a panic unwinds) or when the harness
//! is stopped by a signal.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use inferrail_config::CostModelParams;

use super::peers::{self, Peer, PeerPaths};
use super::HarnessError;

/// The model name every simulator serves.
pub const MODEL: &str = "sim-llama";
/// Tokens per KV block, simulators and gateway alike.
pub const BLOCK_SIZE: u32 = 16;
/// How long a process gets to answer its health check.
const UP_TIMEOUT: Duration = Duration::from_secs(30);

/// Ports this process already handed out (so concurrent fleets never get the same one).
static TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A free 127.0.0.1 port: bind port 0, read the port, release it.
pub fn free_port() -> Result<u16, HarnessError> {
    for _ in 0..64 {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map_err(HarnessError::Port)?
            .port();
        let mut taken = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
        if taken.get_or_insert_with(HashSet::new).insert(port) {
            return Ok(port);
        }
    }
    Err(HarnessError::Port(std::io::Error::other(
        "the kernel keeps handing out ports already in use by this harness",
    )))
}

/// Every child of every live [`ChildGuard`], by entry id, so that a signal can stop them all
/// before the harness exits ([`kill_every_child`]); `stopping` is set once that has happened.
struct Live {
    children: BTreeMap<u64, (String, Child)>,
    stopping: bool,
}

static LIVE: Mutex<Live> = Mutex::new(Live {
    children: BTreeMap::new(),
    stopping: false,
});
static NEXT_CHILD: AtomicU64 = AtomicU64::new(0);

fn live() -> MutexGuard<'static, Live> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

fn kill_and_reap(children: impl IntoIterator<Item = Child>) -> usize {
    let mut children: Vec<Child> = children.into_iter().collect();
    for child in &mut children {
        let _ = child.kill();
    }
    for child in &mut children {
        let _ = child.wait();
    }
    children.len()
}

/// Kills (SIGKILL) and reaps every child any guard holds, and from then on every child pushed
/// to a guard; returns how many were running. What the harness does on SIGTERM, SIGINT or
/// SIGHUP before it exits ([`super::signals`]).
pub fn kill_every_child() -> usize {
    let children = {
        let mut live = live();
        live.stopping = true;
        std::mem::take(&mut live.children)
    };
    kill_and_reap(children.into_values().map(|(_, child)| child))
}

/// Child processes that are killed (and reaped) when this guard is dropped, or by
/// [`kill_every_child`] when the harness is stopped by a signal.
#[derive(Debug, Default)]
pub struct ChildGuard {
    ids: Vec<u64>,
}

impl ChildGuard {
    /// Takes ownership of a started child (killed at once if the harness is stopping).
    pub fn push(&mut self, name: String, child: Child) {
        let mut live = live();
        if live.stopping {
            drop(live);
            kill_and_reap([child]);
            return;
        }
        let id = NEXT_CHILD.fetch_add(1, Ordering::Relaxed);
        live.children.insert(id, (name, child));
        self.ids.push(id);
    }

    /// Process ids of the children.
    pub fn pids(&self) -> Vec<u32> {
        let live = live();
        self.ids
            .iter()
            .filter_map(|id| live.children.get(id))
            .map(|(_, c)| c.id())
            .collect()
    }

    /// Fails when the named child has exited (or was killed by a signal's stop).
    fn check_alive(&mut self, name: &str, log: &Path) -> Result<(), HarnessError> {
        let mut live = live();
        let mut found = false;
        for id in &self.ids {
            let Some((n, child)) = live.children.get_mut(id) else {
                continue;
            };
            if n != name {
                continue;
            }
            found = true;
            if let Ok(Some(status)) = child.try_wait() {
                return Err(HarnessError::Exited {
                    what: name.to_string(),
                    status: status.to_string(),
                    log: log.to_path_buf(),
                });
            }
        }
        if !found && live.stopping {
            return Err(HarnessError::Exited {
                what: name.to_string(),
                status: "killed: the harness is stopping".into(),
                log: log.to_path_buf(),
            });
        }
        Ok(())
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let mine: Vec<Child> = {
            let mut live = live();
            self.ids
                .iter()
                .filter_map(|id| live.children.remove(id))
                .map(|(_, child)| child)
                .collect()
        };
        kill_and_reap(mine);
    }
}

/// What a fleet is made of.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// Directory holding `inferrail` and `inferrail-sim`.
    pub bin_dir: PathBuf,
    /// Simulators.
    pub replicas: usize,
    /// The gateway's policy, or a peer (`peer:sglang.cache_aware`, ...) to put in front instead.
    pub policy: String,
    /// `kv_capacity_blocks` for every replica in the gateway's config, if any.
    pub kv_capacity_blocks: Option<u64>,
    /// Extra simulator flags.
    pub sim_args: Vec<String>,
    /// The simulators' and the gateway's tokenizer; `None` is `builtin:sim`.
    pub tokenizer: Option<String>,
    /// The gateway's `routing.cost_model`; `None` leaves the config defaults.
    pub cost_model: Option<CostModelParams>,
    /// The gateway's `routing.bounded_load_floor`; `None` leaves the config default.
    pub bounded_load_floor: Option<u64>,
    /// Further `routing:` settings, each written as `key: value` (JSON values are YAML).
    pub routing: BTreeMap<String, serde_json::Value>,
    /// Where the processes' logs and the gateway config go.
    pub work_dir: PathBuf,
    /// Where peers are installed (used only when `policy` names one).
    pub peers: PeerPaths,
}

/// A running fleet; dropping it kills every process.
#[derive(Debug)]
pub struct Fleet {
    guard: ChildGuard,
    /// The port clients send to: the gateway's data port, or the peer's.
    pub front_port: u16,
    /// The gateway's admin port (`/metrics`, `/admin/replicas`); `None` for a peer.
    pub admin_port: Option<u16>,
    /// The simulators' ports, replica `sim-i` at index i.
    pub sim_ports: Vec<u16>,
}

/// Fails when `bin_dir/name` does not exist.
pub fn binary(bin_dir: &Path, name: &str) -> Result<PathBuf, HarnessError> {
    let path = bin_dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::MissingBinary(path))
    }
}

impl Fleet {
    /// Starts the simulators, waits for their `/health`, writes the gateway's YAML, starts the
    /// gateway and waits until `/admin/replicas` shows every replica routable.
    pub fn start(cfg: &FleetConfig) -> Result<Fleet, HarnessError> {
        let sim_bin = binary(&cfg.bin_dir, "inferrail-sim")?;
        let gw_bin = binary(&cfg.bin_dir, "inferrail")?;
        std::fs::create_dir_all(&cfg.work_dir).map_err(|e| io_err(&cfg.work_dir, e))?;
        let mut guard = ChildGuard::default();
        let mut sim_ports = Vec::with_capacity(cfg.replicas);
        for i in 0..cfg.replicas {
            let port = free_port()?;
            let cmd = sim_command(&sim_bin, port, i, &cfg.sim_args, cfg.tokenizer.as_deref());
            let name = format!("sim-{i}");
            guard.push(name.clone(), spawn(cmd, &name, &cfg.work_dir)?);
            sim_ports.push(port);
        }
        for (i, port) in sim_ports.iter().enumerate() {
            let name = format!("sim-{i}");
            let log = cfg.work_dir.join(format!("{name}.log"));
            wait_until(&mut guard, &name, &log, *port, |p| health(p, "/health"))?;
        }
        let front_port = free_port()?;
        let admin_port = match Peer::parse(&cfg.policy) {
            Some(peer) => {
                let peer = peer.map_err(HarnessError::Spec)?;
                peers::start(
                    &peer,
                    &cfg.peers,
                    &sim_ports,
                    front_port,
                    &cfg.work_dir,
                    &mut guard,
                )?;
                let log = cfg.work_dir.join("front.log");
                // The SGLang router answers /health before its workers are registered, and
                // nginx before its upstreams answer: ready means a real request routes.
                wait_until(&mut guard, "front", &log, front_port, probe_routes)?;
                None
            }
            None => {
                let admin_port = free_port()?;
                let yaml = gateway_yaml(cfg, front_port, admin_port, &sim_ports);
                let config = cfg.work_dir.join("gateway.yaml");
                std::fs::write(&config, yaml).map_err(|e| io_err(&config, e))?;
                let mut cmd = Command::new(&gw_bin);
                cmd.arg("serve").arg("--config").arg(&config);
                guard.push("gateway".into(), spawn(cmd, "gateway", &cfg.work_dir)?);
                let log = cfg.work_dir.join("gateway.log");
                wait_until(&mut guard, "gateway", &log, admin_port, |p| {
                    health(p, "/health")
                })?;
                wait_until(&mut guard, "gateway", &log, front_port, |p| {
                    health(p, "/health")
                })?;
                let replicas = cfg.replicas;
                wait_until(&mut guard, "gateway", &log, admin_port, |p| {
                    all_routable(p, replicas)
                })?;
                Some(admin_port)
            }
        };
        Ok(Fleet {
            guard,
            front_port,
            admin_port,
            sim_ports,
        })
    }

    /// Process ids (simulators, then the front).
    pub fn pids(&self) -> Vec<u32> {
        self.guard.pids()
    }

    /// Every port the fleet listens on.
    pub fn ports(&self) -> Vec<u16> {
        let mut all = self.sim_ports.clone();
        all.push(self.front_port);
        all.extend(self.admin_port);
        all
    }

    /// Reads the counters a run reports on: the engines' prefix cache counters (summed), each
    /// engine's finished requests, and (with a gateway in front) the gateway's finished requests
    /// per replica.
    pub fn scrape(&self) -> Result<Counters, HarnessError> {
        let mut counters = Counters::default();
        for (i, port) in self.sim_ports.iter().enumerate() {
            let text = get_ok(*port, "/metrics")?;
            counters.prefix_cache_hits += counter_sum(&text, "vllm:prefix_cache_hits_total");
            counters.prefix_cache_queries += counter_sum(&text, "vllm:prefix_cache_queries_total");
            counters.engine_requests.insert(
                format!("sim-{i}"),
                counter_sum(&text, "vllm:request_success_total"),
            );
        }
        if let Some(admin) = self.admin_port {
            let text = get_ok(admin, "/metrics")?;
            counters.requests_by_replica = by_label(&text, "inferrail_requests_total", "replica");
            counters.requests_by_replica.remove("(none)");
        }
        Ok(counters)
    }
}

/// Counters read from a fleet at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// `vllm:prefix_cache_hits_total`, summed over the engines (tokens).
    pub prefix_cache_hits: f64,
    /// `vllm:prefix_cache_queries_total`, summed over the engines (tokens).
    pub prefix_cache_queries: f64,
    /// `inferrail_requests_total` by replica (every model and outcome); empty for a peer.
    pub requests_by_replica: BTreeMap<String, f64>,
    /// `vllm:request_success_total` of each engine (`sim-i`), summed over its labels.
    pub engine_requests: BTreeMap<String, f64>,
}

/// The command that starts simulator `seed` on `port`: the model every fleet serves, the
/// endpoints peers ask for, `tokenizer` when given, then `sim_args`.
pub(super) fn sim_command(
    sim_bin: &Path,
    port: u16,
    seed: usize,
    sim_args: &[String],
    tokenizer: Option<&str>,
) -> Command {
    let mut cmd = Command::new(sim_bin);
    cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--served-model-name",
            MODEL,
            "--enable-prompt-tokens-details",
        ])
        .args(["--seed", &seed.to_string()])
        // What peers ask engines for: the render endpoints (the vLLM router's
        // cache_aware) and /server_info (the SGLang router), both as vLLM serves them.
        .arg("--enable-scale-out")
        .env("VLLM_SERVER_DEV_MODE", "1");
    if let Some(t) = tokenizer {
        cmd.args(["--tokenizer", t]);
    }
    cmd.args(sim_args);
    cmd
}

fn io_err(path: &Path, source: std::io::Error) -> HarnessError {
    HarnessError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Starts `cmd` with stdout and stderr going to `dir/name.log`.
pub(super) fn spawn(mut cmd: Command, name: &str, dir: &Path) -> Result<Child, HarnessError> {
    let log_path = dir.join(format!("{name}.log"));
    let log = File::create(&log_path).map_err(|e| io_err(&log_path, e))?;
    let err = log.try_clone().map_err(|e| io_err(&log_path, e))?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(err));
    cmd.spawn().map_err(|source| HarnessError::Spawn {
        what: name.to_string(),
        source,
    })
}

pub(super) fn wait_until(
    guard: &mut ChildGuard,
    name: &str,
    log: &Path,
    port: u16,
    ready: impl Fn(u16) -> bool,
) -> Result<(), HarnessError> {
    let start = Instant::now();
    loop {
        if ready(port) {
            return Ok(());
        }
        guard.check_alive(name, log)?;
        if start.elapsed() > UP_TIMEOUT {
            return Err(HarnessError::NotUp {
                what: name.to_string(),
                port,
                secs: UP_TIMEOUT.as_secs(),
                log: log.to_path_buf(),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(super) fn health(port: u16, path: &str) -> bool {
    matches!(http_get(port, path), Ok((200, _)))
}

/// True when a one-token completion through the front on `port` returns 200.
fn probe_routes(port: u16) -> bool {
    let body = format!(r#"{{"model":"{MODEL}","prompt":"ping","max_tokens":1}}"#);
    matches!(http_post(port, "/v1/completions", &body), Ok((200, _)))
}

fn all_routable(port: u16, replicas: usize) -> bool {
    let Ok((200, body)) = http_get(port, "/admin/replicas") else {
        return false;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else {
        return false;
    };
    let rows = v["replicas"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    rows.len() == replicas && rows.iter().all(|r| r["routable"] == true)
}

/// The gateway's YAML for a fleet.
pub fn gateway_yaml(cfg: &FleetConfig, port: u16, admin: u16, sims: &[u16]) -> String {
    // JSON is YAML: the cost model and the tokenizer path go in as JSON values.
    let cost_model = cfg
        .cost_model
        .and_then(|c| serde_json::to_string(&c).ok())
        .map(|c| format!("  cost_model: {c}\n"))
        .unwrap_or_default();
    let floor = cfg
        .bounded_load_floor
        .map(|f| format!("  bounded_load_floor: {f}\n"))
        .unwrap_or_default();
    let extra: String = cfg
        .routing
        .iter()
        .map(|(k, v)| format!("  {k}: {v}\n"))
        .collect();
    let tokenizer = serde_json::Value::from(cfg.tokenizer.as_deref().unwrap_or("builtin:sim"));
    let mut y = format!(
        "server:\n  listen: 127.0.0.1:{port}\n  admin_listen: 127.0.0.1:{admin}\n  cores: 1\n  \
         request_timeout: 120s\nrouting:\n  seed: 42\n{floor}{extra}{cost_model}models:\n  - name: {MODEL}\n    \
         policy: {}\n    tokenizer: {tokenizer}\n    block_size: {BLOCK_SIZE}\nreplicas:\n",
        cfg.policy
    );
    for (i, p) in sims.iter().enumerate() {
        let _ = write!(
            y,
            "  - id: sim-{i}\n    url: http://127.0.0.1:{p}\n    models: [{MODEL}]\n"
        );
        if let Some(blocks) = cfg.kv_capacity_blocks {
            let _ = writeln!(y, "    kv_capacity_blocks: {blocks}");
        }
    }
    y
}

/// GET `path` on 127.0.0.1:`port`; the body when the status is 200.
fn get_ok(port: u16, path: &str) -> Result<String, HarnessError> {
    let url = format!("http://127.0.0.1:{port}{path}");
    match http_get(port, path) {
        Ok((200, body)) => Ok(body),
        Ok((status, _)) => Err(HarnessError::Http {
            url,
            reason: format!("status {status}"),
        }),
        Err(e) => Err(HarnessError::Http {
            url,
            reason: e.to_string(),
        }),
    }
}

/// A minimal HTTP/1.1 GET (`Connection: close`, chunked bodies decoded): (status, body).
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    http_exchange(
        port,
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"),
    )
}

/// A minimal HTTP/1.1 POST of a JSON body, as [`http_get`].
pub fn http_post(port: u16, path: &str, json: &str) -> std::io::Result<(u16, String)> {
    http_exchange(
        port,
        format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{json}",
            json.len()
        ),
    )
}

fn http_exchange(port: u16, request: String) -> std::io::Result<(u16, String)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

/// Sum of every sample of a Prometheus metric (any labels).
pub fn counter_sum(text: &str, name: &str) -> f64 {
    samples(text, name).map(|(_, v)| v).sum()
}

/// Samples of a metric summed by one label's value.
pub fn by_label(text: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let key = format!("{label}=\"");
    for (labels, v) in samples(text, name) {
        if let Some(start) = labels.find(&key) {
            let rest = &labels[start + key.len()..];
            let value = rest.split('"').next().unwrap_or_default();
            *out.entry(value.to_string()).or_insert(0.0) += v;
        }
    }
    out
}

fn samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => r.rsplit_once('}')?,
            None if rest.starts_with(' ') => ("", rest),
            None => return None,
        };
        let v = value.split_whitespace().next()?.parse::<f64>().ok()?;
        Some((labels, v))
    })
}
