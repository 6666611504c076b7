//! A [`SimServer`] with `--kv-events-config` on, watched by a hand-written ZMTP SUB client
//! and a DEALER on the replay socket: chat requests sharing a prefix produce `BlockStored`
//! events whose hashes are the prompts' block hashes, batches are numbered one by one, a
//! `/reset_prefix_cache` produces `AllBlocksCleared`, and replays return what was published.

mod common;
mod zmtp;

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{exchange, get, post};
use inferrail_shards::block_hash::{as_event_int, prompt_block_hashes};
use inferrail_shards::builtin::BuiltinTokenizer;
use inferrail_sim::kv_events::{KvEventsConfig, END_SEQ};
use inferrail_sim::openai::ChatMessage;
use inferrail_sim::server::{apply_chat_template, SimOptions, SimServer};
use zmtp::Zmtp;

/// A decoded msgpack value (just what KV event batches use).
#[derive(Debug, Clone, PartialEq)]
enum Mp {
    Nil,
    Bool(bool),
    UInt(u64),
    Float(f64),
    Str(String),
    Array(Vec<Mp>),
    Map(Vec<(Mp, Mp)>),
}

impl Mp {
    fn get(&self, key: &str) -> Option<&Mp> {
        match self {
            Mp::Map(kv) => kv
                .iter()
                .find(|(k, _)| *k == Mp::Str(key.into()))
                .map(|(_, v)| v),
            _ => None,
        }
    }
    fn arr(&self) -> &[Mp] {
        match self {
            Mp::Array(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }
    fn uint(&self) -> u64 {
        match self {
            Mp::UInt(u) => *u,
            other => panic!("not a uint: {other:?}"),
        }
    }
    fn str(&self) -> &str {
        match self {
            Mp::Str(s) => s,
            other => panic!("not a str: {other:?}"),
        }
    }
}

fn decode(b: &[u8]) -> Mp {
    let mut at = 0;
    let v = decode_at(b, &mut at);
    assert_eq!(at, b.len(), "trailing bytes");
    v
}

fn decode_at(b: &[u8], at: &mut usize) -> Mp {
    let take = |at: &mut usize, n: usize| -> &[u8] {
        let s = &b[*at..*at + n];
        *at += n;
        s
    };
    let be = |s: &[u8]| s.iter().fold(0u64, |v, &x| (v << 8) | u64::from(x));
    let t = take(at, 1)[0];
    let array = |n: usize, at: &mut usize| Mp::Array((0..n).map(|_| decode_at(b, at)).collect());
    let map = |n: usize, at: &mut usize| {
        Mp::Map(
            (0..n)
                .map(|_| (decode_at(b, at), decode_at(b, at)))
                .collect(),
        )
    };
    let string =
        |n: usize, at: &mut usize| Mp::Str(String::from_utf8(take(at, n).to_vec()).expect("utf-8"));
    match t {
        0x00..=0x7f => Mp::UInt(u64::from(t)),
        0x80..=0x8f => map(usize::from(t & 0x0f), at),
        0x90..=0x9f => array(usize::from(t & 0x0f), at),
        0xa0..=0xbf => string(usize::from(t & 0x1f), at),
        0xc0 => Mp::Nil,
        0xc2 => Mp::Bool(false),
        0xc3 => Mp::Bool(true),
        0xcb => Mp::Float(f64::from_bits(be(take(at, 8)))),
        0xcc => Mp::UInt(be(take(at, 1))),
        0xcd => Mp::UInt(be(take(at, 2))),
        0xce => Mp::UInt(be(take(at, 4))),
        0xcf => Mp::UInt(be(take(at, 8))),
        0xd9 => {
            let n = be(take(at, 1)) as usize;
            string(n, at)
        }
        0xdc => {
            let n = be(take(at, 2)) as usize;
            array(n, at)
        }
        0xdd => {
            let n = be(take(at, 4)) as usize;
            array(n, at)
        }
        0xde => {
            let n = be(take(at, 2)) as usize;
            map(n, at)
        }
        t => panic!("unexpected msgpack type byte {t:#x}"),
    }
}

/// One received batch: seq, ts, rank, events.
struct Batch {
    seq: u64,
    ts: f64,
    events: Vec<Mp>,
    payload: Vec<u8>,
}

fn parse_message(m: &[Vec<u8>]) -> Batch {
    assert_eq!(m.len(), 3, "[topic, seq, payload]");
    assert_eq!(m[0], b"kv");
    let seq = u64::from_be_bytes(m[1].as_slice().try_into().unwrap());
    let v = decode(&m[2]);
    let a = v.arr();
    assert_eq!(a.len(), 3, "[ts, events, data_parallel_rank]");
    let Mp::Float(ts) = a[0] else {
        panic!("ts is not a float64")
    };
    assert_eq!(
        a[2],
        Mp::UInt(0),
        "data_parallel_rank 0, as vLLM's publisher fills in"
    );
    Batch {
        seq,
        ts,
        events: a[1].arr().to_vec(),
        payload: m[2].clone(),
    }
}

const SYSTEM: &str = "You are a meticulous assistant who answers questions about geography, \
    history and science with short, precise and well sourced statements. Always double check \
    numbers, name your sources, and never invent facts you are not sure about. ";

fn messages(user: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage {
            role: "system".into(),
            content: Some(SYSTEM.repeat(3)),
        },
        ChatMessage {
            role: "user".into(),
            content: Some(user.into()),
        },
    ]
}

fn ids(user: &str) -> Vec<u32> {
    let text = apply_chat_template(&messages(user), true, false);
    BuiltinTokenizer::new().encode_with_special(&text, true)
}

fn chat(addr: SocketAddr, user: &str) {
    let body = serde_json::json!({
        "model": "tiny",
        "messages": messages(user).iter().map(|m| serde_json::json!({"role": m.role, "content": m.content})).collect::<Vec<_>>(),
        "max_tokens": 3,
        "temperature": 0,
    })
    .to_string();
    let r = exchange(addr, &post("/v1/chat/completions", &body, ""));
    assert_eq!(r.status(), 200, "{}", String::from_utf8_lossy(&r.body));
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn loopback(a: SocketAddr) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], a.port()))
}

/// Waits until the publisher's count stops moving (all queued batches sent).
fn settled(server: &SimServer) -> u64 {
    let kv = server.kv_events().unwrap();
    let mut last = kv.published();
    let mut since = Instant::now();
    let start = Instant::now();
    while since.elapsed() < Duration::from_millis(150) {
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
        let n = kv.published();
        if n != last {
            last = n;
            since = Instant::now();
        }
    }
    last
}

fn hashes(e: &Mp) -> Vec<u64> {
    e.get("block_hashes")
        .unwrap()
        .arr()
        .iter()
        .map(Mp::uint)
        .collect()
}

fn tokens(e: &Mp) -> Vec<u32> {
    e.get("token_ids")
        .unwrap()
        .arr()
        .iter()
        .map(|t| t.uint() as u32)
        .collect()
}

fn parent(e: &Mp) -> Option<u64> {
    match e.get("parent_block_hash").unwrap() {
        Mp::Nil => None,
        h => Some(h.uint()),
    }
}

fn kind(e: &Mp) -> &str {
    e.get("type").unwrap().str()
}

#[test]
fn kv_events_served_like_vllm() {
    let mut o = SimOptions::new("tiny");
    o.zero_latency = true;
    o.block_size = 16;
    o.kv_events_config = Some(
        KvEventsConfig::parse(
            r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:0",
                "replay_endpoint": "tcp://127.0.0.1:0", "topic": "kv"}"#,
        )
        .unwrap(),
    );
    let server = SimServer::start(o).expect("start");
    let kv = server.kv_events().expect("KV events on");
    let mut sub = Zmtp::connect(loopback(kv.local_addr().unwrap()), "SUB", "PUB");
    sub.subscribe(b"kv");
    let start = Instant::now();
    while kv.num_subscriptions() == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "no subscription");
        std::thread::sleep(Duration::from_millis(5));
    }
    // An idle server publishes nothing.
    assert_eq!(settled(&server), 0);

    let (u1, u2) = (
        "What is the capital of France, and when was it founded?",
        "How tall is Mount Everest, and who first climbed it?",
    );
    let (ids1, ids2) = (ids(u1), ids(u2));
    let bs = 16;
    let p1: Vec<u64> = prompt_block_hashes(&ids1, bs)
        .iter()
        .map(as_event_int)
        .collect();
    let p2: Vec<u64> = prompt_block_hashes(&ids2, bs)
        .iter()
        .map(as_event_int)
        .collect();
    let k = p1.iter().zip(&p2).take_while(|(a, b)| a == b).count();
    assert!(
        k >= 2 && p2.len() > k,
        "prompts share {k} of {} blocks",
        p2.len()
    );

    let t0 = now();
    chat(server.addr(), u1);
    chat(server.addr(), u2);
    let before_reset = settled(&server);
    let r = exchange(server.addr(), &post("/reset_prefix_cache", "", ""));
    assert_eq!(r.status(), 200);
    // The reset is only published with the next step.
    assert_eq!(settled(&server), before_reset);
    chat(server.addr(), u1);
    let n = settled(&server);
    let t1 = now();
    assert!(n > before_reset);

    let live: Vec<Vec<Vec<u8>>> = (0..n).map(|_| sub.recv()).collect();
    let batches: Vec<Batch> = live.iter().map(|m| parse_message(m)).collect();
    // Numbered one by one from 0, stamped with the wall clock, never empty.
    for (i, b) in batches.iter().enumerate() {
        assert_eq!(b.seq, i as u64);
        assert!(
            b.ts >= t0 - 0.001 && b.ts <= t1 + 0.001,
            "ts {} not in [{t0}, {t1}]",
            b.ts
        );
        assert!(!b.events.is_empty());
    }
    assert!(batches.windows(2).all(|w| w[0].ts <= w[1].ts));

    let pre: Vec<&Mp> = batches[..before_reset as usize]
        .iter()
        .flat_map(|b| &b.events)
        .collect();
    assert!(
        pre.iter().all(|e| kind(e) == "BlockStored"),
        "no eviction in a big pool"
    );
    // Request 1 stores all its full prompt blocks in one event, from the root.
    let first = pre[0];
    assert_eq!(parent(first), None);
    assert_eq!(hashes(first), p1);
    assert_eq!(tokens(first), ids1[..p1.len() * bs]);
    assert_eq!(first.get("block_size"), Some(&Mp::UInt(16)));
    assert_eq!(first.get("medium"), Some(&Mp::Str("GPU".into())));
    // Request 2 hits the shared prefix (no events for it) and stores the rest under it.
    let second = pre
        .iter()
        .find(|e| hashes(e).first() == Some(&p2[k]))
        .expect("request 2's new blocks");
    assert_eq!(parent(second), Some(p2[k - 1]));
    assert_eq!(hashes(second), p2[k..]);
    assert_eq!(tokens(second), ids2[k * bs..p2.len() * bs]);
    let stored: Vec<u64> = pre.iter().flat_map(|e| hashes(e)).collect();
    for h in &p2[..k] {
        assert_eq!(
            stored.iter().filter(|s| *s == h).count(),
            1,
            "a shared block is stored once"
        );
    }

    // After the reset: AllBlocksCleared first, in the batch of the next step, then request 1's
    // blocks stored again from the root.
    let post_reset = &batches[before_reset as usize];
    assert_eq!(kind(&post_reset.events[0]), "AllBlocksCleared");
    assert_eq!(
        post_reset.events[0],
        Mp::Map(vec![(
            Mp::Str("type".into()),
            Mp::Str("AllBlocksCleared".into())
        )])
    );
    let again: Vec<&Mp> = batches[before_reset as usize..]
        .iter()
        .flat_map(|b| &b.events)
        .filter(|e| kind(e) == "BlockStored")
        .collect();
    assert_eq!(parent(again[0]), None);
    assert_eq!(hashes(again[0]), p1);

    // Replay: from 0 and from k, exactly the published batches, then the end marker.
    let mut dealer = Zmtp::connect(loopback(kv.replay_addr().unwrap()), "DEALER", "ROUTER");
    for from in [0, 1, n - 1, n] {
        let got = dealer.replay(from);
        assert_eq!(got.len() as u64, n - from + 1);
        for (g, l) in got.iter().zip(&live[from as usize..]) {
            assert_eq!(g[0], b"");
            assert_eq!(&g[1..], &l[..]);
        }
        assert_eq!(
            got.last().unwrap(),
            &vec![vec![], vec![], END_SEQ.to_vec(), vec![]]
        );
    }
    let payloads: Vec<&Vec<u8>> = batches.iter().map(|b| &b.payload).collect();
    assert_eq!(payloads.len() as u64, n);
    assert_eq!(kv.dropped(), 0);
}

#[test]
fn kv_events_off_by_default_and_with_null_publisher() {
    let mut o = SimOptions::new("tiny");
    o.zero_latency = true;
    let s = SimServer::start(o.clone()).unwrap();
    assert!(s.kv_events().is_none());
    o.kv_events_config = Some(
        KvEventsConfig::parse(r#"{"enable_kv_cache_events": true, "publisher": "null"}"#).unwrap(),
    );
    let s2 = SimServer::start(o).unwrap();
    assert!(s2.kv_events().is_none());
    chat(s2.addr(), "hello there");
    // Neither lists a source.
    for addr in [s.addr(), s2.addr()] {
        let r = exchange(addr, &get("/kv_event_sources"));
        assert_eq!(r.status(), 200);
        assert_eq!(r.body, b"{}");
    }
}

#[test]
fn kv_event_sources_lists_the_configured_publisher() {
    let mut o = SimOptions::new("tiny");
    o.zero_latency = true;
    o.kv_events_config = Some(
        KvEventsConfig::parse(
            r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:0",
                "replay_endpoint": "tcp://127.0.0.1:0", "topic": "kv"}"#,
        )
        .unwrap(),
    );
    let server = SimServer::start(o).expect("start");
    let r = exchange(server.addr(), &get("/kv_event_sources"));
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["0"]["enable_kv_cache_events"], true);
    assert_eq!(v["0"]["publisher"], "zmq");
    // Port 0 is reported as the port bound, on the node's address (vLLM PR #55844, in 0.32;
    // shared/KV_EVENTS.md), so a router can connect to what the page says.
    let kv = server.kv_events().expect("publisher");
    let port = |a: Option<std::net::SocketAddr>| a.expect("bound").port();
    assert_eq!(
        v["0"]["endpoint"],
        format!("tcp://{}:{}", server.addr().ip(), port(kv.local_addr()))
    );
    assert_eq!(
        v["0"]["replay_endpoint"],
        format!("tcp://{}:{}", server.addr().ip(), port(kv.replay_addr()))
    );
    assert_eq!(v["0"]["topic"], "kv");
    assert_eq!(v.as_object().unwrap().len(), 1);
}

#[test]
fn kv_events_sockets_close_with_the_server() {
    let mut o = SimOptions::new("tiny");
    o.zero_latency = true;
    o.kv_events_config = Some(
        KvEventsConfig::parse(
            r#"{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:0", "replay_endpoint": "tcp://127.0.0.1:0"}"#,
        )
        .unwrap(),
    );
    // A connecting endpoint (no `*`) has no local address; the replay socket always binds.
    let mut s = SimServer::start(o).unwrap();
    let kv = s.kv_events().unwrap();
    assert!(kv.local_addr().is_none());
    let replay = kv.replay_addr().unwrap();
    s.stop();
    assert!(s.kv_events().is_none());
    std::net::TcpListener::bind(replay).expect("replay port released");
}
