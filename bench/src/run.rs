//! The run loop: builds the request, opens the initial pool, starts the pacer, and spawns one task
//! per arrival the moment it is due. A task takes a connection, writes the request, reads the
//! whole response and records the outcome; nothing a task does delays the next arrival.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use inferrail_wire::{push_header, Method};
use monoio::{FusionDriver, FusionRuntime, RuntimeBuilder};

use crate::args::LoadConfig;
use crate::pacer::{self, Due};
use crate::pool::{ConnectError, Pool};
use crate::report::{parse_usage, Outcome, Recorder, Report, RunFacts};
use crate::schedule::Schedule;

/// Why a run could not take place (errors of single requests are counted, not returned).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The target's host name does not resolve.
    #[error("cannot resolve {host}:{port}: {source}")]
    Resolve {
        /// Host name.
        host: String,
        /// Port.
        port: u16,
        /// Resolver error.
        source: io::Error,
    },
    /// The initial connections could not be opened: the target is not up.
    #[error("initial connections: {0}")]
    Connect(#[from] ConnectError),
    /// The monoio runtime did not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(io::Error),
    /// The pacer thread did not start.
    #[error("cannot start the pacer thread: {0}")]
    Pacer(io::Error),
    /// The histograms could not be created.
    #[error("histogram: {0}")]
    Histogram(#[from] hdrhistogram::CreationError),
}

/// What every request task shares.
struct RunState {
    /// Connections to the target.
    pool: Rc<Pool>,
    /// The complete requests: arrival `k` (in schedule order) writes `requests[k % len]`.
    requests: Vec<Bytes>,
    /// Its method (response framing depends on it).
    method: Method,
    /// Per-request time limit.
    timeout: Duration,
    /// Outcomes.
    recorder: RefCell<Recorder>,
    /// Requests started and not yet finished.
    in_flight: Cell<u64>,
    /// Most requests in flight at once.
    peak_in_flight: Cell<u64>,
    /// The first few protocol errors' causes.
    error_samples: RefCell<Vec<String>>,
}

/// Protocol errors whose cause the report keeps.
const ERROR_SAMPLES: usize = 5;

/// Runs one open-loop load run on a fresh single-threaded monoio runtime and returns its report.
pub fn run(config: &LoadConfig) -> Result<Report, LoadError> {
    let addr = resolve(config)?;
    let runtime = RuntimeBuilder::<FusionDriver>::new()
        .enable_timer()
        .build()
        .map_err(LoadError::Runtime)?;
    match runtime {
        FusionRuntime::Uring(mut rt) => rt.block_on(drive(config, addr, "io_uring")),
        FusionRuntime::Legacy(mut rt) => rt.block_on(drive(config, addr, "epoll")),
    }
}

fn resolve(config: &LoadConfig) -> Result<SocketAddr, LoadError> {
    resolve_target(&config.target)
}

/// The first socket address of the target's host and port.
pub(crate) fn resolve_target(t: &crate::args::Target) -> Result<SocketAddr, LoadError> {
    let err = |source| LoadError::Resolve {
        host: t.host.clone(),
        port: t.port,
        source,
    };
    (t.host.as_str(), t.port)
        .to_socket_addrs()
        .map_err(err)?
        .next()
        .ok_or_else(|| err(io::Error::new(io::ErrorKind::NotFound, "no address")))
}

/// The request bytes: a GET, or a JSON POST when a body is given, plus the extra headers.
pub fn build_request(config: &LoadConfig) -> (Bytes, Method) {
    request_with_body(config, config.body.as_deref())
}

/// Every request of a run: one per `--bodies-file` line (in file order), else the one request of
/// [`build_request`]. Arrival `k` (counted from 0 in schedule order, warmup included) sends
/// `requests[k % requests.len()]`: see [`request_for`].
pub fn build_requests(config: &LoadConfig) -> (Vec<Bytes>, Method) {
    if config.bodies.is_empty() {
        let (request, method) = build_request(config);
        return (vec![request], method);
    }
    let requests = config
        .bodies
        .iter()
        .map(|body| request_with_body(config, Some(body)).0)
        .collect();
    (requests, Method::Post)
}

/// The request arrival `k` sends: bodies rotate in file order, whatever the seed.
pub fn request_for(requests: &[Bytes], k: u64) -> Bytes {
    requests[(k % requests.len() as u64) as usize].clone()
}

fn request_with_body(config: &LoadConfig, body: Option<&[u8]>) -> (Bytes, Method) {
    http_request(&config.target, &config.target.path, &config.headers, body)
}

/// A complete request to `path` on `target`: a GET, or a JSON POST when a body is given, with
/// `host`, `content-type` and `content-length` unless `headers` set them, then `headers`.
pub(crate) fn http_request(
    target: &crate::args::Target,
    path: &str,
    headers: &[(String, String)],
    body: Option<&[u8]>,
) -> (Bytes, Method) {
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let (method, verb) = match body {
        Some(_) => (Method::Post, "POST"),
        None => (Method::Get, "GET"),
    };
    let mut out = Vec::with_capacity(256 + body.map_or(0, <[u8]>::len));
    out.extend_from_slice(format!("{verb} {path} HTTP/1.1\r\n").as_bytes());
    if !has("host") {
        push_header(&mut out, b"host", target.authority.as_bytes());
    }
    if let Some(body) = body {
        if !has("content-type") {
            push_header(&mut out, b"content-type", b"application/json");
        }
        push_header(
            &mut out,
            b"content-length",
            body.len().to_string().as_bytes(),
        );
    }
    for (k, v) in headers {
        push_header(&mut out, k.as_bytes(), v.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    if let Some(body) = body {
        out.extend_from_slice(body);
    }
    (Bytes::from(out), method)
}

async fn drive(
    config: &LoadConfig,
    addr: SocketAddr,
    driver: &'static str,
) -> Result<Report, LoadError> {
    let pool = Pool::new(addr, config.max_connections, config.max_idle);
    pool.prefill(config.connections).await?;
    let (requests, method) = build_requests(config);
    let state = Rc::new(RunState {
        pool: Rc::clone(&pool),
        requests,
        method,
        timeout: config.timeout,
        recorder: RefCell::new(Recorder::new()?),
        in_flight: Cell::new(0),
        peak_in_flight: Cell::new(0),
        error_samples: RefCell::new(Vec::new()),
    });

    let schedule = Schedule::new(
        config.arrivals,
        config.rate,
        config.warmup + config.duration,
        config.seed,
    );
    // A little slack so the first arrival is not late because the pacer thread was starting.
    let start = Instant::now() + Duration::from_millis(5);
    let arrivals = pacer::start(schedule, start, config.warmup).map_err(LoadError::Pacer)?;
    let mut batch = Vec::new();
    let mut k = 0u64;
    while arrivals.next_batch(&mut batch).await {
        for due in batch.drain(..) {
            state.recorder.borrow_mut().sent(due.measured);
            let n = state.in_flight.get() + 1;
            state.in_flight.set(n);
            state.peak_in_flight.set(state.peak_in_flight.get().max(n));
            let request = request_for(&state.requests, k);
            k += 1;
            monoio::spawn(one_request(Rc::clone(&state), due, request));
        }
    }
    // Every task ends within its timeout; wait for the stragglers.
    while state.in_flight.get() > 0 {
        monoio::time::sleep(Duration::from_millis(1)).await;
    }

    let report = state.recorder.borrow().report(RunFacts {
        url: config.target.url.clone(),
        rate: config.rate,
        duration: config.duration,
        warmup: config.warmup,
        arrivals: config.arrivals.name(),
        seed: config.seed,
        connections_opened: pool.opened(),
        connection_waits: pool.waits(),
        connections_expired: pool.expired(),
        peak_in_flight: state.peak_in_flight.get(),
        driver,
        error_samples: state.error_samples.take(),
    });
    Ok(report)
}

/// One scheduled request, from taking a connection to recording its outcome.
async fn one_request(state: Rc<RunState>, due: Due, request: Bytes) {
    let sent_at = Cell::new(None);
    let body = Cell::new(Vec::new());
    let outcome = monoio::time::timeout(state.timeout, attempt(&state, request, &sent_at, &body))
        .await
        .unwrap_or(Outcome::Timeout);
    let done = Instant::now();
    {
        // After `done`: reading the usage is not part of the latency.
        let usage = match outcome {
            Outcome::Ok => parse_usage(&body.take()),
            _ => None,
        };
        let mut rec = state.recorder.borrow_mut();
        rec.usage(due.measured, usage);
        if let Some(t) = sent_at.get() {
            rec.send_lag(due.measured, t.saturating_duration_since(due.at));
        }
        rec.finished(
            due.measured,
            outcome,
            done.saturating_duration_since(due.at),
        );
    }
    state.in_flight.set(state.in_flight.get().saturating_sub(1));
}

/// Takes a connection, sends, reads the response (a 2xx body is left in `body`). Dropped on
/// timeout, which closes the connection.
async fn attempt(
    state: &Rc<RunState>,
    request: Bytes,
    sent_at: &Cell<Option<Instant>>,
    body: &Cell<Vec<u8>>,
) -> Outcome {
    let mut lease = match state.pool.acquire().await {
        Ok(lease) => lease,
        Err(_) => return Outcome::Connect,
    };
    sent_at.set(Some(Instant::now()));
    match lease.exchange(request, state.method).await {
        Ok(response) => {
            if response.reusable {
                lease.release();
            }
            if (200..300).contains(&response.status) {
                body.set(response.body);
                Outcome::Ok
            } else {
                Outcome::Status(response.status)
            }
        }
        Err(e) => {
            let mut samples = state.error_samples.borrow_mut();
            if samples.len() < ERROR_SAMPLES {
                samples.push(e.to_string());
            }
            Outcome::Protocol
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse_load_args;

    #[test]
    fn request_bytes() {
        let args = [
            "--url",
            "http://127.0.0.1:9/v1/x",
            "--rate",
            "1",
            "--body",
            "{}",
            "--header",
            "x-a: 1",
        ];
        let cfg = parse_load_args(args.iter().map(|s| s.to_string()))
            .unwrap()
            .config;
        let (req, method) = build_request(&cfg);
        assert_eq!(method, Method::Post);
        assert_eq!(
            &req[..],
            b"POST /v1/x HTTP/1.1\r\nhost: 127.0.0.1:9\r\ncontent-type: application/json\r\n\
              content-length: 2\r\nx-a: 1\r\n\r\n{}"
        );
        let args = [
            "--url",
            "http://h/",
            "--rate",
            "1",
            "--header",
            "Host: other",
        ];
        let cfg = parse_load_args(args.iter().map(|s| s.to_string()))
            .unwrap()
            .config;
        let (req, method) = build_request(&cfg);
        assert_eq!(method, Method::Get);
        assert_eq!(&req[..], b"GET / HTTP/1.1\r\nHost: other\r\n\r\n");
        let (reqs, _) = build_requests(&cfg);
        assert_eq!(reqs, vec![req], "no bodies file: the one request");
    }

    #[test]
    fn bodies_rotate_in_file_order() {
        let mut cfg = parse_load_args(
            ["--url", "http://h:1/v", "--rate", "1"]
                .iter()
                .map(|s| s.to_string()),
        )
        .unwrap()
        .config;
        cfg.bodies = vec![b"{\"n\":0}".to_vec(), b"{\"n\":1}".to_vec(), b"[]".to_vec()];
        let (reqs, method) = build_requests(&cfg);
        assert_eq!(method, Method::Post);
        assert_eq!(reqs.len(), 3);
        assert_eq!(
            &reqs[2][..],
            b"POST /v HTTP/1.1\r\nhost: h:1\r\ncontent-type: application/json\r\n\
              content-length: 2\r\n\r\n[]"
        );
        let tail = |r: Bytes| {
            String::from_utf8(r.to_vec())
                .unwrap()
                .split("\r\n\r\n")
                .nth(1)
                .unwrap()
                .to_string()
        };
        let sent: Vec<String> = (0..7).map(|k| tail(request_for(&reqs, k))).collect();
        assert_eq!(
            sent,
            [
                "{\"n\":0}",
                "{\"n\":1}",
                "[]",
                "{\"n\":0}",
                "{\"n\":1}",
                "[]",
                "{\"n\":0}"
            ]
        );
    }
}
