//! Stopping engines and closing connections gives every descriptor back. Alone in its binary so
//! no other test opens descriptors meanwhile.

mod common;

use std::time::Duration;

use common::*;
use inferrail_sim::{Behavior, EngineOptions, ScriptedEngine};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

fn round() {
    let mut e = ScriptedEngine::start(EngineOptions::new("tiny")).unwrap();
    let addr = e.addr();
    for behavior in [
        Behavior::Instant,
        Behavior::Hang,
        Behavior::CloseBeforeResponse,
        Behavior::Stream {
            chunks: 50,
            interval: Duration::from_millis(10),
        },
    ] {
        e.set_behavior(behavior);
        let mut c = Client::new(addr);
        c.send(&post("/v1/chat/completions", CHAT_STREAM, ""));
        std::thread::sleep(Duration::from_millis(20));
        drop(c);
    }
    let _idle = Client::new(addr);
    e.set_behavior(Behavior::Refuse);
    e.set_behavior(Behavior::Instant);
    let _open = Client::new(addr);
    e.stop();
}

#[test]
fn no_descriptor_leaks() {
    round(); // warm up lazily opened descriptors
    let before = open_fds();
    for _ in 0..5 {
        round();
    }
    assert!(
        eventually(Duration::from_secs(2), || open_fds() <= before),
        "descriptors: {before} before, {} after",
        open_fds()
    );
}
