//! The engine task: the [`Scheduler`] driven on a virtual timeline, delivering each step's tokens
//! to the response tasks and recording vLLM's metrics. Single-threaded: everything lives in one
//! `Rc<RefCell<Core>>` on the server's runtime thread.
//!
//! Timeline: virtual seconds since the server started. A step starting at `t` ends at
//! `t + duration` (latency model); the task sleeps until that planned end, delivers, and starts
//! the next step at exactly that end (timer overshoot never accumulates). After an idle spell the
//! next step starts at the real time (never before the previous end). With `--zero-latency`
//! every step starts at the real time and the task yields between steps instead of sleeping.
//!
//! Arrivals are given to the scheduler stamped with the start of the latest step (so they join the
//! next one); the real arrival time is kept here for the metrics (TTFT, e2e, queue time).
//!
//! KV events (`--kv-events-config`): at each step's end, before its tokens are delivered, the
//! block pool's events of that step become one [`crate::kv_events::KvEventBatch`] stamped with the wall clock,
//! queued on the publisher without blocking; steps without events publish nothing, as in vLLM.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use inferrail_shards::builtin::BuiltinTokenizer;

use crate::engine::{
    AddRequestError, FinishReason, FinishedRequest, Request, RequestId, Scheduler, SchedulerStats,
    StepOutput,
};
use crate::kv_events::{batch_from_engine, EventMeta, HashFormat, KvEventPublisher};
use crate::openai::Finish;
use crate::prom::{self, VllmMetrics};

/// What a response task receives.
#[derive(Debug)]
pub(crate) enum Ev {
    /// One generated token and its text piece (possibly cut short by a stop string).
    Token { id: u32, text: String },
    /// The request ended.
    Done(Done),
}

/// How a request ended.
#[derive(Debug, Clone)]
pub(crate) struct Done {
    pub(crate) finish: Finish,
    pub(crate) completion_tokens: u32,
    pub(crate) cached_tokens: u32,
}

/// A response task's mailbox.
#[derive(Default)]
pub(crate) struct Slot {
    q: RefCell<VecDeque<Ev>>,
    waker: Cell<Option<Waker>>,
}

impl Slot {
    fn push(&self, ev: Ev) {
        self.q.borrow_mut().push_back(ev);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Takes every queued event.
    pub(crate) fn drain(&self) -> Vec<Ev> {
        self.q.borrow_mut().drain(..).collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.q.borrow().is_empty()
    }

    pub(crate) fn register(&self, waker: &Waker) {
        self.waker.set(Some(waker.clone()));
    }
}

/// What a response task asks the engine for.
pub(crate) struct Submit {
    pub(crate) prompt: Vec<u32>,
    pub(crate) max_tokens: usize,
    pub(crate) min_tokens: usize,
    pub(crate) stop_token_ids: Vec<u32>,
    pub(crate) stop: Vec<String>,
    pub(crate) seed: u64,
    pub(crate) max_tokens_param: Option<u64>,
    /// `cache_salt` (isolates the request's cached blocks).
    pub(crate) cache_salt: Option<String>,
    /// `include_stop_str_in_output`: a matched stop string (or stop token's text) stays.
    pub(crate) include_stop_str_in_output: bool,
}

struct Live {
    slot: Rc<Slot>,
    arrival: f64,
    prompt_len: usize,
    cached: usize,
    last_token: f64,
    text: String,
    stop: Vec<String>,
    /// See [`Submit::include_stop_str_in_output`].
    include_stop: bool,
    /// `min_tokens`: stop strings are looked for only in text after this many tokens.
    min_tokens: usize,
    /// Byte offset of the text after the first `min_tokens` tokens.
    stop_check_from: usize,
    generated: u32,
    /// Ended by a stop string: leaves the scheduler at the step boundary, counted as `stop`.
    stop_string: Option<String>,
    max_tokens_param: Option<u64>,
    /// The client went away: no more deliveries.
    cancelled: bool,
}

/// The engine's state.
pub(crate) struct Core {
    sched: Scheduler,
    pub(crate) metrics: VllmMetrics,
    tok: BuiltinTokenizer,
    live: HashMap<RequestId, Live>,
    next_id: RequestId,
    epoch: Instant,
    zero: bool,
    block_size: usize,
    prefix_caching: bool,
    engine_waker: Option<Waker>,
    wake_gen: u64,
    /// Requests scheduled in the step being waited out (their aborts wait for its end).
    in_flight: HashSet<RequestId>,
    deferred_aborts: Vec<RequestId>,
    last_stats: SchedulerStats,
    /// Where each step's KV cache events go (`--kv-events-config`), with their metadata.
    kv_events: Option<(Arc<KvEventPublisher>, EventMeta)>,
    /// The latest step start: the arrival stamp of new requests.
    floor: f64,
    pub(crate) stopping: bool,
}

impl Core {
    pub(crate) fn new(sched: Scheduler, metrics: VllmMetrics, zero: bool) -> Core {
        let block_size = sched.config().block_size;
        let prefix_caching = sched.config().enable_prefix_caching;
        let last_stats = sched.stats();
        Core {
            sched,
            metrics,
            tok: BuiltinTokenizer::new(),
            live: HashMap::new(),
            next_id: 1,
            epoch: Instant::now(),
            zero,
            block_size,
            prefix_caching,
            engine_waker: None,
            wake_gen: 0,
            in_flight: HashSet::new(),
            deferred_aborts: Vec::new(),
            last_stats,
            kv_events: None,
            floor: 0.0,
            stopping: false,
        }
    }

    /// Publishes every step's KV cache events on `publisher` from now on. Hashes are ints
    /// unless `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`, as in vLLM.
    pub(crate) fn set_kv_publisher(&mut self, publisher: Arc<KvEventPublisher>) {
        let mut meta = EventMeta::default();
        if let Ok(v) = std::env::var("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES") {
            if v.trim().parse::<i64>().map(|i| i == 0).unwrap_or(false) {
                meta.hash_format = HashFormat::Bytes;
            }
        }
        self.kv_events = Some((publisher, meta));
    }

    /// Hands a finished step's KV cache events to the publisher as one batch, stamped with
    /// the wall clock now (the step's end), for data-parallel rank 0 as vLLM's publisher
    /// fills it in. A step without events publishes nothing. Never blocks: a full queue drops
    /// the batch (counted by the publisher).
    fn publish_kv_events(&mut self, out: &mut StepOutput) {
        let events = std::mem::take(&mut out.kv_events);
        let Some((publisher, meta)) = &self.kv_events else {
            return;
        };
        if events.is_empty() {
            return;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        publisher.publish(batch_from_engine(ts, &events, Some(0), meta));
    }

    /// Real seconds since the server started.
    fn vnow(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    pub(crate) fn wake(&mut self) {
        self.wake_gen = self.wake_gen.wrapping_add(1);
        if let Some(w) = self.engine_waker.take() {
            w.wake();
        }
    }

    /// Queues a request; returns its id and mailbox.
    pub(crate) fn submit(&mut self, s: Submit) -> Result<(RequestId, Rc<Slot>), AddRequestError> {
        let id = self.next_id;
        self.next_id += 1;
        let prompt_len = s.prompt.len();
        let min_tokens = s.min_tokens;
        let mut req = Request::new(id, s.prompt, s.max_tokens, self.floor);
        req.min_tokens = s.min_tokens;
        req.stop_token_ids = s.stop_token_ids;
        req.seed = s.seed;
        req.cache_salt = s.cache_salt;
        self.sched.add_request(req)?;
        let slot = Rc::new(Slot::default());
        let arrival = self.vnow();
        self.live.insert(
            id,
            Live {
                slot: slot.clone(),
                arrival,
                prompt_len,
                cached: 0,
                last_token: arrival,
                text: String::new(),
                stop: s.stop,
                include_stop: s.include_stop_str_in_output,
                min_tokens,
                stop_check_from: 0,
                generated: 0,
                stop_string: None,
                max_tokens_param: s.max_tokens_param,
                cancelled: false,
            },
        );
        self.refresh_gauges();
        self.wake();
        Ok((id, slot))
    }

    /// The client of `id` went away: withdraw it now, or at the end of the step in flight when
    /// that step computes it.
    pub(crate) fn abort(&mut self, id: RequestId) {
        let Some(l) = self.live.get_mut(&id) else {
            return;
        };
        l.cancelled = true;
        if self.in_flight.contains(&id) {
            self.deferred_aborts.push(id);
        } else {
            let now = self.vnow().max(self.floor);
            self.abort_now(id, now);
        }
        self.wake();
    }

    fn abort_now(&mut self, id: RequestId, now: f64) {
        if let Some(f) = self.sched.abort(id, now) {
            self.finished(f);
        }
        self.sync_stats();
    }

    /// Drops every prefix-cache block not in use (vLLM's `/reset_prefix_cache`).
    pub(crate) fn reset_prefix_cache(&mut self) -> bool {
        self.sched.reset_prefix_cache()
    }

    fn refresh_gauges(&mut self) {
        let s = self.sched.stats();
        self.metrics.set_running(s.num_running as u64);
        self.metrics
            .set_waiting((s.num_waiting + s.num_pending) as u64);
        self.metrics.set_kv_cache_usage(s.kv_cache_usage);
    }

    /// Counters that follow the scheduler's own: prefix-cache queries/hits and preemptions.
    fn sync_stats(&mut self) {
        let s = self.sched.stats();
        let p = &self.last_stats.prefix_cache;
        self.metrics.inc_prefix_cache(
            s.prefix_cache.queries.saturating_sub(p.queries),
            s.prefix_cache.hits.saturating_sub(p.hits),
        );
        self.metrics.inc_preemptions(
            s.num_preemptions
                .saturating_sub(self.last_stats.num_preemptions),
        );
        self.last_stats = s;
        self.refresh_gauges();
    }

    /// One finished request: metrics, and its `Done` event.
    fn finished(&mut self, f: FinishedRequest) {
        let Some(l) = self.live.remove(&f.id) else {
            return;
        };
        let (reason, finish) = match (&l.stop_string, f.reason) {
            (Some(s), _) => (prom::FinishReason::Stop, Finish::StopString(s.clone())),
            (None, FinishReason::Stop) => (
                prom::FinishReason::Stop,
                match f.stop_token {
                    Some(t) if t != self.tok.eos_id() => Finish::StopToken(t),
                    _ => Finish::Eos,
                },
            ),
            (None, FinishReason::Length) => (prom::FinishReason::Length, Finish::Length),
            (None, FinishReason::Abort) => (prom::FinishReason::Abort, Finish::Abort),
        };
        let scheduled = f.first_scheduled.unwrap_or(f.finished_at);
        let first = f.first_token.unwrap_or(f.finished_at);
        let generated = f.output_tokens.len() as u64;
        self.metrics.observe_finished(&prom::FinishedRequest {
            finish_reason: reason,
            arrival_ts: l.arrival,
            finished_ts: f.finished_at.max(l.arrival),
            queued_ts: l.arrival.min(scheduled),
            scheduled_ts: scheduled,
            first_token_ts: first,
            last_token_ts: f.finished_at.max(first),
            num_prompt_tokens: f.prompt_tokens as u64,
            num_generation_tokens: generated,
            num_cached_tokens: f.cached_tokens as u64,
            num_preemptions: u64::from(f.num_preemptions),
            max_tokens_param: l.max_tokens_param,
        });
        self.metrics.observe_parent_finished(1, generated);
        if !l.cancelled {
            l.slot.push(Ev::Done(Done {
                finish,
                completion_tokens: l.generated,
                cached_tokens: f.cached_tokens as u32,
            }));
        }
    }

    /// Plans one step at `start`.
    fn plan(&mut self, start: f64) -> StepOutput {
        self.floor = start;
        let out = self.sched.step(start);
        self.in_flight = out.scheduled.iter().map(|w| w.id).collect();
        for w in &out.scheduled {
            if w.admitted {
                if let Some(l) = self.live.get_mut(&w.id) {
                    if l.generated == 0 {
                        l.cached = w.cached_tokens;
                    }
                }
            }
        }
        if !out.is_idle() {
            self.metrics
                .observe_iteration_tokens(out.num_scheduled_tokens() as u64);
        }
        self.sync_stats();
        out
    }

    /// Delivers a step's outputs at its end, then applies the aborts that waited for it.
    fn deliver(&mut self, out: StepOutput) {
        let end = out.end;
        let mut stopped = Vec::new();
        for t in &out.tokens {
            let Some(l) = self.live.get_mut(&t.id) else {
                continue;
            };
            self.metrics.inc_generation_tokens(1);
            if t.index == 0 {
                let cached = l.cached.min(l.prompt_len);
                self.metrics
                    .inc_prompt_tokens_local((l.prompt_len - cached) as u64, cached as u64);
                self.metrics.observe_ttft((end - l.arrival).max(0.0));
            } else {
                self.metrics
                    .observe_inter_token_latency((end - l.last_token).max(0.0));
            }
            l.last_token = end;
            if l.stop_string.is_some() {
                continue;
            }
            l.generated += 1;
            // vLLM leaves a stop token's text out unless include_stop_str_in_output.
            let stop_token = !l.include_stop
                && out
                    .finished
                    .iter()
                    .any(|f| f.id == t.id && f.stop_token == Some(t.token));
            let piece = if stop_token {
                String::new()
            } else {
                self.tok.decode(&[t.token])
            };
            let prev = l.text.len();
            l.text.push_str(&piece);
            let mut emit = piece;
            if l.generated as usize <= l.min_tokens {
                l.stop_check_from = l.text.len();
            } else if let Some((pos, end, s)) = find_stop(&l.text, l.stop_check_from, &l.stop) {
                let cut = if l.include_stop { end } else { pos };
                emit = l.text[prev.min(cut)..cut].to_owned();
                l.text.truncate(cut);
                l.stop_string = Some(s);
                stopped.push(t.id);
            }
            if !l.cancelled {
                l.slot.push(Ev::Token {
                    id: t.token,
                    text: emit,
                });
            }
        }
        self.in_flight.clear();
        for f in out.finished {
            self.finished(f);
        }
        let aborts: Vec<RequestId> = std::mem::take(&mut self.deferred_aborts)
            .into_iter()
            .chain(stopped)
            .collect();
        for id in aborts {
            self.abort_now(id, end);
        }
        self.sync_stats();
    }

    /// `created_cache_tokens`: full prompt blocks this request newly stored.
    pub(crate) fn created_cache_tokens(&self, prompt_len: usize, cached: usize) -> u32 {
        if !self.prefix_caching {
            return 0;
        }
        let full = prompt_len / self.block_size * self.block_size;
        full.saturating_sub(cached) as u32
    }
}

/// Waits until something calls [`Core::wake`] (or `limit` passes).
async fn wait_for_wake(core: &Rc<RefCell<Core>>, limit: Duration) {
    let start = core.borrow().wake_gen;
    let woken = poll_fn(|cx| {
        let mut c = core.borrow_mut();
        if c.wake_gen != start || c.stopping {
            Poll::Ready(())
        } else {
            c.engine_waker = Some(cx.waker().clone());
            Poll::Pending
        }
    });
    monoio::select! {
        _ = woken => {},
        _ = monoio::time::sleep(limit) => {},
    }
}

/// Lets every other ready task run once before continuing.
async fn yield_once() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

/// The engine task: steps while there is work, sleeping until each step's planned end.
pub(crate) async fn run(core: Rc<RefCell<Core>>) {
    let mut prev_end = 0.0_f64;
    let mut busy = false;
    loop {
        let (stopping, has_work, zero, now) = {
            let c = core.borrow();
            (
                c.stopping,
                c.sched.has_work() || c.sched.next_arrival().is_some(),
                c.zero,
                c.vnow(),
            )
        };
        if stopping {
            return;
        }
        if !has_work {
            busy = false;
            wait_for_wake(&core, Duration::from_millis(100)).await;
            continue;
        }
        let start = if busy && !zero {
            prev_end
        } else {
            prev_end.max(now)
        };
        let mut out = core.borrow_mut().plan(start);
        if out.is_idle() {
            // Nothing fits (should not happen: admission refuses what could never run).
            {
                let mut c = core.borrow_mut();
                c.publish_kv_events(&mut out);
                c.in_flight.clear();
            }
            busy = false;
            prev_end = start;
            wait_for_wake(&core, Duration::from_millis(5)).await;
            continue;
        }
        let end = out.end;
        if zero {
            yield_once().await;
        } else {
            let target = core.borrow().epoch + Duration::from_secs_f64(end.max(0.0));
            let wait = target.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                monoio::time::sleep(wait).await;
            }
        }
        {
            let mut c = core.borrow_mut();
            c.publish_kv_events(&mut out);
            c.deliver(out);
        }
        prev_end = end;
        busy = true;
        if !zero {
            // Let response tasks write before the next step when steps take no time to sleep.
            yield_once().await;
        }
    }
}

/// vLLM's `check_stop_strings` over `text`, for matches that end after byte `from` (the text
/// of the first `min_tokens` tokens cannot stop the request): the stop string that completes
/// earliest, ties in list order, as `(start, end, stop)`.
fn find_stop(text: &str, from: usize, stop: &[String]) -> Option<(usize, usize, String)> {
    let mut best: Option<(usize, usize, &String)> = None;
    for s in stop.iter().filter(|s| !s.is_empty()) {
        let mut start = from.saturating_sub(s.len() - 1).min(text.len());
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        if let Some(p) = text[start..].find(s.as_str()) {
            let pos = start + p;
            let end = pos + s.len();
            if best.is_none_or(|(_, e, _)| end < e) {
                best = Some((pos, end, s));
            }
        }
    }
    best.map(|(p, e, s)| (p, e, s.clone()))
}

#[cfg(test)]
mod stop_tests {
    use super::find_stop;

    fn stops(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_stop_string_completing_first_wins() {
        // "cd" ends at 4, "bcde" at 5: vLLM picks the one that completes first.
        let got = find_stop("abcdef", 0, &stops(&["bcde", "cd"]));
        assert_eq!(got, Some((2, 4, "cd".to_owned())));
        // Ties go to list order.
        let got = find_stop("xaby", 0, &stops(&["b", "ab"]));
        assert_eq!(got, Some((2, 3, "b".to_owned())));
        let got = find_stop("xaby", 0, &stops(&["ab", "b"]));
        assert_eq!(got, Some((1, 3, "ab".to_owned())));
    }

    #[test]
    fn text_of_the_min_tokens_prefix_cannot_stop() {
        // The prefix "ab" (min_tokens' text) holds "a": only a match ending after it counts.
        assert_eq!(
            find_stop("abca", 2, &stops(&["a"])),
            Some((3, 4, "a".to_owned()))
        );
        // A match straddling the boundary counts (it ends after the prefix).
        assert_eq!(
            find_stop("abcd", 2, &stops(&["bc"])),
            Some((1, 3, "bc".to_owned()))
        );
        assert_eq!(find_stop("abcd", 2, &stops(&["ab"])), None);
    }
}
