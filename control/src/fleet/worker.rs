//! One replica's probe worker on the control thread: a `/health` probe loop and a `/metrics`
//! scrape loop, each its own monoio task on its own cadence.
//!
//! Every replica has its own pair of tasks and every exchange is bounded in time and size, so a
//! hung, slow or huge engine only ever delays its own loop, never another replica's probes or
//! scrapes. Results go to the caller's sink as [`WorkerEvent`]s; transitions between answering
//! and not answering are logged to stderr once each (see [`AnswerLog`]).
//!
//! Cadence: ticks follow a fixed grid from the first tick (`next = previous + interval`); a tick
//! that ran past its successor's time is followed at once by the next one, which re-anchors the
//! grid, so an overrun never causes a burst of catch-up exchanges and one loop never runs two
//! exchanges at once. Settings are read at every tick, so a live config change takes effect at
//! the next tick. Dropping the [`WorkerHandle`] stops both loops at once, even one sleeping a
//! long interval or waiting on a hung engine, and no event is delivered after the drop.

use crate::fleet::probe::http_get;
use crate::fleet::scrape::{scrape, AnswerLog, ScrapeOutcome, PAGE_CAP};
use inferrail_config::{Health, Load};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Largest `/health` body read, in bytes; a larger answer counts as a failed probe.
pub const HEALTH_CAP: usize = 64 * 1024;

/// Shortest interval a loop honours, so a zero interval cannot spin the control thread.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// The replica a worker probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerTarget {
    /// The registry's key for the replica; copied into every event.
    pub key: u64,
    /// The replica's name, used in log lines.
    pub id: String,
    /// Where the engine listens.
    pub addr: SocketAddr,
    /// The `Host` header sent with every request.
    pub authority: String,
}

/// How often and how long to probe and scrape; read at every tick.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerSettings {
    /// Time between `/health` probes.
    pub health_interval: Duration,
    /// Bound on one `/health` exchange, connect included.
    pub health_timeout: Duration,
    /// Time between `/metrics` scrapes.
    pub scrape_interval: Duration,
    /// Bound on one `/metrics` exchange, connect included.
    pub scrape_timeout: Duration,
}

impl WorkerSettings {
    /// The settings named by the config's `health` and `load` sections.
    pub fn from_config(health: &Health, load: &Load) -> WorkerSettings {
        WorkerSettings {
            health_interval: health.interval,
            health_timeout: health.timeout,
            scrape_interval: load.scrape_interval,
            scrape_timeout: load.scrape_timeout,
        }
    }
}

/// One result from a worker.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerEvent {
    /// A `/health` probe finished: `ok` is a 2xx answer within the timeout; `at` is when it
    /// finished.
    Probe {
        /// The replica's key.
        key: u64,
        /// Whether the probe passed.
        ok: bool,
        /// When the probe finished.
        at: Instant,
    },
    /// A `/metrics` scrape finished.
    Scrape {
        /// The replica's key.
        key: u64,
        /// What the scrape produced.
        outcome: ScrapeOutcome,
        /// When the request was started.
        started: Instant,
        /// When the outcome was known.
        finished: Instant,
    },
}

/// Keeps a worker's tasks running; dropping it stops them at once.
pub struct WorkerHandle {
    stop: Rc<StopSignal>,
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.stop.trigger();
    }
}

/// Spawns the worker's tasks on the current monoio runtime (which must have its timer
/// enabled); they stop when the handle drops.
///
/// Both loops make their first exchange immediately. `settings` is read at every tick and must
/// not be mutably borrowed across an await by its owner; `sink` is called on the runtime's
/// thread, once per finished exchange, never after the handle is dropped.
pub fn spawn(
    target: WorkerTarget,
    settings: Rc<RefCell<WorkerSettings>>,
    sink: Rc<dyn Fn(WorkerEvent)>,
) -> WorkerHandle {
    let stop = Rc::new(StopSignal::default());
    let target = Rc::new(target);
    monoio::spawn(health_loop(
        target.clone(),
        settings.clone(),
        sink.clone(),
        stop.clone(),
    ));
    monoio::spawn(scrape_loop(target, settings, sink, stop.clone()));
    WorkerHandle { stop }
}

/// When the tick after one scheduled at `scheduled` starts, given it is `now`: on the grid
/// (`scheduled + interval`) if that is still ahead, else `now` (the overrun tick starts at once
/// and re-anchors the grid). Pure: never reads the clock.
pub fn next_tick(scheduled: Instant, interval: Duration, now: Instant) -> Instant {
    let on_grid = scheduled + interval.max(MIN_INTERVAL);
    if on_grid >= now {
        on_grid
    } else {
        now
    }
}

async fn health_loop(
    target: Rc<WorkerTarget>,
    settings: Rc<RefCell<WorkerSettings>>,
    sink: Rc<dyn Fn(WorkerEvent)>,
    stop: Rc<StopSignal>,
) {
    let mut log = AnswerLog::new(&target.id, "/health");
    let mut scheduled = None;
    loop {
        let (interval, timeout) = {
            let s = settings.borrow();
            (s.health_interval, s.health_timeout)
        };
        if !wait_tick(&stop, &mut scheduled, interval).await {
            return;
        }
        let probe = http_get(
            target.addr,
            &target.authority,
            "/health",
            timeout,
            HEALTH_CAP,
        );
        let Some(result) = until_stopped(&stop, probe).await else {
            return;
        };
        let at = Instant::now();
        let (ok, what) = match result {
            Ok(f) if (200..300).contains(&f.status) => (true, String::new()),
            Ok(f) => (false, format!("status {}", f.status)),
            Err(e) => (false, e.to_string()),
        };
        if let Some(line) = log.observe(ok, &what) {
            eprintln!("{line}");
        }
        if stop.is_stopped() {
            return;
        }
        sink(WorkerEvent::Probe {
            key: target.key,
            ok,
            at,
        });
    }
}

async fn scrape_loop(
    target: Rc<WorkerTarget>,
    settings: Rc<RefCell<WorkerSettings>>,
    sink: Rc<dyn Fn(WorkerEvent)>,
    stop: Rc<StopSignal>,
) {
    let mut log = AnswerLog::new(&target.id, "/metrics");
    let mut scheduled = None;
    // The engine connection kept between scrapes (keep-alive).
    let mut conn = None;
    loop {
        let (interval, timeout) = {
            let s = settings.borrow();
            (s.scrape_interval, s.scrape_timeout)
        };
        if !wait_tick(&stop, &mut scheduled, interval).await {
            return;
        }
        let started = Instant::now();
        let fetch = scrape(&mut conn, target.addr, &target.authority, timeout, PAGE_CAP);
        let Some(outcome) = until_stopped(&stop, fetch).await else {
            return;
        };
        let finished = Instant::now();
        if let Some(line) = log.observe(outcome.is_report(), &outcome.describe()) {
            eprintln!("{line}");
        }
        if stop.is_stopped() {
            return;
        }
        sink(WorkerEvent::Scrape {
            key: target.key,
            outcome,
            started,
            finished,
        });
    }
}

/// Waits until the next tick (at once for the first); false when stopped first.
async fn wait_tick(stop: &StopSignal, scheduled: &mut Option<Instant>, interval: Duration) -> bool {
    let now = Instant::now();
    let next = match *scheduled {
        None => now,
        Some(previous) => next_tick(previous, interval, now),
    };
    *scheduled = Some(next);
    if next > now {
        let sleep = monoio::time::sleep_until(next.into());
        if until_stopped(stop, sleep).await.is_none() {
            return false;
        }
    }
    !stop.is_stopped()
}

/// Runs `fut` unless the stop signal fires first (`None`); dropping `fut` then cancels it.
pub(crate) async fn until_stopped<F: Future>(stop: &StopSignal, fut: F) -> Option<F::Output> {
    if stop.is_stopped() {
        return None;
    }
    monoio::select! {
        _ = stop.wait() => None,
        out = fut => Some(out),
    }
}

/// A one-shot, single-thread stop notification shared by a worker's tasks.
///
/// Each waiting [`Stopped`] owns one slot for its waker, refreshed when it is polled again and
/// emptied when it is dropped, so the registrations are exactly the waits in progress. (Telling
/// a task's waker from a new one with `Waker::will_wake` does not work here: in release builds
/// monoio's wakers of one task compare unequal, and a list deduplicated that way grew by one or
/// two entries per wait for as long as the gateway ran.)
#[derive(Default)]
pub(crate) struct StopSignal {
    stopped: Cell<bool>,
    /// The waker of each wait in progress, by slot; `None` marks a free slot.
    wakers: RefCell<Vec<Option<Waker>>>,
}

impl StopSignal {
    pub(crate) fn trigger(&self) {
        self.stopped.set(true);
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for waker in wakers.into_iter().flatten() {
            waker.wake();
        }
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.get()
    }

    fn wait(&self) -> Stopped<'_> {
        Stopped {
            signal: self,
            slot: None,
        }
    }

    /// Wakers registered now (for tests).
    #[cfg(test)]
    fn registered(&self) -> usize {
        self.wakers.borrow().iter().flatten().count()
    }
}

/// Resolves once the signal has fired.
struct Stopped<'a> {
    signal: &'a StopSignal,
    /// This wait's slot in the signal's wakers, once registered.
    slot: Option<usize>,
}

impl Future for Stopped<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.signal.is_stopped() {
            return Poll::Ready(());
        }
        let mut wakers = this.signal.wakers.borrow_mut();
        match this.slot.and_then(|i| wakers.get_mut(i)) {
            Some(Some(waker)) => waker.clone_from(cx.waker()),
            Some(entry) => *entry = Some(cx.waker().clone()),
            None => {
                let free = wakers.iter().position(Option::is_none);
                let i = free.unwrap_or(wakers.len());
                if i == wakers.len() {
                    wakers.push(None);
                }
                wakers[i] = Some(cx.waker().clone());
                this.slot = Some(i);
            }
        }
        Poll::Pending
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            if let Some(entry) = self.signal.wakers.borrow_mut().get_mut(i) {
                *entry = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::probe::tests::{hung, pour, read_request, run, TestEngine};
    use crate::fleet::probe::ProbeError;
    use crate::fleet::scrape::tests::busy_page;
    use std::io::Write;

    const INTERVAL: Duration = Duration::from_millis(50);

    #[test]
    fn a_wait_keeps_one_waker_whatever_wakers_poll_it_and_none_once_dropped() {
        // Wakers that never compare equal (`will_wake` false), as monoio's do in release builds.
        struct Flag(std::sync::atomic::AtomicBool);
        impl std::task::Wake for Flag {
            fn wake(self: std::sync::Arc<Self>) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let stop = StopSignal::default();
        let flags: Vec<_> = (0..50)
            .map(|_| std::sync::Arc::new(Flag(false.into())))
            .collect();
        let mut wait = stop.wait();
        for flag in &flags {
            let waker = Waker::from(flag.clone());
            let mut cx = Context::from_waker(&waker);
            assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
        }
        assert_eq!(stop.registered(), 1);
        for _ in 0..50 {
            let waker = Waker::from(flags[0].clone());
            let mut other = stop.wait();
            assert!(Pin::new(&mut other)
                .poll(&mut Context::from_waker(&waker))
                .is_pending());
        }
        assert_eq!(stop.registered(), 1, "dropped waits leave nothing behind");
        stop.trigger();
        let woken: Vec<bool> = flags
            .iter()
            .map(|f| f.0.load(std::sync::atomic::Ordering::SeqCst))
            .collect();
        assert!(woken[49], "the waker of the last poll is woken");
        assert!(woken[..49].iter().all(|w| !w), "older wakers were replaced");
        drop(wait);
        assert_eq!(stop.registered(), 0);
    }

    #[test]
    fn waiting_on_the_stop_signal_many_times_keeps_no_stale_wakers() {
        // A worker waits on the signal once per tick, for as long as it runs: what it leaves
        // registered must not grow with the number of waits (it grew by one per wait, so a
        // gateway's control thread scanned ever longer lists and held ever more wakers).
        let stop = StopSignal::default();
        run(async {
            for _ in 0..200 {
                let out =
                    until_stopped(&stop, monoio::time::sleep(Duration::from_micros(50))).await;
                assert!(out.is_some());
            }
        });
        assert!(
            stop.registered() <= 1,
            "{} wakers left registered after 200 waits",
            stop.registered()
        );
        // And a wait in progress is still woken by the trigger.
        let woke = run(async {
            let waiting = until_stopped(&stop, std::future::pending::<()>());
            let trigger = async {
                monoio::time::sleep(Duration::from_millis(5)).await;
                stop.trigger();
            };
            monoio::join!(waiting, trigger).0
        });
        assert_eq!(woke, None);
    }

    /// Answers `/metrics` with the busy vLLM page and `/health` with 200.
    fn healthy_engine() -> TestEngine {
        let page = busy_page();
        TestEngine::start(move |mut s| {
            let body = if read_request(&mut s) == "/metrics" {
                page.as_str()
            } else {
                ""
            };
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
        })
    }

    /// Answers everything with an endless-looking 50 MB close-delimited page.
    fn huge_engine() -> TestEngine {
        TestEngine::start(|mut s| {
            read_request(&mut s);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n");
            pour(&mut s, 50 * 1024 * 1024, false);
        })
    }

    fn target(key: u64, engine: &TestEngine) -> WorkerTarget {
        WorkerTarget {
            key,
            id: format!("engine-{key}"),
            addr: engine.addr,
            authority: format!("engine-{key}:8000"),
        }
    }

    type Events = Rc<RefCell<Vec<WorkerEvent>>>;

    fn recorder() -> (Events, Rc<dyn Fn(WorkerEvent)>) {
        let events: Events = Rc::default();
        let into = events.clone();
        (events, Rc::new(move |e| into.borrow_mut().push(e)))
    }

    /// Waits (bounded) until every task holding a clone of `sink` has exited.
    async fn tasks_exit(sink: &Rc<dyn Fn(WorkerEvent)>) -> bool {
        for _ in 0..200 {
            if Rc::strong_count(sink) == 1 {
                return true;
            }
            monoio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    fn scrapes(events: &[WorkerEvent], want: u64) -> Vec<(ScrapeOutcome, Instant)> {
        events
            .iter()
            .filter_map(|e| match e {
                WorkerEvent::Scrape {
                    key,
                    outcome,
                    finished,
                    ..
                } if *key == want => Some((outcome.clone(), *finished)),
                _ => None,
            })
            .collect()
    }

    fn probes(events: &[WorkerEvent], want: u64) -> Vec<bool> {
        events
            .iter()
            .filter_map(|e| match e {
                WorkerEvent::Probe { key, ok, .. } if *key == want => Some(*ok),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn hung_and_huge_engines_do_not_delay_a_healthy_one() {
        let healthy = healthy_engine();
        let silent = TestEngine::start(hung);
        let huge = huge_engine();
        run(async {
            // Timeouts far above the interval: if one replica's exchange could hold up another,
            // the healthy replica's reports would show gaps of a whole timeout.
            let settings = Rc::new(RefCell::new(WorkerSettings {
                health_interval: INTERVAL,
                health_timeout: Duration::from_millis(300),
                scrape_interval: INTERVAL,
                scrape_timeout: Duration::from_millis(300),
            }));
            let (events, sink) = recorder();
            let start = Instant::now();
            let handles: Vec<WorkerHandle> = [(1, &healthy), (2, &silent), (3, &huge)]
                .into_iter()
                .map(|(key, engine)| spawn(target(key, engine), settings.clone(), sink.clone()))
                .collect();
            monoio::time::sleep(Duration::from_millis(700)).await;
            let end = Instant::now();
            drop(handles);
            let delivered = events.borrow().len();
            assert!(tasks_exit(&sink).await, "worker tasks still running");
            monoio::time::sleep(Duration::from_millis(150)).await;
            let events = events.borrow();
            assert_eq!(events.len(), delivered, "events after the handles dropped");

            // Healthy: a report at least every 4 intervals from start to end (1 expected).
            let bound = 4 * INTERVAL;
            let reports = scrapes(&events, 1);
            assert!(reports.iter().all(|(o, _)| o.is_report()), "{reports:?}");
            let mut last = start;
            for (_, at) in &reports {
                assert!(at.duration_since(last) <= bound, "gap {:?}", *at - last);
                last = *at;
            }
            assert!(end.duration_since(last) <= bound, "gap {:?}", end - last);
            match &reports[0].0 {
                ScrapeOutcome::Report(load) => assert_eq!((load.running, load.waiting), (3.0, 2.0)),
                other => panic!("{other:?}"),
            }
            let healthy_probes = probes(&events, 1);
            assert!(healthy_probes.len() >= 3, "{healthy_probes:?}");
            assert!(healthy_probes.iter().all(|ok| *ok));

            // Hung: timeouts only.
            let silent_scrapes = scrapes(&events, 2);
            assert!(!silent_scrapes.is_empty());
            assert!(silent_scrapes
                .iter()
                .all(|(o, _)| *o == ScrapeOutcome::Failed(ProbeError::Timeout)));
            let silent_probes = probes(&events, 2);
            assert!(!silent_probes.is_empty() && silent_probes.iter().all(|ok| !ok));

            // Huge: refused at the cap, every time.
            let huge_scrapes = scrapes(&events, 3);
            assert!(huge_scrapes.len() >= 2, "{huge_scrapes:?}");
            assert!(huge_scrapes
                .iter()
                .all(|(o, _)| matches!(o, ScrapeOutcome::Failed(ProbeError::TooLarge { .. }))));
            let huge_probes = probes(&events, 3);
            assert!(!huge_probes.is_empty() && huge_probes.iter().all(|ok| !ok));
        });
    }

    #[test]
    fn drop_stops_loops_sleeping_a_long_interval_or_waiting_on_a_hung_engine() {
        let healthy = healthy_engine();
        let silent = TestEngine::start(hung);
        run(async {
            let settings = Rc::new(RefCell::new(WorkerSettings {
                health_interval: Duration::from_secs(600),
                health_timeout: Duration::from_secs(300),
                scrape_interval: Duration::from_secs(600),
                scrape_timeout: Duration::from_secs(300),
            }));
            let (events, sink) = recorder();
            let a = spawn(target(1, &healthy), settings.clone(), sink.clone());
            let b = spawn(target(2, &silent), settings.clone(), sink.clone());
            // The healthy loops finish their first exchange and sleep; the hung ones wait.
            for _ in 0..500 {
                if events.borrow().len() >= 2 {
                    break;
                }
                monoio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(events.borrow().len(), 2);
            drop((a, b));
            assert!(tasks_exit(&sink).await, "worker tasks still running");
            assert_eq!(events.borrow().len(), 2);
        });
    }

    #[test]
    fn a_settings_change_applies_at_the_next_tick() {
        let healthy = healthy_engine();
        run(async {
            let settings = Rc::new(RefCell::new(WorkerSettings {
                health_interval: INTERVAL,
                health_timeout: Duration::from_secs(1),
                scrape_interval: INTERVAL,
                scrape_timeout: Duration::from_secs(1),
            }));
            let (events, sink) = recorder();
            let handle = spawn(target(1, &healthy), settings.clone(), sink.clone());
            monoio::time::sleep(Duration::from_millis(300)).await;
            assert!(events.borrow().len() >= 4);
            {
                let mut s = settings.borrow_mut();
                s.health_interval = Duration::from_secs(600);
                s.scrape_interval = Duration::from_secs(600);
            }
            // At most one more tick per loop, scheduled on the old interval.
            monoio::time::sleep(Duration::from_millis(200)).await;
            let settled = events.borrow().len();
            monoio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(events.borrow().len(), settled);
            drop(handle);
            assert!(tasks_exit(&sink).await);
        });
    }

    #[test]
    fn ticks_follow_the_grid_and_an_overrun_starts_at_once() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // On time: the next tick is on the grid.
        assert_eq!(next_tick(t0, ms(100), t0 + ms(30)), t0 + ms(100));
        assert_eq!(next_tick(t0, ms(100), t0 + ms(100)), t0 + ms(100));
        // Overrun: start now, no burst of missed ticks.
        assert_eq!(next_tick(t0, ms(100), t0 + ms(250)), t0 + ms(250));
        let after = next_tick(t0 + ms(250), ms(100), t0 + ms(260));
        assert_eq!(after, t0 + ms(350));
        // A zero interval never schedules the same instant twice.
        assert!(next_tick(t0, Duration::ZERO, t0) > t0);
    }

    #[test]
    fn settings_come_from_config() {
        let health = Health::default();
        let load = Load::default();
        let s = WorkerSettings::from_config(&health, &load);
        assert_eq!(s.health_interval, health.interval);
        assert_eq!(s.health_timeout, health.timeout);
        assert_eq!(s.scrape_interval, load.scrape_interval);
        assert_eq!(s.scrape_timeout, load.scrape_timeout);
    }
}
