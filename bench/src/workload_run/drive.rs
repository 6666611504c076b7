//! The `run` loop: prepares every conversation's requests, starts the pacer (shared with
//! `load`), and starts one conversation task per arrival the moment it is due. A task sends its
//! first turn at once and each later turn `think_time` after the previous answer completed;
//! nothing a task does delays the next arrival.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use inferrail_wire::Method;
use monoio::{FusionDriver, FusionRuntime, RuntimeBuilder};
use serde_json::Value;

use super::args::RunConfig;
use super::observe::{Failure, Observer};
use super::summary::{Recorder, RunFacts, RunReport};
use crate::arrivals::arrivals;
use crate::pacer;
use crate::pool::Pool;
use crate::progress::{self, Counts, ProgressMode};
use crate::run::{http_request, resolve_target, LoadError};
use crate::workload::{Options, Request, SESSION_HEADER};

/// Most turns a generated conversation has (W3's longest episode); multi-turn workloads are
/// generated with this many requests per arrival, so every arrival gets a whole conversation.
const MAX_TURNS: usize = 10;
/// Idle connections are reused for at most this long (as `load`'s default `--max-idle`).
const MAX_IDLE: Duration = Duration::from_secs(4);
/// Protocol errors whose cause the report keeps.
const ERROR_SAMPLES: usize = 5;

/// One prepared turn.
#[derive(Debug, Clone)]
struct Turn {
    /// The complete HTTP request.
    request: Bytes,
    /// Pause after the previous turn's answer (zero for first turns).
    think: Duration,
}

/// What every task shares.
struct State {
    pool: Rc<Pool>,
    timeout: Duration,
    /// Requests scheduled before this are warmup.
    measured_from: Instant,
    /// Later turns due after this are not sent.
    end: Instant,
    recorder: RefCell<Recorder>,
    peak_in_flight: Cell<u64>,
    conversations_running: Cell<u64>,
    turns_skipped: Cell<u64>,
    /// When the latest measured request ended.
    last_end: Cell<Option<Instant>>,
    /// Requests sent, ended and failed so far (warmup included): in flight is sent − ended.
    counts: Cell<Counts>,
    /// Set when every conversation ended (stops the progress task).
    finished: Cell<bool>,
    error_samples: RefCell<Vec<String>>,
}

/// Runs one `run` on a fresh single-threaded monoio runtime and returns its report.
pub fn run_workload(config: &RunConfig) -> Result<RunReport, LoadError> {
    let addr = resolve_target(&config.target)?;
    let runtime = RuntimeBuilder::<FusionDriver>::new()
        .enable_timer()
        .build()
        .map_err(LoadError::Runtime)?;
    match runtime {
        FusionRuntime::Uring(mut rt) => rt.block_on(drive(config, addr, "io_uring")),
        FusionRuntime::Legacy(mut rt) => rt.block_on(drive(config, addr, "epoll")),
    }
}

/// Adds `stream_options.include_usage` to a body (the workload sets `stream` itself).
fn with_usage(body: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut map)) => {
            map.insert(
                "stream_options".to_string(),
                serde_json::json!({"include_usage": true}),
            );
            Value::Object(map).to_string().into_bytes()
        }
        _ => body.to_vec(),
    }
}

/// The conversations of a run, one per arrival: `arrivals` single requests, or the first
/// `arrivals` whole conversations of a multi-turn workload.
fn conversations(config: &RunConfig, arrivals: usize) -> Vec<Rc<[Turn]>> {
    let options = Options {
        model: config.model.clone(),
        max_tokens: config.max_tokens,
        stream: true,
    };
    let probe = config.workload.requests(1, config.seed, &options);
    let multi = probe.first().is_some_and(|r| r.position.is_some());
    let n = if multi {
        arrivals.saturating_mul(MAX_TURNS)
    } else {
        arrivals
    };
    let requests = config.workload.requests(n, config.seed, &options);
    let mut out: Vec<Vec<Turn>> = Vec::with_capacity(arrivals);
    let mut current = None;
    for r in &requests {
        let conv = r.position.map(|p| p.conversation);
        if conv.is_none() || conv != current || out.is_empty() {
            if out.len() == arrivals {
                break;
            }
            out.push(Vec::new());
            current = conv;
        }
        if let Some(last) = out.last_mut() {
            last.push(turn(config, r));
        }
    }
    out.into_iter().map(Rc::from).collect()
}

fn turn(config: &RunConfig, r: &Request) -> Turn {
    let path = if config.target.path == "/" {
        r.path
    } else {
        config.target.path.as_str()
    };
    let mut headers = config.headers.clone();
    if let Some(s) = &r.session_id {
        headers.push((SESSION_HEADER.to_string(), s.clone()));
    }
    let body = with_usage(&r.body);
    Turn {
        request: http_request(&config.target, path, &headers, Some(&body)).0,
        think: r.think_time.mul_f64(config.time_scale),
    }
}

async fn drive(
    config: &RunConfig,
    addr: SocketAddr,
    driver: &'static str,
) -> Result<RunReport, LoadError> {
    let offsets = arrivals(
        config.rate,
        config.warmup + config.duration,
        config.arrivals,
        config.seed,
    );
    let convs = conversations(config, offsets.len());
    let pool = Pool::new(addr, config.max_connections, MAX_IDLE);
    pool.prefill(config.connections).await?;
    // A little slack so the first arrival is not late because the pacer thread was starting.
    let start = Instant::now() + Duration::from_millis(5);
    let state = Rc::new(State {
        pool: Rc::clone(&pool),
        timeout: config.timeout,
        measured_from: start + config.warmup,
        end: start + config.warmup + config.duration,
        recorder: RefCell::new(Recorder::new(config.slo)?),
        peak_in_flight: Cell::new(0),
        conversations_running: Cell::new(0),
        turns_skipped: Cell::new(0),
        last_end: Cell::new(None),
        counts: Cell::new(Counts::default()),
        finished: Cell::new(false),
        error_samples: RefCell::new(Vec::new()),
    });
    if config.progress != ProgressMode::Off {
        let state = Rc::clone(&state);
        let (mode, total) = (config.progress, config.warmup + config.duration);
        monoio::spawn(async move {
            loop {
                monoio::time::sleep(mode.interval()).await;
                if state.finished.get() {
                    break;
                }
                let elapsed = start.elapsed();
                progress::show(
                    mode,
                    &progress::line("run", elapsed, total, state.counts.get()),
                );
            }
        });
    }
    let due = pacer::start(offsets.into_iter(), start, config.warmup).map_err(LoadError::Pacer)?;
    let mut batch = Vec::new();
    let mut k = 0usize;
    while due.next_batch(&mut batch).await {
        for d in batch.drain(..) {
            let Some(turns) = (!convs.is_empty()).then(|| Rc::clone(&convs[k % convs.len()]))
            else {
                continue;
            };
            k += 1;
            state
                .conversations_running
                .set(state.conversations_running.get() + 1);
            monoio::spawn(conversation(Rc::clone(&state), d.at, turns));
        }
    }
    // Every turn ends within its timeout and no turn starts after `end`: this ends.
    while state.conversations_running.get() > 0 {
        monoio::time::sleep(Duration::from_millis(1)).await;
    }
    state.finished.set(true);
    if config.progress != ProgressMode::Off {
        let total = config.warmup + config.duration;
        let elapsed = start.elapsed();
        progress::show(
            config.progress,
            &progress::line("run", elapsed, total, state.counts.get()),
        );
        progress::finish(config.progress);
    }
    let report = state.recorder.borrow().report(RunFacts {
        url: config.target.url.clone(),
        workload: config.workload.name(),
        arrivals: config.arrivals.name(),
        rate: config.rate,
        duration: config.duration,
        warmup: config.warmup,
        wall: state.last_end.get().map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(state.measured_from)
        }),
        seed: config.seed,
        max_tokens: config.max_tokens,
        turns_skipped: state.turns_skipped.get(),
        connections_opened: pool.opened(),
        connection_waits: pool.waits(),
        peak_in_flight: state.peak_in_flight.get(),
        driver,
        error_samples: state.error_samples.take(),
    });
    Ok(report)
}

/// One conversation: the first turn scheduled at `at`, each later one `think` after the
/// previous answer. A failed turn ends the conversation; a turn due after the run's end is not
/// sent. Both count as skipped turns.
async fn conversation(state: Rc<State>, at: Instant, turns: Rc<[Turn]>) {
    let mut scheduled = at;
    for (i, turn) in turns.iter().enumerate() {
        if i > 0 {
            scheduled = Instant::now() + turn.think;
            if scheduled >= state.end {
                skip(&state, turns.len() - i);
                break;
            }
            monoio::time::sleep(turn.think).await;
        }
        if !one_request(&state, scheduled, turn.request.clone()).await {
            skip(&state, turns.len() - i - 1);
            break;
        }
    }
    state
        .conversations_running
        .set(state.conversations_running.get().saturating_sub(1));
}

fn skip(state: &State, n: usize) {
    state
        .turns_skipped
        .set(state.turns_skipped.get() + n as u64);
}

/// One request scheduled at `scheduled`: records its sample, returns true when it completed.
async fn one_request(state: &State, scheduled: Instant, request: Bytes) -> bool {
    let mut counts = state.counts.get();
    counts.sent += 1;
    state.counts.set(counts);
    let in_flight = counts.sent - counts.ended;
    state
        .peak_in_flight
        .set(state.peak_in_flight.get().max(in_flight));
    let mut observer = Observer::default();
    let sent = Cell::new(None);
    let limit = state.timeout.saturating_sub(scheduled.elapsed());
    let status = monoio::time::timeout(limit, attempt(state, request, &sent, &mut observer))
        .await
        .unwrap_or(Err(Failure::Timeout));
    let ended = Instant::now();
    let measured = scheduled >= state.measured_from;
    if measured {
        state.last_end.set(state.last_end.get().max(Some(ended)));
    }
    let sample = observer.finish(measured, scheduled, sent.get(), ended, status);
    let ok = sample.failure.is_none();
    state.recorder.borrow_mut().record(&sample);
    let mut counts = state.counts.get();
    counts.ended += 1;
    counts.failed += u64::from(!ok);
    state.counts.set(counts);
    ok
}

/// Takes a connection, sends, follows the stream into `observer`. Dropped on timeout, which
/// closes the connection.
async fn attempt(
    state: &State,
    request: Bytes,
    sent: &Cell<Option<Instant>>,
    observer: &mut Observer,
) -> Result<u16, Failure> {
    let mut lease = state.pool.acquire().await.map_err(|_| Failure::Connect)?;
    sent.set(Some(Instant::now()));
    match lease
        .exchange_streaming(request, Method::Post, observer)
        .await
    {
        Ok(r) => {
            if r.reusable {
                lease.release();
            }
            Ok(r.status)
        }
        Err(e) => {
            let mut samples = state.error_samples.borrow_mut();
            if samples.len() < ERROR_SAMPLES {
                samples.push(e.to_string());
            }
            Err(Failure::Protocol)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload_run::parse_run_args;

    fn config(workload: &str) -> RunConfig {
        let line = format!("--url http://127.0.0.1:9 --workload {workload} --rate 1");
        parse_run_args(line.split_whitespace().map(String::from))
            .unwrap()
            .config
    }

    fn body(turn: &Turn) -> Value {
        let text = String::from_utf8(turn.request.to_vec()).unwrap();
        serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap()
    }

    #[test]
    fn single_turn_workloads_stream_with_usage() {
        let convs = conversations(&config("w1"), 5);
        assert_eq!(convs.len(), 5);
        assert!(convs.iter().all(|c| c.len() == 1));
        let b = body(&convs[0][0]);
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["max_tokens"], 64);
        let head = String::from_utf8(convs[0][0].request.to_vec()).unwrap();
        assert!(head.starts_with("POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:9\r\n"));
    }

    #[test]
    fn multi_turn_workloads_group_conversations() {
        let convs = conversations(&config("w2"), 4);
        assert_eq!(convs.len(), 4, "one whole conversation per arrival");
        for c in &convs {
            assert!((2..=8).contains(&c.len()), "{}", c.len());
            assert_eq!(c[0].think, Duration::ZERO);
            assert!(c[1..].iter().all(|t| t.think >= Duration::from_secs(10)));
            let head = String::from_utf8(c[0].request.to_vec()).unwrap();
            assert!(head.contains("\r\nx-session-id: w2-"), "{head}");
        }
    }

    #[test]
    fn think_times_follow_the_time_scale() {
        let real = conversations(&config("w2"), 3);
        let mut quarter = config("w2");
        quarter.time_scale = 0.25;
        let scaled = conversations(&quarter, 3);
        let thinks = |c: &[Rc<[Turn]>]| -> Vec<Duration> {
            c.iter().flat_map(|c| c.iter()).map(|t| t.think).collect()
        };
        let (real, scaled) = (thinks(&real), thinks(&scaled));
        assert_eq!(real.len(), scaled.len());
        assert!(real.iter().any(|t| !t.is_zero()));
        for (r, s) in real.iter().zip(&scaled) {
            assert_eq!(*s, r.mul_f64(0.25));
        }
    }
}
