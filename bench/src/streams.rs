//! `inferrail-bench streams`: N concurrent SSE streams over N connections, released at once.
//!
//! All connections are opened first (at most `--connect-concurrency` connects in flight, so the
//! target's accept backlog is not what is measured), then every stream's request is written at
//! the same instant `t0` and each response is followed incrementally, chunk by chunk and event by
//! event, to `data: [DONE]`. Times count from `t0`: time to first event (TTFT as a client sees it)
//! and time to `[DONE]` (duration). The wall time is `t0` to the end of the last stream.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use inferrail_wire::Method;
use monoio::{FusionDriver, FusionRuntime, RuntimeBuilder};
use serde::Serialize;

use crate::args::{
    body_file_arg, header_arg, invalid, parse_duration, parse_url, split_flag, ArgsError,
    LoadConfig, Target,
};
use crate::conn::{Conn, SseResponse};
use crate::schedule::Arrivals;
use crate::sse::SseSummary;

/// Usage text for `inferrail-bench streams`.
pub const STREAMS_USAGE: &str = "\
usage: inferrail-bench streams --url http://HOST:PORT/PATH --streams N --body-file F [options]

N concurrent SSE streams over N connections: all connections are opened first, then every
request is written at the same instant t0 and each response is parsed incrementally to
`data: [DONE]`. A stream completes when it got 200, a well-formed event stream and [DONE].

  --url URL                  target (http only)
  --streams N                streams (and connections) (required)
  --body-file F              POST this file as application/json (a request with \"stream\": true)
  --body STRING              POST this string as application/json
  --header 'k: v'            extra request header (repeatable)
  --connect-concurrency N    connects in flight at once while opening (default 64)
  --connect-timeout D        per connection (default 10s)
  --timeout D                per stream, from t0 (default 120s)
  --json OUT.json            also write the report as JSON
";

/// Everything one streams run needs.
#[derive(Debug, Clone)]
pub struct StreamsConfig {
    /// Where requests go.
    pub target: Target,
    /// Concurrent streams, one connection each.
    pub streams: usize,
    /// Request body (a JSON POST).
    pub body: Vec<u8>,
    /// Extra request headers, in order.
    pub headers: Vec<(String, String)>,
    /// Connects in flight at once while opening the connections.
    pub connect_concurrency: usize,
    /// Time limit of one connect.
    pub connect_timeout: Duration,
    /// Time limit of one stream, from `t0`.
    pub timeout: Duration,
}

/// The parsed `streams` command line.
#[derive(Debug, Clone)]
pub struct StreamsArgs {
    /// The run itself.
    pub config: StreamsConfig,
    /// Where to write the JSON report, if anywhere.
    pub json: Option<PathBuf>,
}

/// Parses the arguments that follow `streams`.
pub fn parse_streams_args<I>(args: I) -> Result<StreamsArgs, ArgsError>
where
    I: IntoIterator<Item = String>,
{
    let mut url = None;
    let mut streams = None;
    let mut body = None;
    let mut headers = Vec::new();
    let mut connect_concurrency = 64;
    let mut connect_timeout = Duration::from_secs(10);
    let mut timeout = Duration::from_secs(120);
    let mut json = None;
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Err(ArgsError::Help);
        }
        let (flag, inline) = split_flag(flag);
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| ArgsError::MissingValue(flag.clone()))
        };
        let count = |v: String| -> Result<usize, ArgsError> {
            match v.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(invalid(&flag, "must be a positive count")),
            }
        };
        match flag.as_str() {
            "--url" => url = Some(parse_url(&value()?)?),
            "--streams" => streams = Some(count(value()?)?),
            "--connect-concurrency" => connect_concurrency = count(value()?)?,
            "--body" => body = Some(value()?.into_bytes()),
            "--body-file" => body = Some(body_file_arg(&flag, &value()?)?),
            "--header" => headers.push(header_arg(&flag, &value()?)?),
            "--connect-timeout" => {
                connect_timeout = parse_duration(&value()?).map_err(|e| invalid(&flag, e))?
            }
            "--timeout" => timeout = parse_duration(&value()?).map_err(|e| invalid(&flag, e))?,
            "--json" => json = Some(PathBuf::from(value()?)),
            _ => return Err(ArgsError::UnknownFlag(flag)),
        }
    }
    let target = url.ok_or(ArgsError::Required("--url"))?;
    let streams = streams.ok_or(ArgsError::Required("--streams"))?;
    let body = body.ok_or(ArgsError::Required("--body-file or --body"))?;
    if timeout.is_zero() || connect_timeout.is_zero() {
        return Err(invalid("--timeout", "must be above zero"));
    }
    Ok(StreamsArgs {
        config: StreamsConfig {
            target,
            streams,
            body,
            headers,
            connect_concurrency,
            connect_timeout,
            timeout,
        },
        json,
    })
}

/// Why a streams run could not take place (failures of single streams are counted instead).
#[derive(Debug, thiserror::Error)]
pub enum StreamsError {
    /// The target's host name does not resolve.
    #[error("cannot resolve {0}: {1}")]
    Resolve(String, io::Error),
    /// Not a single connection could be opened: the target is not up.
    #[error("no connection could be opened: {0}")]
    NoConnection(io::Error),
    /// The monoio runtime did not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(io::Error),
    /// The histograms could not be created.
    #[error("histogram: {0}")]
    Histogram(#[from] hdrhistogram::CreationError),
}

/// Streams that did not complete, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StreamErrors {
    /// The connection could not be opened.
    pub connect: u64,
    /// The stream did not end within `--timeout`.
    pub timeout: u64,
    /// A complete response with a non-2xx status.
    pub status: u64,
    /// The exchange broke: bad framing, reset, or closed before the body ended.
    pub protocol: u64,
    /// A 200 whose event stream lacked `[DONE]`, carried an error event or events after `[DONE]`.
    pub incomplete: u64,
}

impl StreamErrors {
    /// All errors together.
    pub fn total(&self) -> u64 {
        self.connect + self.timeout + self.status + self.protocol + self.incomplete
    }
}

/// Percentiles in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Smallest.
    pub min: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            min: h.min(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

/// The result of one streams run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamsReport {
    /// Target URL.
    pub url: String,
    /// Streams attempted.
    pub streams: u64,
    /// Connections open at `t0`.
    pub connections: u64,
    /// Time to open the connections, seconds (before `t0`, not part of the wall time).
    pub connect_s: f64,
    /// `t0` to the end of the last stream (whatever its outcome), seconds.
    pub wall_s: f64,
    /// Streams that completed: 200, well-formed events, `[DONE]`.
    pub completed: u64,
    /// The others, by kind.
    pub errors: StreamErrors,
    /// Completed streams that carried a usage chunk.
    pub with_usage: u64,
    /// Completed streams that carried a finish reason.
    pub with_finish: u64,
    /// SSE events received over all streams, `[DONE]` included.
    pub events: u64,
    /// Completed streams per second of wall time.
    pub streams_per_s: f64,
    /// `t0` to the moment the stream's request write began, µs (the generator's own spread).
    pub send_lag_us: Percentiles,
    /// `t0` to the first event of each completed stream, µs.
    pub ttft_us: Percentiles,
    /// `t0` to `[DONE]` of each completed stream, µs.
    pub duration_us: Percentiles,
    /// First event to `[DONE]` of each completed stream, µs.
    pub streaming_us: Percentiles,
    /// Most streams between their first event and `[DONE]` at the same time: how many the
    /// target actually ran at once (the rest waited in its queue).
    pub peak_concurrent_streams: u64,
    /// The monoio driver that ran the generator (`io_uring` or `epoll`).
    pub driver: &'static str,
}

impl fmt::Display for StreamsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.errors;
        let ms = |p: &Percentiles| {
            format!(
                "p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}",
                p.p50 as f64 / 1e3,
                p.p90 as f64 / 1e3,
                p.p99 as f64 / 1e3,
                p.max as f64 / 1e3
            )
        };
        writeln!(f, "target      {}  (driver {})", self.url, self.driver)?;
        writeln!(
            f,
            "streams     {}  connections {} (opened in {:.2}s)",
            self.streams, self.connections, self.connect_s
        )?;
        writeln!(
            f,
            "completed   {}  with usage {}  with finish {}  events {}",
            self.completed, self.with_usage, self.with_finish, self.events
        )?;
        writeln!(
            f,
            "errors      {} (connect {}, timeout {}, status {}, protocol {}, incomplete {})",
            e.total(),
            e.connect,
            e.timeout,
            e.status,
            e.protocol,
            e.incomplete
        )?;
        writeln!(
            f,
            "wall        {:.3}s  ({:.0} streams/s), peak concurrent streams {}",
            self.wall_s, self.streams_per_s, self.peak_concurrent_streams
        )?;
        writeln!(f, "send lag ms {}", ms(&self.send_lag_us))?;
        writeln!(f, "ttft ms     {}", ms(&self.ttft_us))?;
        write!(f, "duration ms {}", ms(&self.duration_us))
    }
}

/// How one stream ended.
#[derive(Debug)]
enum StreamOutcome {
    Connect,
    Timeout,
    Protocol,
    Done(SseResponse),
}

/// One stream's record, times relative to `t0`.
#[derive(Debug)]
struct StreamRecord {
    sent: Duration,
    ended: Duration,
    outcome: StreamOutcome,
}

/// Runs one streams run on a fresh single-threaded monoio runtime and returns its report.
pub fn run_streams(config: &StreamsConfig) -> Result<StreamsReport, StreamsError> {
    let t = &config.target;
    let addr = (t.host.as_str(), t.port)
        .to_socket_addrs()
        .and_then(|mut a| {
            a.next()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))
        })
        .map_err(|e| StreamsError::Resolve(format!("{}:{}", t.host, t.port), e))?;
    let entries =
        u32::try_from(config.streams.saturating_mul(2).clamp(1024, 32768)).unwrap_or(32768);
    let runtime = RuntimeBuilder::<FusionDriver>::new()
        .enable_timer()
        .with_entries(entries)
        .build()
        .map_err(StreamsError::Runtime)?;
    match runtime {
        FusionRuntime::Uring(mut rt) => rt.block_on(drive(config, addr, "io_uring")),
        FusionRuntime::Legacy(mut rt) => rt.block_on(drive(config, addr, "epoll")),
    }
}

/// The request bytes, built like `load`'s.
fn request(config: &StreamsConfig) -> Bytes {
    let load = LoadConfig {
        target: config.target.clone(),
        rate: 1.0,
        duration: Duration::ZERO,
        warmup: Duration::ZERO,
        body: Some(config.body.clone()),
        bodies: Vec::new(),
        headers: config.headers.clone(),
        connections: 0,
        max_connections: 1,
        seed: 0,
        arrivals: Arrivals::Uniform,
        timeout: config.timeout,
        max_idle: Duration::MAX,
    };
    crate::run::build_request(&load).0
}

async fn drive(
    config: &StreamsConfig,
    addr: SocketAddr,
    driver: &'static str,
) -> Result<StreamsReport, StreamsError> {
    // Phase 1: open every connection, a bounded number of connects at a time.
    let opening = Instant::now();
    let mut conns: Vec<Option<Conn>> = Vec::with_capacity(config.streams);
    let mut last_error = None;
    let mut left = config.streams;
    while left > 0 {
        let batch = left.min(config.connect_concurrency);
        left -= batch;
        let handles: Vec<_> = (0..batch)
            .map(|_| {
                let limit = config.connect_timeout;
                monoio::spawn(async move {
                    match monoio::time::timeout(limit, Conn::connect(addr)).await {
                        Ok(r) => r,
                        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timeout")),
                    }
                })
            })
            .collect();
        for h in handles {
            match h.await {
                Ok(c) => conns.push(Some(c)),
                Err(e) => {
                    last_error = Some(e);
                    conns.push(None);
                }
            }
        }
    }
    let connect_s = opening.elapsed().as_secs_f64();
    let connections = conns.iter().filter(|c| c.is_some()).count() as u64;
    if connections == 0 {
        return Err(StreamsError::NoConnection(
            last_error.unwrap_or_else(|| io::Error::other("no connection")),
        ));
    }

    // Phase 2: every request at once.
    let request = request(config);
    let records = Rc::new(RefCell::new(Vec::with_capacity(config.streams)));
    let t0 = Instant::now();
    let handles: Vec<_> = conns
        .into_iter()
        .map(|conn| {
            let request = request.clone();
            let records = Rc::clone(&records);
            let limit = config.timeout;
            monoio::spawn(async move {
                let sent = t0.elapsed();
                let outcome = match conn {
                    None => StreamOutcome::Connect,
                    Some(mut conn) => {
                        let deadline = limit.saturating_sub(sent);
                        let exchange = conn.exchange_sse(request, Method::Post);
                        match monoio::time::timeout(deadline, exchange).await {
                            Err(_) => StreamOutcome::Timeout,
                            Ok(Err(_)) => StreamOutcome::Protocol,
                            Ok(Ok(r)) => StreamOutcome::Done(r),
                        }
                    }
                };
                records.borrow_mut().push(StreamRecord {
                    sent,
                    ended: t0.elapsed(),
                    outcome,
                });
            })
        })
        .collect();
    for h in handles {
        h.await;
    }
    let records = std::mem::take(&mut *records.borrow_mut());
    summarize(config, t0, &records, connect_s, connections, driver)
}

/// True when a stream counts as completed.
fn complete(r: &SseResponse) -> bool {
    let e: &SseSummary = &r.events;
    (200..300).contains(&r.status) && e.done && e.after_done == 0 && !e.error_event
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn summarize(
    config: &StreamsConfig,
    t0: Instant,
    records: &[StreamRecord],
    connect_s: f64,
    connections: u64,
    driver: &'static str,
) -> Result<StreamsReport, StreamsError> {
    let hist = || Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3);
    let (mut lag, mut ttft, mut duration, mut streaming) = (hist()?, hist()?, hist()?, hist()?);
    let mut errors = StreamErrors::default();
    let (mut completed, mut with_usage, mut with_finish, mut events) = (0, 0, 0, 0);
    let mut wall = Duration::ZERO;
    // (time, +1 start / -1 end) of each completed stream's streaming interval.
    let mut edges: Vec<(Duration, i64)> = Vec::new();
    for rec in records {
        wall = wall.max(rec.ended);
        lag.saturating_record(micros(rec.sent));
        match &rec.outcome {
            StreamOutcome::Connect => errors.connect += 1,
            StreamOutcome::Timeout => errors.timeout += 1,
            StreamOutcome::Protocol => errors.protocol += 1,
            StreamOutcome::Done(r) => {
                events += r.events.events;
                if !(200..300).contains(&r.status) {
                    errors.status += 1;
                } else if !complete(r) {
                    errors.incomplete += 1;
                } else {
                    completed += 1;
                    with_usage += u64::from(r.events.usage);
                    with_finish += u64::from(r.events.finish);
                    let done = r
                        .done_at
                        .map_or(rec.ended, |d| d.saturating_duration_since(t0));
                    let first = r
                        .first_event
                        .map_or(done, |d| d.saturating_duration_since(t0));
                    ttft.saturating_record(micros(first));
                    duration.saturating_record(micros(done));
                    streaming.saturating_record(micros(done.saturating_sub(first)));
                    edges.push((first, 1));
                    edges.push((done, -1));
                }
            }
        }
    }
    // Ends sort before starts at the same instant: touching intervals do not overlap.
    edges.sort();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, step) in edges {
        now += step;
        peak = peak.max(now);
    }
    let wall_s = wall.as_secs_f64();
    Ok(StreamsReport {
        url: config.target.url.clone(),
        streams: config.streams as u64,
        connections,
        connect_s,
        wall_s,
        completed,
        errors,
        with_usage,
        with_finish,
        events,
        streams_per_s: if wall_s > 0.0 {
            completed as f64 / wall_s
        } else {
            0.0
        },
        send_lag_us: Percentiles::of(&lag),
        ttft_us: Percentiles::of(&ttft),
        duration_us: Percentiles::of(&duration),
        streaming_us: Percentiles::of(&streaming),
        peak_concurrent_streams: peak as u64,
        driver,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<StreamsArgs, ArgsError> {
        parse_streams_args(line.split_whitespace().map(String::from))
    }

    #[test]
    fn flags() {
        let a =
            parse("--url http://127.0.0.1:9/v1/chat/completions --streams 2000 --body {}").unwrap();
        let c = &a.config;
        assert_eq!(c.streams, 2000);
        assert_eq!(c.connect_concurrency, 64);
        assert_eq!(c.timeout, Duration::from_secs(120));
        assert_eq!(c.body, b"{}");
        let a = parse(
            "--url=http://h:1/x --streams=3 --body {} --connect-concurrency 2 --timeout 5s \
             --connect-timeout 1s --header a:b --json o.json",
        )
        .unwrap();
        assert_eq!(a.config.connect_concurrency, 2);
        assert_eq!(a.config.headers, vec![("a".into(), "b".into())]);
        assert_eq!(a.json, Some(PathBuf::from("o.json")));
        let req = request(&a.config);
        assert!(req.starts_with(b"POST /x HTTP/1.1\r\nhost: h:1\r\n"));
        assert!(req.ends_with(b"\r\n\r\n{}"));
    }

    #[test]
    fn bad_flags() {
        assert_eq!(
            parse("--url http://h/ --body {}").unwrap_err(),
            ArgsError::Required("--streams")
        );
        assert_eq!(
            parse("--url http://h/ --streams 1").unwrap_err(),
            ArgsError::Required("--body-file or --body")
        );
        assert!(matches!(
            parse("--url http://h/ --streams 0 --body {}"),
            Err(ArgsError::Invalid { .. })
        ));
        assert!(matches!(
            parse("--url http://h/ --streams 1 --body {} --rate 3"),
            Err(ArgsError::UnknownFlag(_))
        ));
        assert_eq!(parse("-h").unwrap_err(), ArgsError::Help);
    }
}
