//! JSON-lines plumbing shared by the shadow worker and the decision log: a buffered line writer
//! flushed on a deadline, the observer thread loop that feeds it, and the on-disk form of a
//! routing candidate (written by both logs, read back by the shadow replay).

use crate::observe::inputs::ShadowInputs;
use crossbeam_channel::{Receiver, Select, Sender};
use inferrail_dataplane::predict::PromptFacts;
use inferrail_dataplane::Snapshot;
use inferrail_routing::{BlockHash, BrainParams, Candidate, CostModelParams, EngineView, PoolRoom};
use serde_json::{json, Value};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest time a written line may sit in the buffer before it is flushed to the file.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// A JSON-lines file opened for appending, buffered, flushed within [`FLUSH_EVERY`] of the
/// oldest unflushed line. After the first I/O error it stops writing and keeps that error.
pub(crate) struct LineWriter {
    out: BufWriter<File>,
    /// When the oldest line not yet flushed was written.
    dirty_since: Option<Instant>,
    error: Option<io::Error>,
}

impl LineWriter {
    /// Opens (creating if needed) `path` for appending.
    pub(crate) fn open(path: &Path) -> io::Result<LineWriter> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(LineWriter {
            out: BufWriter::with_capacity(64 * 1024, file),
            dirty_since: None,
            error: None,
        })
    }

    /// Appends `value` as one line; `now` starts the flush deadline if the buffer was clean.
    pub(crate) fn write(&mut self, value: &Value, now: Instant) {
        if self.error.is_some() {
            return;
        }
        let res = serde_json::to_writer(&mut self.out, value)
            .map_err(io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"));
        match res {
            Ok(()) => {
                self.dirty_since.get_or_insert(now);
            }
            Err(e) => self.error = Some(e),
        }
    }

    /// When the buffer must be flushed next, if it holds anything.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.dirty_since.map(|t| t + FLUSH_EVERY)
    }

    /// Flushes if the deadline has passed at `now`.
    pub(crate) fn flush_if_due(&mut self, now: Instant) {
        if self.deadline().is_some_and(|d| now >= d) {
            self.flush();
        }
    }

    fn flush(&mut self) {
        self.dirty_since = None;
        if self.error.is_none() {
            if let Err(e) = self.out.flush() {
                self.error = Some(e);
            }
        }
    }

    /// The first I/O error, as text, if writing failed.
    pub(crate) fn error_text(&self) -> Option<String> {
        self.error.as_ref().map(ToString::to_string)
    }

    /// Flushes everything and returns the first I/O error, if any.
    pub(crate) fn finish(mut self) -> io::Result<()> {
        self.flush();
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// An observer thread draining a channel into a handler; see [`spawn_worker`].
pub(crate) struct Worker {
    /// Dropped to stop the thread: its disconnection wakes a thread blocked on an empty queue.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Worker {
    /// Asks the thread to stop (it handles what is already queued, then flushes) and waits.
    /// Returns the writer's first I/O error, if any.
    pub(crate) fn stop(mut self) -> io::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> io::Result<()> {
        self.stop = None;
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("observer thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// Starts thread `name`: it builds its handler with `make` (on the thread, so the handler need
/// not be `Send`), passes every item from `rx` to it together with the writer, and flushes the
/// writer within [`FLUSH_EVERY`] of each write. It ends when every sender is gone or on
/// [`Worker::stop`], handling the items already queued first and flushing at the end. Idle (an
/// empty queue and nothing to flush) it sleeps until an item or the stop arrives: no timer.
pub(crate) fn spawn_worker<T, M, H>(
    name: &str,
    rx: Receiver<T>,
    writer: Option<LineWriter>,
    make: M,
) -> io::Result<Worker>
where
    T: Send + 'static,
    M: FnOnce() -> H + Send + 'static,
    H: FnMut(T, Option<&mut LineWriter>),
{
    let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
    let thread = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || run(rx, writer, stopped, make()))?;
    Ok(Worker {
        stop: Some(stop),
        thread: Some(thread),
    })
}

fn run<T, H>(
    rx: Receiver<T>,
    mut writer: Option<LineWriter>,
    stopped: Receiver<()>,
    mut handle: H,
) -> io::Result<()>
where
    H: FnMut(T, Option<&mut LineWriter>),
{
    loop {
        let mut select = Select::new();
        let item = select.recv(&rx);
        select.recv(&stopped);
        // A timed wait only while a written line waits for its flush.
        let ready = match writer.as_ref().and_then(LineWriter::deadline) {
            Some(deadline) => select.select_deadline(deadline).ok(),
            None => Some(select.select()),
        };
        match ready {
            None => {}
            Some(op) if op.index() == item => match op.recv(&rx) {
                Ok(value) => handle(value, writer.as_mut()),
                Err(_) => break,
            },
            Some(op) => {
                // Stopped (the sender is dropped, so this is a disconnection).
                let _ = op.recv(&stopped);
                // Bounded drain: what is queued now, not what producers keep adding.
                for _ in 0..rx.len() {
                    match rx.try_recv() {
                        Ok(value) => handle(value, writer.as_mut()),
                        Err(_) => break,
                    }
                }
                break;
            }
        }
        if let Some(w) = writer.as_mut() {
            w.flush_if_due(Instant::now());
        }
    }
    writer.map_or(Ok(()), LineWriter::finish)
}

/// The logged form of a candidate: its replica index and id, and every load field a policy
/// reads. [`candidate_from_json`] must read back exactly what this writes.
pub(crate) fn candidate_json(c: &Candidate, snapshot: &Snapshot) -> Value {
    json!({
        "index": c.replica,
        "id": snapshot.replicas.get(c.replica).map(|r| r.id()),
        "in_flight": c.in_flight,
        "pending": c.pending,
        "engine": c.engine.map(|e| json!({
            "running": e.running,
            "waiting": e.waiting,
            "kv_cache_usage": e.kv_cache_usage,
            "age_micros": e.age_micros,
            "own_in_flight": e.own_in_flight,
        })),
        "cached_tokens": c.cached_tokens,
        "prompt_tokens": c.prompt_tokens,
        "key": c.key,
        "queued_prefill_secs": c.queued_prefill_secs,
        "tier_secs": c.tier_secs,
        "room": c.room.map(|r| json!({"free_blocks": r.free_blocks, "reuse": r.reuse})),
    })
}

/// The logged form of a shadow decision's inputs: the prompt's length and leading block hashes
/// (as many as prefix_hash reads), the rough length, and the model's routing settings.
/// [`inputs_from_json`] reads back exactly what this writes.
pub(crate) fn inputs_json(i: &ShadowInputs) -> Value {
    let p = &i.params;
    json!({
        "prompt": i.prompt.as_ref().map(|f| json!({
            "tokens": f.tokens,
            "block_size": f.block_size,
            "hashes": f.hashes.iter().take(p.prefix_blocks as usize)
                .map(|h| format!("{:032x}", h.0)).collect::<Vec<_>>(),
        })),
        "approx_tokens": i.approx_tokens,
        "params": {
            "epsilon": p.epsilon,
            "bounded_load_floor": p.bounded_load_floor,
            "kappa": p.kappa,
            "spill_weight": p.spill_weight,
            "short_prompt_tokens": p.short_prompt_tokens,
            "prefill_token_secs": p.cost.prefill_token_secs,
            "prefill_pair_secs": p.cost.prefill_pair_secs,
            "prefill_fixed_secs": p.cost.prefill_fixed_secs,
            "decode_interference_secs": p.cost.decode_interference_secs,
            "cpu_load_token_secs": p.cost.cpu_load_token_secs,
            "storage_load_token_secs": p.cost.storage_load_token_secs,
            "cache_weight": p.cache_weight,
            "load_weight": p.load_weight,
            "prefix_blocks": p.prefix_blocks,
            "hot_blocks": p.hot_blocks,
            "hot_utilization": p.hot_utilization,
            "session_affinity": p.session_affinity,
        },
    })
}

/// Reads back inputs written by [`inputs_json`], or `None` when a field is missing or malformed.
///
/// Lines written before `bounded_load_floor` existed lack it; their routers had no floor, so they
/// read as floor 1 (not the config default 8) and their picks still reproduce. A floor that is
/// present must be a whole number >= 1.
pub(crate) fn inputs_from_json(v: &Value) -> Option<ShadowInputs> {
    let p = v.get("params")?;
    let f = |name: &str| p.get(name).and_then(Value::as_f64);
    let n = |name: &str| {
        p.get(name)
            .and_then(Value::as_u64)
            .and_then(|x| u32::try_from(x).ok())
    };
    let def = CostModelParams::default();
    let params = BrainParams {
        epsilon: f("epsilon")?,
        bounded_load_floor: match p.get("bounded_load_floor") {
            None => 1,
            Some(x) => x.as_u64().filter(|&n| n >= 1)?,
        },
        kappa: f("kappa")?,
        // Lines written before the spill weight existed lack it; their routers priced no spill.
        spill_weight: match p.get("spill_weight") {
            None => 0.0,
            Some(x) => x.as_f64().filter(|w| w.is_finite() && *w >= 0.0)?,
        },
        short_prompt_tokens: n("short_prompt_tokens")?,
        cost: CostModelParams {
            prefill_token_secs: f("prefill_token_secs")?,
            prefill_pair_secs: f("prefill_pair_secs")?,
            prefill_fixed_secs: f("prefill_fixed_secs")?,
            decode_interference_secs: f("decode_interference_secs")?,
            // Lines written before the tier rates existed lack them; their candidates' tier
            // cost (always 0 then) is logged on each candidate, so any rate reproduces them.
            cpu_load_token_secs: f("cpu_load_token_secs").unwrap_or(def.cpu_load_token_secs),
            storage_load_token_secs: f("storage_load_token_secs")
                .unwrap_or(def.storage_load_token_secs),
        },
        cache_weight: f("cache_weight")?,
        load_weight: f("load_weight")?,
        prefix_blocks: n("prefix_blocks")?,
        hot_blocks: n("hot_blocks")?,
        hot_utilization: f("hot_utilization")?,
        session_affinity: p.get("session_affinity")?.as_bool()?,
    };
    let prompt = match v.get("prompt") {
        None | Some(Value::Null) => None,
        Some(pv) => {
            let hashes = pv
                .get("hashes")?
                .as_array()?
                .iter()
                .map(|h| u128::from_str_radix(h.as_str()?, 16).ok().map(BlockHash))
                .collect::<Option<Vec<BlockHash>>>()?;
            Some(PromptFacts {
                tokens: u32::try_from(pv.get("tokens")?.as_u64()?).ok()?,
                hashes: hashes.into(),
                block_size: u32::try_from(pv.get("block_size")?.as_u64()?).ok()?,
            })
        }
    };
    Some(ShadowInputs {
        prompt,
        approx_tokens: u32::try_from(v.get("approx_tokens")?.as_u64()?).ok()?,
        params,
    })
}

/// Reads back a candidate written by [`candidate_json`]: the candidate and its replica id, or
/// `None` naming nothing when a field is missing or out of range.
pub(crate) fn candidate_from_json(v: &Value) -> Option<(Candidate, String)> {
    let field = |name: &str| v.get(name).and_then(Value::as_u64);
    let replica = usize::try_from(field("index")?).ok()?;
    let in_flight = u32::try_from(field("in_flight")?).ok()?;
    let pending = u32::try_from(field("pending")?).ok()?;
    let id = v.get("id")?.as_str()?.to_string();
    let engine = match v.get("engine") {
        None | Some(Value::Null) => None,
        Some(e) => {
            let num = |name: &str| e.get(name).and_then(Value::as_f64);
            Some(EngineView {
                running: num("running")?,
                waiting: num("waiting")?,
                kv_cache_usage: num("kv_cache_usage")?,
                age_micros: e.get("age_micros").and_then(Value::as_u64)?,
                // Lines written before the field read as 0 (every engine request an other's).
                own_in_flight: e
                    .get("own_in_flight")
                    .and_then(Value::as_u64)
                    .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            })
        }
    };
    let cached_tokens = match v.get("cached_tokens") {
        None | Some(Value::Null) => None,
        Some(c) => Some(u32::try_from(c.as_u64()?).ok()?),
    };
    let prompt_tokens = v.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0);
    let secs = |name: &str| v.get(name).and_then(Value::as_f64).unwrap_or(0.0);
    // Lines written before the pool room existed lack it: their router priced no eviction.
    let room = match v.get("room") {
        None | Some(Value::Null) => None,
        Some(r) => Some(PoolRoom {
            free_blocks: u32::try_from(r.get("free_blocks")?.as_u64()?).ok()?,
            reuse: r.get("reuse")?.as_f64()?,
        }),
    };
    Some((
        Candidate {
            replica,
            key: v.get("key").and_then(Value::as_u64).unwrap_or(0),
            in_flight,
            pending,
            prompt_tokens,
            engine,
            cached_tokens,
            queued_prefill_secs: secs("queued_prefill_secs"),
            tier_secs: secs("tier_secs"),
            room,
        },
        id,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(floor: u64) -> ShadowInputs {
        ShadowInputs {
            prompt: Some(PromptFacts {
                tokens: 40,
                hashes: vec![BlockHash(7), BlockHash(9)].into(),
                block_size: 16,
            }),
            approx_tokens: 10,
            params: BrainParams {
                bounded_load_floor: floor,
                epsilon: 0.5,
                ..BrainParams::default()
            },
        }
    }

    #[test]
    fn inputs_round_trip_with_the_floor() {
        for floor in [1, 8, 64] {
            let written = inputs_json(&inputs(floor));
            assert_eq!(written["params"]["bounded_load_floor"], json!(floor));
            let read = inputs_from_json(&written).expect("reads back");
            assert_eq!(read.params, inputs(floor).params);
            assert_eq!(read.approx_tokens, 10);
        }
    }

    #[test]
    fn tier_rates_round_trip_and_old_lines_read_as_the_defaults() {
        let mut i = inputs(8);
        i.params.cost.cpu_load_token_secs = 1.5e-6;
        i.params.cost.storage_load_token_secs = 0.0;
        let written = inputs_json(&i);
        let read = inputs_from_json(&written).expect("reads back");
        assert_eq!(read.params.cost, i.params.cost);
        let mut old = written;
        let params = old["params"].as_object_mut().expect("params object");
        params.remove("cpu_load_token_secs");
        params.remove("storage_load_token_secs");
        let read = inputs_from_json(&old).expect("an old line stays readable");
        let def = CostModelParams::default();
        assert_eq!(
            (
                read.params.cost.cpu_load_token_secs,
                read.params.cost.storage_load_token_secs
            ),
            (def.cpu_load_token_secs, def.storage_load_token_secs)
        );
    }

    #[test]
    fn a_candidates_cache_and_tier_cost_round_trip() {
        let snap = super::test_support::snapshot(1);
        let c = Candidate {
            cached_tokens: Some(480),
            tier_secs: 0.0024,
            ..super::test_support::cand(2, 3, 1)
        };
        let (read, id) = candidate_from_json(&candidate_json(&c, &snap)).expect("reads back");
        assert_eq!((read, id.as_str()), (c, "r2"));
    }

    #[test]
    fn lines_without_the_floor_read_as_the_unfloored_guard() {
        let mut old = inputs_json(&inputs(8));
        let params = old["params"].as_object_mut().expect("params object");
        params.remove("bounded_load_floor");
        let read = inputs_from_json(&old).expect("an old line stays readable");
        assert_eq!(read.params.bounded_load_floor, 1);
        assert_eq!(read.params.epsilon, 0.5);
        // A floor that is there must be a whole number >= 1.
        for bad in [json!(0), json!(-1), json!(2.5), json!("8")] {
            let mut line = inputs_json(&inputs(8));
            line["params"]["bounded_load_floor"] = bad.clone();
            assert!(inputs_from_json(&line).is_none(), "{bad}");
        }
    }
}

/// Fixtures for the observer tests.
#[cfg(test)]
pub(crate) mod test_support {
    use inferrail_routing::Candidate;

    /// A candidate with these loads and no engine report.
    pub(crate) fn cand(replica: usize, in_flight: u32, pending: u32) -> Candidate {
        Candidate {
            replica,
            key: replica as u64 + 1,
            in_flight,
            pending,
            ..Candidate::default()
        }
    }

    use inferrail_dataplane::Snapshot;
    use std::path::PathBuf;

    /// A snapshot of `generation`: models `m0` (round_robin) and `m1` (p2c), replicas `r0`..`r3`
    /// serving both.
    pub(crate) fn snapshot(generation: u64) -> Snapshot {
        let yaml = "\
models:
  - name: m0
    policy: round_robin
  - name: m1
    policy: p2c
replicas:
  - {id: r0, url: 'http://127.0.0.1:9001', models: [m0, m1]}
  - {id: r1, url: 'http://127.0.0.1:9002', models: [m0, m1]}
  - {id: r2, url: 'http://127.0.0.1:9003', models: [m0, m1]}
  - {id: r3, url: 'http://127.0.0.1:9004', models: [m0, m1]}
";
        let config = inferrail_config::parse_str(yaml).expect("test config parses");
        let addrs: Vec<_> = (0..4)
            .map(|i| std::net::SocketAddr::from(([127, 0, 0, 1], 9001 + i)))
            .collect();
        let mut snap = Snapshot::from_config(&config, &addrs, 1);
        snap.generation = generation;
        snap
    }

    /// A fresh path in the temp directory, unique per test and process.
    pub(crate) fn temp_path(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!(
            "inferrail-{name}-{}-{:?}.jsonl",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_file(&path);
        path
    }
}
