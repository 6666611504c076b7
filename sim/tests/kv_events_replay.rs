//! The KV event replay ROUTER socket against a hand-written ZMTP DEALER client: frame parity
//! with a real vLLM 0.32 capture (`events/tests/fixtures/kv_events/replay_frames.bin` and
//! `replay_from5_frames.bin`, from `/work/shared/fixtures/vllm/kv_events/`, answers to
//! start_seq 0 and 5), the `buffer_steps` window and ignored malformed requests.

#[path = "../../events/tests/kv_capture/mod.rs"]
mod kv_capture;
mod zmtp;

use kv_capture::typed_batches;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use inferrail_sim::kv_events::{
    KvEventBatch, KvEventPublisher, PublisherConfig, WireEvent, END_SEQ,
};
use kv_capture::container;
use zmtp::Zmtp;

const REPLAY_0: &[u8] = include_bytes!("../../events/tests/fixtures/kv_events/replay_frames.bin");
const REPLAY_5: &[u8] =
    include_bytes!("../../events/tests/fixtures/kv_events/replay_from5_frames.bin");

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn loopback(a: SocketAddr) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], a.port()))
}

fn start(topic: &str, buffer_steps: usize) -> (KvEventPublisher, SocketAddr) {
    let p = KvEventPublisher::start(PublisherConfig {
        endpoint: "tcp://*:0".into(),
        topic: topic.into(),
        replay_endpoint: Some("tcp://127.0.0.1:0".into()),
        buffer_steps,
        ..PublisherConfig::default()
    })
    .unwrap();
    let replay = loopback(p.replay_addr().unwrap());
    (p, replay)
}

fn batch(ts: f64) -> KvEventBatch {
    KvEventBatch {
        ts,
        events: vec![WireEvent::AllBlocksCleared],
        data_parallel_rank: Some(0),
    }
}

#[test]
fn kv_replay_frames_match_the_vllm_capture() {
    let batches = typed_batches();
    assert_eq!(batches.len(), 14);
    let (p, replay) = start("kv", 10_000);
    for (seq, topic, b) in &batches {
        assert_eq!((topic.as_str(), *seq), ("kv", p.published()));
        assert!(p.publish(b.clone()));
        wait_until("the batch to be published", || p.published() == seq + 1);
    }
    // A live subscriber is not needed for the buffer: batches are kept as published.
    let mut c = Zmtp::connect(replay, "DEALER", "ROUTER");
    let want0 = container(REPLAY_0);
    let want5 = container(REPLAY_5);
    assert_eq!(want0.len(), 15);
    assert_eq!(want5.len(), 10);
    let got0 = c.replay(0);
    assert_eq!(got0.len(), want0.len());
    for (i, (g, w)) in got0.iter().zip(&want0).enumerate() {
        assert_eq!(g, w, "replay from 0, message {i}");
    }
    assert_eq!(c.replay(5), want5);
    // The same connection serves again, and a start past the end gets only the end marker.
    assert_eq!(c.replay(0), want0);
    let end = c.replay(14);
    assert_eq!(end, vec![vec![vec![], vec![], END_SEQ.to_vec(), vec![]]]);
    assert_eq!(c.replay(u64::MAX).len(), 1);
    // A second client at the same time.
    let mut d = Zmtp::connect(replay, "DEALER", "ROUTER");
    assert_eq!(d.replay(5), want5);
}

#[test]
fn kv_replay_keeps_the_last_buffer_steps_batches() {
    let (p, replay) = start("", 3);
    for i in 0..5 {
        p.publish(batch(f64::from(i)));
    }
    wait_until("5 batches", || p.published() == 5);
    let mut c = Zmtp::connect(replay, "DEALER", "ROUTER");
    let got = c.replay(0);
    let seqs: Vec<Vec<u8>> = got.iter().map(|m| m[2].clone()).collect();
    assert_eq!(
        seqs,
        [
            2u64.to_be_bytes().to_vec(),
            3u64.to_be_bytes().to_vec(),
            4u64.to_be_bytes().to_vec(),
            END_SEQ.to_vec()
        ]
    );
    for (m, ts) in got.iter().zip([2.0, 3.0, 4.0]) {
        assert_eq!(m.len(), 4);
        assert_eq!((m[0].as_slice(), m[1].as_slice()), (&b""[..], &b""[..]));
        assert_eq!(m[3], batch(ts).encode());
    }
    // No buffer at all: only the end marker.
    let (p, replay) = start("kv", 0);
    p.publish(batch(1.0));
    wait_until("1 batch", || p.published() == 1);
    assert_eq!(Zmtp::connect(replay, "DEALER", "ROUTER").replay(0).len(), 1);
}

#[test]
fn kv_replay_ignores_malformed_requests_and_matches_the_live_stream() {
    let (p, replay) = start("kv", 100);
    let mut sub = Zmtp::connect(loopback(p.local_addr().unwrap()), "SUB", "PUB");
    sub.subscribe(b"kv");
    wait_until("the subscription", || p.num_subscriptions() == 1);
    for i in 0..4 {
        p.publish(batch(f64::from(i) + 0.5));
    }
    let live: Vec<Vec<Vec<u8>>> = (0..4).map(|_| sub.recv()).collect();
    let mut c = Zmtp::connect(replay, "DEALER", "ROUTER");
    // vLLM ignores anything but [identity, delimiter, start_seq] at its ROUTER.
    c.send(&[&0u64.to_be_bytes()]);
    c.send(&[b"", b"", &0u64.to_be_bytes()]);
    let got = c.replay(1);
    assert_eq!(got.len(), 4);
    for (g, l) in got.iter().zip(&live[1..]) {
        assert_eq!(g[0], b"");
        assert_eq!(&g[1..], &l[..], "replayed = live [topic, seq, payload]");
    }
    // Clean shutdown: the replay port is free again.
    let addr = replay;
    drop(c);
    drop(sub);
    drop(p);
    std::net::TcpListener::bind(addr).expect("replay port released");
}
