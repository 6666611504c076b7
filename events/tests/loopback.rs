//! The SUB and DEALER clients against this crate's PUB and ROUTER sockets and against
//! hand-made hostile peers, all on 127.0.0.1: what arrives is what was published, replays
//! return the buffered payloads byte for byte, and a peer that stalls, lies about sizes or
//! closes ends the call within its bound with a typed error.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::thread;
use std::time::{Duration, Instant};

use inferrail_events::subscriber::{Received, SubscribeError, Subscriber, SubscriberConfig};
use inferrail_events::zmtp::{self, write_frame};
use inferrail_events::{
    decode_batch, replay_from, KvEventBatch, KvEventPublisher, PublisherConfig, ReplayError,
    ReplayLimits, WireEvent,
};

fn batch(i: u32) -> KvEventBatch {
    KvEventBatch {
        ts: 1000.0 + f64::from(i),
        events: vec![WireEvent::AllBlocksCleared],
        data_parallel_rank: Some(0),
    }
}

fn publisher(topic: &str, replay: bool) -> (KvEventPublisher, String, Option<String>) {
    let p = KvEventPublisher::start(PublisherConfig {
        endpoint: "tcp://*:0".into(),
        topic: topic.into(),
        replay_endpoint: replay.then(|| "tcp://*:0".to_string()),
        ..PublisherConfig::default()
    })
    .unwrap();
    let ep = format!("tcp://127.0.0.1:{}", p.local_addr().unwrap().port());
    let rp = p
        .replay_addr()
        .map(|a| format!("tcp://127.0.0.1:{}", a.port()));
    (p, ep, rp)
}

fn config(endpoint: &str, topic: &[u8]) -> SubscriberConfig {
    SubscriberConfig {
        topic: topic.to_vec(),
        idle_timeout: Duration::from_millis(50),
        ..SubscriberConfig::new(endpoint)
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Reads messages until `n` arrived (bounded at 10 s).
fn receive(sub: &mut Subscriber, n: usize) -> Vec<inferrail_events::EventMessage> {
    let start = Instant::now();
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "got {} of {n}",
            out.len()
        );
        match sub.receive().unwrap() {
            Received::Message(m) => out.push(m),
            Received::Idle => {}
            Received::Malformed { frames } => panic!("malformed message of {frames} frames"),
        }
    }
    out
}

#[test]
fn a_subscriber_gets_what_the_publisher_published() {
    let (publisher, endpoint, _) = publisher("kv", false);
    let mut all = Subscriber::connect(&config(&endpoint, b"")).unwrap();
    let mut kv = Subscriber::connect(&config(&endpoint, b"k")).unwrap();
    let mut other = Subscriber::connect(&config(&endpoint, b"other")).unwrap();
    wait_until("3 subscriptions", || publisher.num_subscriptions() == 3);
    let sent: Vec<KvEventBatch> = (0..20).map(batch).collect();
    for b in &sent {
        assert!(publisher.publish(b.clone()));
    }
    for sub in [&mut all, &mut kv] {
        let got = receive(sub, sent.len());
        for (i, (m, b)) in got.iter().zip(&sent).enumerate() {
            assert_eq!(m.topic, b"kv");
            assert_eq!(m.seq, i as u64);
            assert_eq!(&decode_batch(&m.payload).unwrap().batch, b);
        }
    }
    // The subscriber to another topic got nothing.
    assert_eq!(other.receive().unwrap(), Received::Idle);
    // The publisher going away ends the stream.
    drop(publisher);
    let start = Instant::now();
    loop {
        match all.receive() {
            Err(SubscribeError::Closed) | Err(SubscribeError::Io(_)) => break,
            Ok(Received::Idle) => {
                assert!(start.elapsed() < Duration::from_secs(10), "no close seen")
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn replay_returns_the_buffered_batches_from_a_sequence_number() {
    let (publisher, _, replay) = publisher("kv", true);
    let replay = replay.unwrap();
    for i in 0..6 {
        assert!(publisher.publish(batch(i)));
    }
    wait_until("6 published", || publisher.published() == 6);
    let from2 = replay_from(&replay, 2, ReplayLimits::default()).unwrap();
    assert_eq!(
        from2.iter().map(|m| m.seq).collect::<Vec<_>>(),
        [2, 3, 4, 5]
    );
    for m in &from2 {
        assert_eq!(m.payload, batch(m.seq as u32).encode());
        assert_eq!(m.topic, b"kv");
    }
    assert_eq!(
        replay_from(&replay, 0, ReplayLimits::default())
            .unwrap()
            .len(),
        6
    );
    assert!(replay_from(&replay, 6, ReplayLimits::default())
        .unwrap()
        .is_empty());
    let few = ReplayLimits {
        max_batches: 3,
        ..ReplayLimits::default()
    };
    assert!(matches!(
        replay_from(&replay, 0, few),
        Err(ReplayError::TooMany(3))
    ));
}

/// A listener on 127.0.0.1 whose one connection is handled by `peer`.
fn fake_peer(peer: impl FnOnce(std::net::TcpStream) + Send + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        if let Ok((s, _)) = l.accept() {
            peer(s);
        }
    });
    addr
}

fn endpoint(addr: SocketAddr) -> String {
    format!("tcp://{addr}")
}

#[test]
fn a_peer_that_never_greets_fails_the_handshake_in_time() {
    let addr = fake_peer(|s| {
        thread::sleep(Duration::from_secs(3));
        drop(s);
    });
    let cfg = SubscriberConfig {
        connect_timeout: Duration::from_millis(200),
        ..config(&endpoint(addr), b"")
    };
    let start = Instant::now();
    assert!(matches!(
        Subscriber::connect(&cfg),
        Err(SubscribeError::Handshake { .. })
    ));
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_peer_that_is_not_zmq_or_not_a_publisher_is_refused() {
    let http = fake_peer(|mut s| {
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n".repeat(4).as_slice());
        thread::sleep(Duration::from_millis(300));
    });
    assert!(matches!(
        Subscriber::connect(&config(&endpoint(http), b"")),
        Err(SubscribeError::Handshake { .. })
    ));
    let router = fake_peer(|mut s| {
        let _ = zmtp::handshake(&mut s, b"ROUTER", &[b"SUB"]);
        thread::sleep(Duration::from_millis(300));
    });
    assert!(matches!(
        Subscriber::connect(&config(&endpoint(router), b"")),
        Err(SubscribeError::Handshake { .. })
    ));
}

#[test]
fn a_publisher_claiming_a_huge_frame_is_dropped_without_allocating_it() {
    let addr = fake_peer(|mut s| {
        if zmtp::handshake(&mut s, b"PUB", &[b"SUB"]).is_ok() {
            // A frame header announcing 4 GiB, and then nothing.
            let _ = s.write_all(&[0x02, 0, 0, 0, 1, 0, 0, 0, 0]);
            thread::sleep(Duration::from_secs(2));
        }
    });
    let mut sub = Subscriber::connect(&config(&endpoint(addr), b"")).unwrap();
    let start = Instant::now();
    loop {
        match sub.receive() {
            Err(SubscribeError::Frames(_)) => break,
            Ok(Received::Idle) => {
                assert!(start.elapsed() < Duration::from_secs(1), "no error seen")
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_malformed_message_is_skipped_and_the_stream_goes_on() {
    let addr = fake_peer(|mut s| {
        if zmtp::handshake(&mut s, b"PUB", &[b"SUB"]).is_ok() {
            // Read the subscription, then send a 2-frame message and a good one.
            let mut sub = [0u8; 3];
            let _ = s.read_exact(&mut sub);
            let mut out = Vec::new();
            write_frame(&mut out, b"kv", true, false);
            write_frame(&mut out, b"x", false, false);
            write_frame(&mut out, b"kv", true, false);
            write_frame(&mut out, &9u64.to_be_bytes(), true, false);
            write_frame(&mut out, &batch(9).encode(), false, false);
            let _ = s.write_all(&out);
            thread::sleep(Duration::from_millis(500));
        }
    });
    let mut sub = Subscriber::connect(&config(&endpoint(addr), b"")).unwrap();
    let mut seen = Vec::new();
    let start = Instant::now();
    while seen.len() < 2 {
        assert!(start.elapsed() < Duration::from_secs(5));
        match sub.receive().unwrap() {
            Received::Idle => {}
            r => seen.push(r),
        }
    }
    assert_eq!(seen[0], Received::Malformed { frames: 2 });
    let Received::Message(m) = &seen[1] else {
        panic!("{:?}", seen[1])
    };
    assert_eq!(m.seq, 9);
}

#[test]
fn a_replay_server_that_never_answers_runs_into_the_deadline() {
    let addr = fake_peer(|mut s| {
        if zmtp::handshake(&mut s, b"ROUTER", &[b"DEALER"]).is_ok() {
            thread::sleep(Duration::from_secs(3));
        }
    });
    let limits = ReplayLimits {
        deadline: Duration::from_millis(300),
        ..ReplayLimits::default()
    };
    let start = Instant::now();
    assert!(matches!(
        replay_from(&endpoint(addr), 0, limits),
        Err(ReplayError::Deadline(_))
    ));
    assert!(start.elapsed() < Duration::from_secs(2));
}
