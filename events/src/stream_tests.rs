use super::*;
use proptest::prelude::*;

fn tracker(replay: bool) -> StreamTracker {
    StreamTracker::new(
        replay,
        TrackerLimits {
            max_held: 3,
            ..TrackerLimits::default()
        },
    )
}

#[test]
fn in_order_from_zero_is_synced_and_duplicates_are_dropped() {
    let mut t = tracker(false);
    assert_eq!(t.connected(), Next::Read);
    assert_eq!(t.sync(), SyncState::Unsynced(UnsyncedBy::Start));
    for s in 0..3 {
        assert_eq!(t.message(s), Verdict::Apply);
    }
    assert_eq!(t.sync(), SyncState::Synced);
    assert_eq!(t.message(1), Verdict::Duplicate);
    assert_eq!(t.expected(), Some(3));
}

#[test]
fn joining_mid_stream_is_unsynced_until_the_cache_is_known_complete() {
    let mut t = tracker(false);
    t.connected();
    assert_eq!(t.message(40), Verdict::Apply);
    assert_eq!(t.sync(), SyncState::Unsynced(UnsyncedBy::Start));
    t.set_capacity_blocks(10);
    t.stored(6);
    assert_eq!(t.sync(), SyncState::Unsynced(UnsyncedBy::Start));
    t.stored(4);
    assert_eq!(
        t.sync(),
        SyncState::Synced,
        "a capacity's worth of blocks stored since"
    );
    let mut t = tracker(false);
    t.connected();
    t.message(40);
    t.cleared();
    assert_eq!(t.sync(), SyncState::Synced, "AllBlocksCleared");
}

#[test]
fn a_gap_without_replay_unsyncs_and_a_restart_resyncs() {
    let mut t = tracker(false);
    t.connected();
    t.message(0);
    t.message(1);
    assert_eq!(t.message(5), Verdict::Apply);
    assert_eq!(t.sync(), SyncState::Unsynced(UnsyncedBy::Gap));
    assert_eq!(t.message(0), Verdict::ClearThenApply);
    assert_eq!(t.sync(), SyncState::Synced);
    assert_eq!(t.expected(), Some(1));
}

#[test]
fn a_gap_is_filled_by_replay_and_the_held_messages_follow() {
    let mut t = tracker(true);
    assert_eq!(t.connected(), Next::Replay { from: 0 });
    t.replay_done(true);
    assert_eq!(t.sync(), SyncState::Synced, "nothing published yet");
    t.message(0);
    t.message(1);
    assert_eq!(t.message(4), Verdict::HoldAndReplay { from: 2 });
    assert_eq!(t.message(5), Verdict::Hold);
    for s in 2..6 {
        assert_eq!(t.replayed(s), Verdict::Apply, "replayed {s}");
    }
    t.replay_done(true);
    // The held 4 and 5 are duplicates now.
    assert_eq!(t.message(4), Verdict::Duplicate);
    assert_eq!(t.message(5), Verdict::Duplicate);
    assert_eq!(t.message(6), Verdict::Apply);
    assert_eq!(t.sync(), SyncState::Synced);
}

#[test]
fn a_replay_that_cannot_reach_back_or_fails_unsyncs() {
    let mut t = tracker(true);
    t.connected();
    t.replay_done(true);
    t.message(0);
    assert_eq!(t.message(9), Verdict::HoldAndReplay { from: 1 });
    // The buffer starts at 5: 1..=4 are lost.
    assert_eq!(t.replayed(5), Verdict::Apply);
    assert_eq!(t.sync(), SyncState::Unsynced(UnsyncedBy::Gap));
    for s in 6..10 {
        assert_eq!(t.replayed(s), Verdict::Apply);
    }
    t.replay_done(true);
    assert_eq!(t.message(9), Verdict::Duplicate);

    let mut t = tracker(true);
    t.connected();
    t.replay_done(true);
    t.message(0);
    t.message(3);
    t.replay_done(false);
    assert_eq!(t.sync(), SyncState::Unsynced(UnsyncedBy::Gap));
    // The held message starts the stream again (no replay loop).
    assert_eq!(t.message(3), Verdict::Apply);
    assert_eq!(t.expected(), Some(4));
}

#[test]
fn too_much_held_during_a_replay_gives_up_on_it() {
    let mut t = tracker(true);
    t.connected();
    for s in 10..13 {
        assert_eq!(t.message(s), Verdict::Hold);
    }
    assert_eq!(t.message(13), Verdict::DropHeldThenApply);
    assert!(!t.replaying());
    assert_eq!(t.sync(), SyncState::Unsynced(UnsyncedBy::Overflow));
    assert_eq!(
        t.replayed(0),
        Verdict::Duplicate,
        "late replies are ignored"
    );
}

#[test]
fn reconnecting_replays_from_the_expected_number_and_backs_off() {
    let mut t = tracker(true);
    t.connected();
    t.replay_done(true);
    t.message(0);
    assert_eq!(t.disconnected(), Duration::from_millis(100));
    assert_eq!(t.connected(), Next::Replay { from: 1 });
    // A connection that delivered nothing doubles the wait, up to the maximum.
    assert_eq!(t.disconnected(), Duration::from_millis(200));
    t.connected();
    assert_eq!(t.disconnected(), Duration::from_millis(400));
    for _ in 0..10 {
        t.connected();
        t.disconnected();
    }
    t.connected();
    assert_eq!(t.disconnected(), Duration::from_secs(5));
    t.connected();
    t.message(1);
    assert_eq!(
        t.disconnected(),
        Duration::from_millis(100),
        "reset after a delivery"
    );

    let mut t = tracker(false);
    t.connected();
    t.message(0);
    t.disconnected();
    assert_eq!(t.connected(), Next::Read);
    assert_eq!(t.sync(), SyncState::Unsynced(UnsyncedBy::Disconnect));
}

/// What happens to the live stream between two publishes in the model below.
#[derive(Debug, Clone)]
enum Step {
    Publish,
    /// The next published batch is lost on the wire (not in the replay buffer's way).
    Lose,
    Reconnect,
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => Just(Step::Publish),
        2 => Just(Step::Lose),
        1 => Just(Step::Reconnect),
        1 => Just(Step::Restart),
    ]
}

proptest! {
    /// A publisher with a replay buffer of `window` batches, a lossy link, reconnects and
    /// restarts, driven exactly as a caller would: whenever the tracker says Synced, the
    /// batches applied since the mirror was last cleared are exactly the current process's
    /// batches 0..expected, each once, in order.
    #[test]
    fn synced_means_nothing_missing(
        steps in proptest::collection::vec(step(), 1..120),
        window in 1usize..8,
        has_replay in any::<bool>(),
    ) {
        let mut t = StreamTracker::new(has_replay, TrackerLimits { max_held: 4, ..TrackerLimits::default() });
        let mut next_seq: u64 = 0; // the publisher's next number
        let mut applied: Vec<u64> = Vec::new(); // since the mirror was last cleared
        let mut held: Vec<u64> = Vec::new();
        let apply = |v: Verdict, s: u64, applied: &mut Vec<u64>, held: &mut Vec<u64>| match v {
            Verdict::Apply => applied.push(s),
            Verdict::ClearThenApply => { applied.clear(); applied.push(s); }
            Verdict::Duplicate => {}
            Verdict::Hold | Verdict::HoldAndReplay { .. } => held.push(s),
            Verdict::DropHeldThenApply => { held.clear(); applied.push(s); }
        };
        // Runs a replay against the buffer (the last `window` batches), then re-feeds held.
        let replay = |t: &mut StreamTracker, from: u64, next_seq: u64, applied: &mut Vec<u64>, held: &mut Vec<u64>| {
            let oldest = next_seq.saturating_sub(window as u64);
            for s in from.max(oldest)..next_seq {
                if !t.replaying() { break; }
                let v = t.replayed(s);
                apply(v, s, applied, held);
            }
            let was = t.replaying();
            t.replay_done(true);
            if was {
                for s in std::mem::take(held) {
                    let v = t.message(s);
                    apply(v, s, applied, held);
                }
            }
        };
        if let Next::Replay { from } = t.connected() {
            replay(&mut t, from, next_seq, &mut applied, &mut held);
        }
        let mut lose_next = false;
        for st in steps {
            match st {
                Step::Publish => {
                    let s = next_seq;
                    next_seq += 1;
                    if lose_next { lose_next = false; continue; }
                    let v = t.message(s);
                    apply(v, s, &mut applied, &mut held);
                    if let Verdict::HoldAndReplay { from } = v {
                        replay(&mut t, from, next_seq, &mut applied, &mut held);
                    }
                }
                Step::Lose => lose_next = true,
                Step::Reconnect => {
                    t.disconnected();
                    held.clear();
                    // Batches published while away are lost live.
                    next_seq += 1;
                    if let Next::Replay { from } = t.connected() {
                        replay(&mut t, from, next_seq, &mut applied, &mut held);
                    }
                }
                Step::Restart => {
                    t.disconnected();
                    held.clear();
                    next_seq = 0;
                    if let Next::Replay { from } = t.connected() {
                        replay(&mut t, from, next_seq, &mut applied, &mut held);
                    }
                }
            }
            if t.sync() == SyncState::Synced && !t.replaying() {
                let e = t.expected().unwrap_or(0);
                let want: Vec<u64> = (0..e).collect();
                prop_assert_eq!(&applied, &want);
            }
        }
    }
}
