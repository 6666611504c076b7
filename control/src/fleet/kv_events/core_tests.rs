use super::*;
use inferrail_events::BlockStored;

/// What the core did to its sink, in order; an applied batch is named by its timestamp.
#[derive(Debug, Clone, PartialEq)]
enum Op {
    Apply(f64),
    Clear,
    Synced(bool),
}

#[derive(Default)]
struct Recorder(Vec<Op>);

impl MirrorSink for Recorder {
    fn apply(&mut self, batch: Arc<KvEventBatch>) {
        self.0.push(Op::Apply(batch.ts));
    }
    fn clear(&mut self) {
        self.0.push(Op::Clear);
    }
    fn set_synced(&mut self, synced: bool) {
        self.0.push(Op::Synced(synced));
    }
}

impl Recorder {
    fn take(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.0)
    }
}

fn stored(block_size: u64) -> WireEvent {
    WireEvent::BlockStored(BlockStored::gpu(
        [7],
        None,
        vec![1; block_size as usize],
        block_size,
    ))
}

/// Message `seq` carrying one stored block, its batch stamped `seq + 1` seconds.
fn msg(seq: u64) -> EventMessage {
    msg_with(seq, vec![stored(4)])
}

fn msg_with(seq: u64, events: Vec<WireEvent>) -> EventMessage {
    let batch = KvEventBatch {
        ts: seq as f64 + 1.0,
        events,
        data_parallel_rank: Some(0),
    };
    EventMessage {
        topic: Vec::new(),
        seq,
        payload: batch.encode(),
    }
}

fn core(replay: bool) -> (StreamCore, Arc<StreamStats>) {
    let stats = Arc::new(StreamStats::default());
    (
        StreamCore::new(replay, TrackerLimits::default(), 4, stats.clone()),
        stats,
    )
}

const NOW: f64 = 100.0;

#[test]
fn a_stream_from_its_first_batch_is_trusted_while_connected() {
    let (mut c, stats) = core(false);
    let mut sink = Recorder::default();
    assert_eq!(c.connected(&mut sink), Step::Read);
    assert_eq!(sink.take(), vec![Op::Synced(false)]);
    assert_eq!(c.live(msg(0), NOW, &mut sink), Step::Read);
    assert_eq!(sink.take(), vec![Op::Apply(1.0), Op::Synced(true)]);
    c.live(msg(1), NOW, &mut sink);
    c.live(msg(1), NOW, &mut sink);
    assert_eq!(sink.take(), vec![Op::Apply(2.0)]);
    let f = stats.figures();
    assert_eq!((f.batches, f.events, f.duplicates), (2, 2, 1));
    assert_eq!(f.last_lag_us, 98_000_000);
    assert!(f.synced && f.connected);
    // Losing the connection distrusts the mirror at once: the engine may be restarting.
    c.disconnected(&mut sink);
    assert_eq!(sink.take(), vec![Op::Synced(false)]);
    assert!(!stats.figures().synced);
}

#[test]
fn without_replay_a_reconnect_stays_unsynced_until_the_engine_restarts() {
    let (mut c, stats) = core(false);
    let mut sink = Recorder::default();
    c.connected(&mut sink);
    c.live(msg(0), NOW, &mut sink);
    c.disconnected(&mut sink);
    c.connected(&mut sink);
    sink.take();
    c.live(msg(5), NOW, &mut sink);
    assert_eq!(sink.take(), vec![Op::Apply(6.0)]);
    // A new engine process starts from 0 with an empty cache: clear, then trusted again.
    c.live(msg(0), NOW, &mut sink);
    assert_eq!(
        sink.take(),
        vec![Op::Clear, Op::Apply(1.0), Op::Synced(true)]
    );
    let f = stats.figures();
    assert_eq!(
        (f.restarts, f.resyncs, f.connects, f.disconnects),
        (1, 1, 2, 1)
    );
}

#[test]
fn a_gap_is_replayed_and_the_held_batch_follows_in_order() {
    let (mut c, stats) = core(true);
    let mut sink = Recorder::default();
    assert_eq!(c.connected(&mut sink), Step::Replay { from: 0 });
    // Nothing was published yet: the cache is known empty.
    assert_eq!(c.replay_finished(Some(vec![]), NOW, &mut sink), Step::Read);
    c.live(msg(0), NOW, &mut sink);
    c.live(msg(1), NOW, &mut sink);
    sink.take();
    assert_eq!(c.live(msg(3), NOW, &mut sink), Step::Replay { from: 2 });
    assert_eq!(sink.take(), vec![]);
    assert_eq!(
        c.replay_finished(Some(vec![msg(2), msg(3)]), NOW, &mut sink),
        Step::Read
    );
    // The replayed 2 and 3 apply; the held 3 is then a duplicate.
    assert_eq!(sink.take(), vec![Op::Apply(3.0), Op::Apply(4.0)]);
    let f = stats.figures();
    assert!(f.synced);
    assert_eq!((f.gaps, f.replays, f.replayed, f.duplicates), (1, 2, 2, 1));
}

#[test]
fn a_failed_replay_unsyncs_and_the_held_batch_still_applies() {
    let (mut c, stats) = core(true);
    let mut sink = Recorder::default();
    c.connected(&mut sink);
    c.replay_finished(Some(vec![]), NOW, &mut sink);
    c.live(msg(0), NOW, &mut sink);
    sink.take();
    assert_eq!(c.live(msg(4), NOW, &mut sink), Step::Replay { from: 1 });
    assert_eq!(c.replay_finished(None, NOW, &mut sink), Step::Read);
    assert_eq!(sink.take(), vec![Op::Apply(5.0), Op::Synced(false)]);
    assert_eq!(stats.figures().replay_failures, 1);
}

#[test]
fn a_batch_that_does_not_decode_is_a_lost_batch() {
    let (mut c, stats) = core(false);
    let mut sink = Recorder::default();
    c.connected(&mut sink);
    c.live(msg(0), NOW, &mut sink);
    sink.take();
    let garbage = EventMessage {
        topic: Vec::new(),
        seq: 1,
        payload: vec![0xc1, 0xff],
    };
    c.live(garbage, NOW, &mut sink);
    assert_eq!(sink.take(), vec![Op::Synced(false)]);
    assert_eq!(stats.figures().decode_errors, 1);
    // An AllBlocksCleared makes the mirror complete again.
    c.live(
        msg_with(2, vec![WireEvent::AllBlocksCleared]),
        NOW,
        &mut sink,
    );
    assert_eq!(sink.take(), vec![Op::Apply(3.0), Op::Synced(true)]);
}

#[test]
fn a_stream_joined_late_syncs_once_the_engine_capacity_was_stored() {
    let (mut c, _) = core(false);
    let mut sink = Recorder::default();
    c.set_capacity_blocks(2);
    c.connected(&mut sink);
    c.live(msg(9), NOW, &mut sink);
    assert_eq!(sink.take(), vec![Op::Synced(false), Op::Apply(10.0)]);
    c.live(msg(10), NOW, &mut sink);
    assert_eq!(sink.take(), vec![Op::Apply(11.0), Op::Synced(true)]);
}

#[test]
fn another_block_size_is_reported() {
    let (mut c, stats) = core(false);
    let mut sink = Recorder::default();
    c.connected(&mut sink);
    assert_eq!(stats.figures().mismatched_block_size, None);
    c.live(msg_with(0, vec![stored(16)]), NOW, &mut sink);
    assert_eq!(stats.figures().mismatched_block_size, Some(16));
}
