//! The KV event PUB socket against a hand-written ZMTP 3.0 SUB client: handshake, topic
//! filtering, the `[topic, seq, payload]` messages, binding and connecting like vLLM.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

mod zmtp;

use inferrail_sim::kv_events::{KvEventBatch, KvEventPublisher, PublisherConfig, WireEvent};
use zmtp::{frame, Zmtp};

/// A SUB client for the PUB socket under test.
struct Sub;

impl Sub {
    fn handshake(s: TcpStream) -> Zmtp {
        Zmtp::handshake(s, "SUB", "PUB")
    }

    fn connect(addr: SocketAddr) -> Zmtp {
        Zmtp::connect(addr, "SUB", "PUB")
    }
}

fn batch(ts: f64) -> KvEventBatch {
    KvEventBatch {
        ts,
        events: vec![WireEvent::AllBlocksCleared],
        data_parallel_rank: Some(0),
    }
}

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

fn bound(topic: &str) -> (KvEventPublisher, SocketAddr) {
    let p = KvEventPublisher::start(PublisherConfig {
        endpoint: "tcp://*:0".into(),
        topic: topic.into(),
        ..PublisherConfig::default()
    })
    .unwrap();
    let port = p.local_addr().unwrap().port();
    (p, SocketAddr::from(([127, 0, 0, 1], port)))
}

#[test]
fn kv_events_pub_sends_topic_seq_payload_to_subscribers() {
    let (publisher, addr) = bound("kv");
    let mut a = Sub::connect(addr);
    a.subscribe(b"kv");
    let mut b = Sub::connect(addr);
    b.subscribe_command(b"");
    let mut c = Sub::connect(addr);
    c.subscribe(b"other");
    wait_until("3 subscriptions", || publisher.num_subscriptions() == 3);
    assert_eq!(publisher.num_peers(), 3);

    let batches: Vec<KvEventBatch> = (0..5).map(|i| batch(1000.0 + f64::from(i))).collect();
    for bt in &batches {
        assert!(publisher.publish(bt.clone()));
    }
    for sub in [&mut a, &mut b] {
        for (seq, bt) in batches.iter().enumerate() {
            let msg = sub.recv();
            assert_eq!(msg.len(), 3);
            assert_eq!(msg[0], b"kv");
            assert_eq!(msg[1], (seq as u64).to_be_bytes());
            assert_eq!(msg[2], bt.encode());
        }
    }
    wait_until("5 published", || publisher.published() == 5);
    // `c` subscribed to another topic: nothing arrives, and the publisher closing ends its stream.
    drop(publisher);
    let mut rest = Vec::new();
    c.s.read_to_end(&mut rest).unwrap();
    assert!(
        rest.is_empty(),
        "unsubscribed peer got {} bytes",
        rest.len()
    );
}

#[test]
fn kv_events_pub_cancel_and_disconnects() {
    let (publisher, addr) = bound("kv");
    let mut a = Sub::connect(addr);
    a.subscribe(b"k");
    wait_until("1 subscription", || publisher.num_subscriptions() == 1);
    // Cancel (ZMTP 3.0 message form), then a peer that leaves without a word.
    let mut out = Vec::new();
    frame(&mut out, b"\x00k", false, false);
    a.s.write_all(&out).unwrap();
    wait_until("cancel", || publisher.num_subscriptions() == 0);
    let mut gone = Sub::connect(addr);
    gone.subscribe(b"");
    wait_until("2 peers", || publisher.num_peers() == 2);
    drop(gone);
    wait_until("peer gone", || publisher.num_peers() == 1);
    a.subscribe(b"kv");
    wait_until("resubscribed", || publisher.num_subscriptions() == 1);
    publisher.publish(batch(1.0));
    let msg = a.recv();
    assert_eq!(msg[1], 0u64.to_be_bytes());
    assert_eq!(msg[2], batch(1.0).encode());
}

#[test]
fn kv_events_pub_connects_when_endpoint_has_no_star() {
    // vLLM connects to tcp://127.0.0.1:port; the subscriber binds.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let publisher = KvEventPublisher::start(PublisherConfig {
        endpoint: format!("tcp://127.0.0.1:{port}"),
        topic: String::new(),
        ..PublisherConfig::default()
    })
    .unwrap();
    assert!(publisher.local_addr().is_none());
    let (s, _) = listener.accept().unwrap();
    let mut sub = Sub::handshake(s);
    sub.subscribe(b"");
    wait_until("subscription", || publisher.num_subscriptions() == 1);
    publisher.publish(batch(2.5));
    let msg = sub.recv();
    assert_eq!(
        msg,
        vec![Vec::new(), 0u64.to_be_bytes().to_vec(), batch(2.5).encode()]
    );

    // The subscriber goes away and comes back: the publisher reconnects.
    drop(sub);
    wait_until("disconnect", || publisher.num_peers() == 0);
    let (s, _) = listener.accept().unwrap();
    let mut sub = Sub::handshake(s);
    sub.subscribe(b"");
    wait_until("resubscription", || publisher.num_subscriptions() == 1);
    publisher.publish(batch(3.5));
    let msg = sub.recv();
    assert_eq!(msg[1], 1u64.to_be_bytes());
}

#[test]
fn kv_events_publish_never_blocks_and_drop_frees_the_port() {
    let publisher = KvEventPublisher::start(PublisherConfig {
        endpoint: "tcp://*:0".into(),
        max_queue_size: 4,
        ..PublisherConfig::default()
    })
    .unwrap();
    let port = publisher.local_addr().unwrap().port();
    let start = Instant::now();
    let mut sent = 0;
    for i in 0..10_000 {
        if publisher.publish(batch(f64::from(i))) {
            sent += 1;
        }
    }
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(publisher.dropped(), 10_000 - sent);
    drop(publisher);
    // The port can be bound again at once (engines restart in tests).
    let again = KvEventPublisher::start(PublisherConfig {
        endpoint: format!("tcp://*:{port}"),
        ..PublisherConfig::default()
    })
    .unwrap();
    assert_eq!(again.local_addr().unwrap().port(), port);
    assert!(KvEventPublisher::start(PublisherConfig {
        endpoint: "ipc:///tmp/kv".into(),
        ..PublisherConfig::default()
    })
    .is_err());
}
