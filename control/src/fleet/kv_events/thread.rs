//! The blocking I/O around a [`StreamCore`]: one thread per stream subscribes to the engine's
//! PUB socket, runs replays on the replay endpoint, feeds the core and sleeps out its backoff.
//! Every wait is bounded (connect and handshake, each read, each replay), so the thread sees its
//! stop flag within [`IDLE_WAIT`] plus at most one replay's deadline. A dead, hung, flooding or
//! garbage-sending publisher costs this thread only: data cores never wait on it.

use super::core::{MirrorSink, Step, StreamCore};
use super::sink::{capacity_of, IndexSink, ReplicaMirror};
use inferrail_events::{replay_from, Received, ReplayLimits, Subscriber, SubscriberConfig};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long one read waits before the thread looks at its stop flag again.
pub const IDLE_WAIT: Duration = Duration::from_millis(250);

/// Bound on connecting and on the ZMTP handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Largest event message accepted (vLLM batches one engine step: a few thousand blocks).
const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// One stream to follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPlan {
    /// The replica's id (for log lines).
    pub replica: String,
    /// The data-parallel rank.
    pub rank: usize,
    /// The PUB endpoint, `tcp://host:port`.
    pub endpoint: String,
    /// The replay endpoint, if the engine has one.
    pub replay_endpoint: Option<String>,
    /// Topic prefix.
    pub topic: Vec<u8>,
}

/// Starts the stream's thread. It runs until `stop` is set.
pub fn spawn(
    plan: StreamPlan,
    mut core: StreamCore,
    mut sink: IndexSink,
    mirror: Arc<ReplicaMirror>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("inferrail-kv-{}", plan.rank))
        .spawn(move || run(&plan, &mut core, &mut sink, &mirror, &stop))
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Sleeps `wait` in slices, returning early (false) when stopped.
fn sleep_unless_stopped(wait: Duration, stop: &AtomicBool) -> bool {
    let mut left = wait;
    while !left.is_zero() {
        if stop.load(Relaxed) {
            return false;
        }
        let slice = left.min(Duration::from_millis(50));
        std::thread::sleep(slice);
        left -= slice;
    }
    !stop.load(Relaxed)
}

fn run(
    plan: &StreamPlan,
    core: &mut StreamCore,
    sink: &mut IndexSink,
    mirror: &ReplicaMirror,
    stop: &AtomicBool,
) {
    let config = SubscriberConfig {
        endpoint: plan.endpoint.clone(),
        topic: plan.topic.clone(),
        connect_timeout: CONNECT_TIMEOUT,
        idle_timeout: IDLE_WAIT,
        max_message_bytes: MAX_MESSAGE_BYTES,
    };
    let who = format!(
        "replica {} KV events {} (rank {})",
        plan.replica, plan.endpoint, plan.rank
    );
    // Logged once per transition, not once per failed attempt.
    let mut failing = false;
    while !stop.load(Relaxed) {
        let mut subscriber = match Subscriber::connect(&config) {
            Ok(s) => s,
            Err(e) => {
                if !failing {
                    eprintln!("inferrail: {who}: {e}; retrying with backoff");
                    failing = true;
                }
                let wait = core.connect_failed(sink);
                if !sleep_unless_stopped(wait, stop) {
                    return;
                }
                continue;
            }
        };
        if failing {
            eprintln!("inferrail: {who}: subscribed");
            failing = false;
        }
        let mut step = core.connected(sink);
        let lost = loop {
            if let Some(blocks) = capacity_of(mirror) {
                core.set_capacity_blocks(blocks);
            }
            if let Step::Replay { from } = step {
                step = replay(plan, core, sink, from, &who);
                continue;
            }
            if stop.load(Relaxed) {
                return;
            }
            match subscriber.receive() {
                Ok(Received::Message(msg)) => step = core.live(msg, now_unix(), sink),
                Ok(Received::Malformed { .. }) => core.malformed(),
                Ok(Received::Idle) => {}
                Err(e) => break e,
            }
        };
        eprintln!("inferrail: {who}: {lost}; reconnecting");
        let wait = core.disconnected(sink);
        if !sleep_unless_stopped(wait, stop) {
            return;
        }
    }
}

/// Runs one replay from `from` and feeds its result to the core.
fn replay(
    plan: &StreamPlan,
    core: &mut StreamCore,
    sink: &mut dyn MirrorSink,
    from: u64,
    who: &str,
) -> Step {
    let replies = match &plan.replay_endpoint {
        Some(endpoint) => match replay_from(endpoint, from, ReplayLimits::default()) {
            Ok(replies) => Some(replies),
            Err(e) => {
                eprintln!("inferrail: {who}: replay from {from} failed: {e}");
                None
            }
        },
        None => None,
    };
    core.replay_finished(replies, now_unix(), sink)
}
