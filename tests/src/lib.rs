//! Shared helpers for Inferrail's integration tests: start in-process engines and gateways on
//! 127.0.0.1, build configs, and talk HTTP with bounded timeouts.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod fleet_sim;

use inferrail_control::{ConfigSource, Gateway, GatewayOptions};
use inferrail_sim::{Behavior, EngineOptions, ScriptedEngine};
use inferrail_tools::client::{Connection, Response};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The model every test fleet serves.
pub const MODEL: &str = "sim-llama";

/// Starts `n` engines with `behavior`.
pub fn engines(n: usize, behavior: Behavior) -> Vec<ScriptedEngine> {
    (0..n)
        .map(|_| {
            ScriptedEngine::start(EngineOptions {
                behavior: behavior.clone(),
                ..EngineOptions::new(MODEL)
            })
            .expect("engine starts")
        })
        .collect()
}

/// A gateway config: `extra` is YAML appended at top level (e.g. a `retry:` section), `server`
/// is extra lines inside `server:` (indented two spaces), replicas are `engine-<i>`.
pub fn config_yaml(engines: &[ScriptedEngine], policy: &str, server: &str, extra: &str) -> String {
    let mut y = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 2\n{server}\
         models:\n  - name: {MODEL}\n    aliases: [llama]\n    policy: {policy}\nrouting:\n  seed: 7\n{extra}replicas:\n"
    );
    for (i, e) in engines.iter().enumerate() {
        y.push_str(&format!(
            "  - id: engine-{i}\n    url: {}\n    models: [{MODEL}]\n",
            e.url()
        ));
    }
    y
}

/// A gateway that shuts down (gracefully, then waits) when dropped.
pub struct TestGateway {
    gateway: Option<Gateway>,
    /// Client listen address.
    pub addr: SocketAddr,
    /// Admin address.
    pub admin: SocketAddr,
}

impl TestGateway {
    /// Starts a gateway from YAML text.
    pub fn start(yaml: &str) -> TestGateway {
        let source =
            ConfigSource::from_yaml(yaml).unwrap_or_else(|e| panic!("config: {e}\n{yaml}"));
        TestGateway::start_source(source, GatewayOptions::default())
    }

    /// Starts a gateway from a config file (reloads re-read it) with `options`.
    pub fn start_file(path: &std::path::Path, options: GatewayOptions) -> TestGateway {
        let source = ConfigSource::load(path).unwrap_or_else(|e| panic!("config: {e}"));
        TestGateway::start_source(source, options)
    }

    /// Starts a gateway from a config source with `options`.
    pub fn start_source(source: ConfigSource, options: GatewayOptions) -> TestGateway {
        let gateway = Gateway::start_with(source, options).expect("gateway starts");
        TestGateway {
            addr: gateway.listen_addr,
            admin: gateway.admin_addr,
            gateway: Some(gateway),
        }
    }

    /// Starts the graceful shutdown without waiting.
    pub fn begin_shutdown(&self) {
        if let Some(g) = &self.gateway {
            g.shutdown();
        }
    }

    /// Shuts down and waits for every thread.
    pub fn stop(mut self) {
        if let Some(g) = self.gateway.take() {
            g.shutdown();
            g.wait();
        }
    }

    /// An admin API call: method, path, JSON body; returns status and parsed JSON (Null when the
    /// body is not JSON).
    pub fn admin(&self, method: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
        let headers: &[(&str, &str)] = &[("content-type", "application/json")];
        let r = inferrail_tools::client::call(
            self.admin,
            method,
            path,
            headers,
            body.map(str::as_bytes),
        )
        .expect("admin call");
        let json = serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null);
        (r.status, json)
    }

    /// The merged /metrics text.
    pub fn metrics(&self) -> String {
        inferrail_tools::client::call(self.admin, "GET", "/metrics", &[], None)
            .expect("metrics")
            .text()
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(g) = self.gateway.take() {
            g.shutdown();
            g.wait();
        }
    }
}

/// A small chat request body naming `model`.
pub fn chat(model: &str, stream: bool) -> Vec<u8> {
    format!(
        r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}],"max_tokens":4,"stream":{stream}}}"#
    )
    .into_bytes()
}

/// Opens a client connection with a 10 s read timeout.
pub fn connect(addr: SocketAddr) -> Connection {
    Connection::open(addr, Duration::from_secs(10)).expect("connect to gateway")
}

/// POSTs a chat request on a fresh connection.
pub fn post_chat(addr: SocketAddr, body: &[u8]) -> Response {
    connect(addr)
        .call("POST", "/v1/chat/completions", &[], Some(body))
        .expect("response")
}

/// Polls `cond` every 5 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

/// The value of a metrics sample line starting with `prefix` (exact labels), if present.
pub fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix) && l[prefix.len()..].starts_with(' '))
        .and_then(|l| l[prefix.len()..].trim().parse().ok())
}

/// The path of the built `inferrail` binary (the workspace build puts it next to the test's
/// deps directory).
pub fn inferrail_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test exe path");
    let dir = exe.parent().and_then(|p| p.parent()).expect("target dir");
    let bin = dir.join("inferrail");
    assert!(
        bin.exists(),
        "{} missing: build the workspace first (cargo build --workspace)",
        bin.display()
    );
    bin
}

pub use inferrail_sim::Behavior as EngineBehavior;

/// One engine and a round-robin gateway in front of it, kept for the rest of the test process
/// (property tests reuse it across cases; it is never dropped, so no teardown runs inside a
/// thread-local destructor, where cross-thread wake-ups are not reliable).
pub fn shared_fleet() -> &'static (Vec<ScriptedEngine>, TestGateway) {
    let e = engines(1, Behavior::Instant);
    let gw = TestGateway::start(&config_yaml(&e, "round_robin", "", ""));
    Box::leak(Box::new((e, gw)))
}

/// One response seen by [`paced_load`].
#[derive(Debug, Clone)]
pub struct Seen {
    /// Request number.
    pub index: usize,
    /// Status (0 when the connection failed or the response was cut).
    pub status: u16,
    /// `x-inferrail-replica`.
    pub replica: Option<String>,
    /// `x-inferrail-policy`.
    pub policy: Option<String>,
    /// The body was complete (a streamed one ended with `data: [DONE]`).
    pub complete: bool,
    /// When the response ended.
    pub at: Instant,
}

/// Sends `total` chat requests at about `rate` per second over `threads` keep-alive connections
/// (each thread on its own fixed cadence; a thread whose response is late sends its next one at
/// once). Every other request streams when `mixed`. `headers(i)` gives request `i`'s extra
/// headers. Bounded: every response has a 10 s read timeout.
pub fn paced_load(
    addr: SocketAddr,
    total: usize,
    rate: f64,
    threads: usize,
    mixed: bool,
    headers: impl Fn(usize) -> Vec<(String, String)> + Sync,
) -> Vec<Seen> {
    let threads = threads.max(1);
    let period = Duration::from_secs_f64(threads as f64 / rate.max(1.0));
    let start = Instant::now();
    let headers = &headers;
    let mut out: Vec<Seen> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut seen = Vec::new();
                    let mut conn: Option<Connection> = None;
                    for (k, index) in (t..total).step_by(threads).enumerate() {
                        let due = start + period * k as u32 + period * t as u32 / threads as u32;
                        if let Some(wait) = due.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                        let stream = mixed && index % 2 == 1;
                        let body = chat(MODEL, stream);
                        let h = headers(index);
                        let h: Vec<(&str, &str)> =
                            h.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
                        let c = match conn.take() {
                            Some(c) => Some(c),
                            None => Connection::open(addr, Duration::from_secs(10)).ok(),
                        };
                        let result = c.and_then(|mut c| {
                            let r = c.call("POST", "/v1/chat/completions", &h, Some(&body)).ok();
                            r.map(|r| (c, r))
                        });
                        match result {
                            Some((c, r)) => {
                                let complete = if stream {
                                    r.text().contains("data: [DONE]")
                                } else {
                                    r.text().contains("\"choices\"")
                                };
                                if r.header("connection") != Some("close") {
                                    conn = Some(c);
                                }
                                seen.push(Seen {
                                    index,
                                    status: r.status,
                                    replica: r.header("x-inferrail-replica").map(str::to_string),
                                    policy: r.header("x-inferrail-policy").map(str::to_string),
                                    complete,
                                    at: Instant::now(),
                                });
                            }
                            None => seen.push(Seen {
                                index,
                                status: 0,
                                replica: None,
                                policy: None,
                                complete: false,
                                at: Instant::now(),
                            }),
                        }
                    }
                    seen
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    out.sort_by_key(|s| s.index);
    out
}
