//! The KV event PUB socket against a hand-written ZMTP 3.0 SUB client: handshake, topic
//! filtering, the `[topic, seq, payload]` messages, binding and connecting like vLLM.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use inferrail_sim::kv_events::{KvEventBatch, KvEventPublisher, PublisherConfig, WireEvent};

/// A minimal ZMTP 3.0 SUB socket over one TCP connection.
struct Sub {
    s: TcpStream,
}

fn frame(out: &mut Vec<u8>, body: &[u8], more: bool, command: bool) {
    let flags = u8::from(more) | if command { 4 } else { 0 };
    if body.len() > 255 {
        out.push(flags | 2);
        out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    } else {
        out.push(flags);
        out.push(body.len() as u8);
    }
    out.extend_from_slice(body);
}

impl Sub {
    fn handshake(mut s: TcpStream) -> Sub {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut g = [0u8; 64];
        g[0] = 0xff;
        g[9] = 0x7f;
        g[10] = 3;
        g[12..16].copy_from_slice(b"NULL");
        s.write_all(&g).unwrap();
        let mut peer = [0u8; 64];
        s.read_exact(&mut peer).unwrap();
        assert_eq!((peer[0], peer[9], peer[10]), (0xff, 0x7f, 3));
        assert_eq!(&peer[12..16], b"NULL");
        let mut ready = vec![5];
        ready.extend_from_slice(b"READY");
        ready.push(11);
        ready.extend_from_slice(b"Socket-Type");
        ready.extend_from_slice(&3u32.to_be_bytes());
        ready.extend_from_slice(b"SUB");
        let mut out = Vec::new();
        frame(&mut out, &ready, false, true);
        s.write_all(&out).unwrap();
        let mut sub = Sub { s };
        let (more, command, body) = sub.read_frame();
        assert!(!more && command);
        assert_eq!(&body[..6], b"\x05READY");
        let type_prop = b"\x0bSocket-Type\x00\x00\x00\x03PUB";
        assert!(body.windows(type_prop.len()).any(|w| w == type_prop));
        sub
    }

    fn connect(addr: SocketAddr) -> Sub {
        Sub::handshake(TcpStream::connect(addr).unwrap())
    }

    /// ZMTP 3.0 subscription message.
    fn subscribe(&mut self, topic: &[u8]) {
        let mut out = Vec::new();
        frame(&mut out, &[&[1u8][..], topic].concat(), false, false);
        self.s.write_all(&out).unwrap();
    }

    /// ZMTP 3.1 SUBSCRIBE command.
    fn subscribe_command(&mut self, topic: &[u8]) {
        let mut out = Vec::new();
        frame(
            &mut out,
            &[&b"\x09SUBSCRIBE"[..], topic].concat(),
            false,
            true,
        );
        self.s.write_all(&out).unwrap();
    }

    fn read_frame(&mut self) -> (bool, bool, Vec<u8>) {
        let mut f = [0u8; 1];
        self.s.read_exact(&mut f).unwrap();
        let len = if f[0] & 2 != 0 {
            let mut b = [0u8; 8];
            self.s.read_exact(&mut b).unwrap();
            u64::from_be_bytes(b) as usize
        } else {
            let mut b = [0u8; 1];
            self.s.read_exact(&mut b).unwrap();
            b[0] as usize
        };
        let mut body = vec![0u8; len];
        self.s.read_exact(&mut body).unwrap();
        (f[0] & 1 != 0, f[0] & 4 != 0, body)
    }

    fn recv(&mut self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        loop {
            let (more, command, body) = self.read_frame();
            assert!(!command);
            frames.push(body);
            if !more {
                return frames;
            }
        }
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
