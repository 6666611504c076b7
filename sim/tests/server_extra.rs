//! Parity with the extra vLLM 0.32 captures (`fixtures/vllm_http_extra/`, copied from
//! `fixtures/vllm/http-extra/`): `cache_salt` (08–14 and the KV event hashes), keep-alive and
//! `Connection: close` (15–20), and `--enable-request-id-headers` (27–31).
//!
//! The captured request bytes are replayed over TCP against a [`SimServer`] configured as the
//! capture's `vllm serve`. Header names and order are compared exactly, with values except
//! `date`, `content-length` of bodies that depend on the tokenizer, and random ids. Token counts
//! differ from vLLM's (another tokenizer), so cached-token counts are compared in full blocks:
//! the capture's 192 (6 blocks of its 217-token prompt) is the simulator's full-block count of
//! the same prompt. The KV event hashes are checked bit for bit through the [`Scheduler`] with
//! the captured token ids, and the salted `BlockStored` payloads (with their `extra_keys`) byte
//! for byte against `kv_events/frames.bin`.

mod common;
#[path = "../../events/tests/kv_capture/mod.rs"]
mod kv_capture;

use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{keys, parse_raw, Client, Raw};
use inferrail_shards::block_hash::as_event_int;
use inferrail_sim::engine::{KvCacheEvent, LatencyModel, Request, Scheduler, SchedulerConfig};
use inferrail_sim::kv_events::{batch_from_engine, EventMeta};
use inferrail_sim::server::{SimOptions, SimServer};
use kv_capture::container;
use serde_json::Value;

fn fixture(name: &str) -> Vec<u8> {
    let p: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "fixtures",
        "vllm_http_extra",
        name,
    ]
    .iter()
    .collect();
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A file of the salted KV event capture, kept with the codec in `events/tests/fixtures/`.
fn salted_events(name: &str) -> Vec<u8> {
    let p: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "events",
        "tests",
        "fixtures",
        "kv_events_salted",
        name,
    ]
    .iter()
    .collect();
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn request(tag: &str) -> Vec<u8> {
    fixture(&format!("{tag}.request.bin"))
}

fn server(request_id_headers: bool) -> SimServer {
    let mut o = SimOptions::new("tiny");
    o.zero_latency = true;
    o.block_size = 32;
    o.num_gpu_blocks_override = Some(128);
    o.max_model_len = 2048;
    o.enable_prompt_tokens_details = true;
    o.enable_prefix_caching = true;
    o.enable_request_id_headers = request_id_headers;
    SimServer::start(o).expect("start")
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

/// Replays `tag` on a fresh connection; returns (simulator, capture).
fn replay(srv: &SimServer, tag: &str) -> (Raw, Raw) {
    let got = common::exchange(srv.addr(), &request(tag));
    let want = parse_raw(&fixture(&format!("{tag}.response.bin")));
    (parse_raw(&got.raw), want)
}

/// Same status line, header names in the same order, same values for the fixed headers.
fn assert_same_head(tag: &str, got: &Raw, want: &Raw) {
    assert_eq!(got.status_line, want.status_line, "{tag}: status line");
    assert_eq!(got.names(), want.names(), "{tag}: header names and order");
    for name in [
        "server",
        "content-type",
        "vary",
        "connection",
        "transfer-encoding",
    ] {
        assert_eq!(got.header(name), want.header(name), "{tag}: {name}");
    }
}

// ---------------------------------------------------------------- cache_salt

/// The simulator's `cached_tokens` for the capture's `cached_tokens` of the 217-token prompt
/// (192 = its 6 full blocks).
fn scaled(captured: u64, full_blocks_tokens: u64) -> u64 {
    assert!(captured == 0 || captured == 192, "captured {captured}");
    if captured == 0 {
        0
    } else {
        full_blocks_tokens
    }
}

#[test]
fn cache_salt_isolates_cached_prefixes_as_captured() {
    let srv = server(false);
    for tag in [
        "08_chat_cache_salt_abc_first",
        "09_chat_cache_salt_abc_repeat",
        "10_chat_cache_salt_xyz",
        "11_chat_no_salt",
        "12_chat_no_salt_repeat",
    ] {
        let (got, want) = replay(&srv, tag);
        assert_same_head(tag, &got, &want);
        assert_eq!(keys(&got.body), keys(&want.body), "{tag}: JSON keys");
        let (g, w) = (got.json(), want.json());
        let prompt = g["usage"]["prompt_tokens"].as_u64().unwrap();
        assert!(prompt > 64, "{tag}: a prompt of several blocks ({prompt})");
        // A full prompt of whole blocks still recomputes its last block.
        let full = (prompt - 1) / 32 * 32;
        let (gd, wd) = (
            &g["usage"]["prompt_tokens_details"],
            &w["usage"]["prompt_tokens_details"],
        );
        for k in ["cached_tokens", "created_cache_tokens"] {
            let expect = scaled(wd[k].as_u64().unwrap(), full);
            assert_eq!(gd[k].as_u64(), Some(expect), "{tag}: {k} ({gd})");
        }
    }
}

#[test]
fn empty_cache_salt_is_refused_as_captured() {
    let srv = server(false);
    let tag = "13_chat_cache_salt_empty";
    let (got, want) = replay(&srv, tag);
    assert_same_head(tag, &got, &want);
    assert_eq!(got.header("content-length"), want.header("content-length"));
    assert_eq!(
        String::from_utf8_lossy(&got.body),
        String::from_utf8_lossy(&want.body)
    );
}

#[test]
fn completion_with_cache_salt_is_accepted() {
    let srv = server(false);
    let tag = "14_completion_cache_salt_abc";
    let (got, want) = replay(&srv, tag);
    assert_same_head(tag, &got, &want);
    assert_eq!(keys(&got.body), keys(&want.body), "{tag}: JSON keys");
    let (g, w) = (got.json(), want.json());
    assert_eq!(
        g["usage"]["prompt_tokens_details"],
        w["usage"]["prompt_tokens_details"]
    );
}

/// The KV events of the salt capture, replayed through the scheduler with the captured token
/// ids: the same block hashes bit for bit, the same `cached_tokens` as the responses 08–12.
#[test]
fn cache_salt_block_hashes_match_vllm_kv_events() {
    let decoded: Value = serde_json::from_slice(&salted_events("decoded.json")).unwrap();
    let stored = |seq: u64| -> (Vec<u32>, Vec<u64>) {
        let batch = decoded
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["seq"].as_u64() == Some(seq))
            .expect("batch");
        let e = &batch["typed"]["events"][0];
        assert_eq!(e["type"], "BlockStored");
        assert!(e["parent_block_hash"].is_null());
        let ids = |k: &str| -> Vec<u64> {
            e[k].as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        };
        let tokens = ids("token_ids").into_iter().map(|t| t as u32).collect();
        (tokens, ids("block_hashes"))
    };
    let (tokens, _) = stored(1);
    assert_eq!(tokens.len(), 192);
    for seq in [2, 3] {
        assert_eq!(stored(seq).0, tokens, "seq {seq}: the same prompt");
    }
    let config = SchedulerConfig {
        block_size: 32,
        num_gpu_blocks: 128,
        enable_prefix_caching: true,
        enable_kv_events: true,
        max_model_len: Some(2048),
        ..SchedulerConfig::default()
    };
    let mut sched = Scheduler::new(config, LatencyModel::zero()).unwrap();
    // The 217-token prompt: its 6 full blocks as captured, then 25 tokens of a partial block.
    let mut prompt = tokens.clone();
    prompt.extend(100..125);
    // (salt, the batch it stores or None, cached tokens): 08–12 in capture order.
    let runs: [(Option<&str>, Option<u64>, usize); 5] = [
        (Some("abc"), Some(1), 0),
        (Some("abc"), None, 192),
        (Some("xyz"), Some(2), 0),
        (None, Some(3), 0),
        (None, None, 192),
    ];
    let mut now = 0.0;
    for (i, (salt, seq, cached)) in runs.into_iter().enumerate() {
        let mut req = Request::new(i as u64 + 1, prompt.clone(), 4, now);
        req.cache_salt = salt.map(str::to_owned);
        sched.add_request(req).unwrap();
        let outs = sched.run_until_idle(now);
        now = outs.last().map(|o| o.end).unwrap_or(now) + 1.0;
        let finished: Vec<_> = outs.iter().flat_map(|o| o.finished.iter()).collect();
        assert_eq!(finished.len(), 1);
        assert_eq!(finished[0].cached_tokens, cached, "run {i} ({salt:?})");
        let stored_events: Vec<(Vec<u64>, Vec<u32>)> = outs
            .iter()
            .flat_map(|o| o.kv_events.iter())
            .filter_map(|e| match e {
                KvCacheEvent::BlockStored {
                    block_hashes,
                    parent_block_hash,
                    token_ids,
                    ..
                } => {
                    assert!(parent_block_hash.is_none());
                    Some((
                        block_hashes.iter().map(as_event_int).collect(),
                        token_ids.clone(),
                    ))
                }
                _ => None,
            })
            .collect();
        match seq {
            None => assert!(stored_events.is_empty(), "run {i}: a repeat stores nothing"),
            Some(seq) => {
                let (want_tokens, want_hashes) = stored(seq);
                assert_eq!(stored_events.len(), 1, "run {i}: one BlockStored");
                assert_eq!(stored_events[0].1, want_tokens, "run {i}: tokens");
                assert_eq!(
                    stored_events[0].0, want_hashes,
                    "run {i}: hashes (seq {seq})"
                );
            }
        }
    }
}

// ---------------------------------------------------------------- keep-alive

#[test]
fn connection_close_is_honoured() {
    let srv = server(false);
    let tag = "15_chat_connection_close";
    let mut c = Client::new(srv.addr());
    c.send(&request(tag));
    let got = parse_raw(&c.response().raw);
    let want = parse_raw(&fixture(&format!("{tag}.response.bin")));
    assert_same_head(tag, &got, &want);
    assert_eq!(
        got.headers.last().unwrap(),
        &("connection".into(), "close".into())
    );
    // The server closes right after the body.
    c.stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let t = Instant::now();
    assert!(c.read_to_eof().is_empty());
    assert!(t.elapsed() < Duration::from_secs(2), "closed at once");
}

#[test]
fn keep_alive_reuse_and_idle_close() {
    let srv = server(false);
    // 16: no connection header; 17/18: reuse after 1 s.
    let mut c = Client::new(srv.addr());
    for (i, tag) in [
        "16_chat_keepalive_default",
        "17_keepalive_reuse_1",
        "18_keepalive_reuse_after_1s",
    ]
    .into_iter()
    .enumerate()
    {
        if i == 2 {
            std::thread::sleep(Duration::from_secs(1));
        }
        c.send(&request(tag));
        let got = parse_raw(&c.response().raw);
        let want = parse_raw(&fixture(&format!("{tag}.response.bin")));
        assert_same_head(tag, &got, &want);
        assert!(got.header("connection").is_none(), "{tag}");
    }
    // 19/20: after a response the idle connection is closed after uvicorn's 5 s.
    let tag = "19_keepalive_idle_1";
    c.send(&request(tag));
    let got = parse_raw(&c.response().raw);
    assert_same_head(
        tag,
        &got,
        &parse_raw(&fixture(&format!("{tag}.response.bin"))),
    );
    let t = Instant::now();
    c.stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 64];
    let n = match c.stream.read(&mut buf) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
        Err(e) => panic!("expected the server to close the idle connection: {e}"),
    };
    let idle = t.elapsed();
    assert_eq!(n, 0, "EOF, no bytes");
    assert!(
        idle >= Duration::from_secs(3) && idle < Duration::from_secs(10),
        "closed after {idle:?}"
    );
}

// ---------------------------------------------------------------- --enable-request-id-headers

fn chunk_ids(r: &Raw) -> Vec<String> {
    r.chunk_payloads()
        .iter()
        .map(|c| std::str::from_utf8(c).unwrap())
        .filter(|c| *c != "data: [DONE]\n\n")
        .map(|c| {
            let v: Value =
                serde_json::from_str(c.strip_prefix("data: ").unwrap().trim_end()).unwrap();
            v["id"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[test]
fn request_id_headers_as_captured() {
    let srv = server(true);

    let (got, want) = replay(&srv, "27_chat_x_request_id");
    assert_same_head("27", &got, &want);
    assert_eq!(got.header("x-request-id"), Some("ref-req-0002"));
    assert_eq!(got.json()["id"], want.json()["id"]);
    assert_eq!(want.json()["id"], "chatcmpl-ref-req-0002");

    let (got, want) = replay(&srv, "28_chat_no_request_id");
    assert_same_head("28", &got, &want);
    let hdr = got.header("x-request-id").unwrap().to_owned();
    assert!(is_hex(&hdr, 32), "uuid4 hex: {hdr}");
    let id = got.json()["id"].as_str().unwrap().to_owned();
    let rest = id.strip_prefix("chatcmpl-").unwrap();
    assert!(
        is_hex(rest, 16) && !hdr.contains(rest),
        "{id} unrelated to {hdr}"
    );

    let (got, want) = replay(&srv, "29_chat_stream_x_request_id");
    assert_same_head("29", &got, &want);
    assert_eq!(got.header("x-request-id"), Some("ref-req-0003"));
    assert_eq!(
        got.chunk_payloads().len(),
        want.chunk_payloads().len(),
        "one chunk per event"
    );
    let ids = chunk_ids(&got);
    assert!(!ids.is_empty());
    assert!(ids.iter().all(|i| i == "chatcmpl-ref-req-0003"), "{ids:?}");
    assert_eq!(chunk_ids(&want)[0], "chatcmpl-ref-req-0003");

    let (got, want) = replay(&srv, "30_health_request_id_headers");
    assert_same_head("30", &got, &want);
    assert_eq!(got.header("content-length"), Some("0"));
    assert!(is_hex(got.header("x-request-id").unwrap(), 32));
    assert!(got.body.is_empty());

    let (got, want) = replay(&srv, "31_err_unknown_model_request_id");
    assert_same_head("31", &got, &want);
    assert_eq!(got.header("x-request-id"), Some("ref-req-0004"));
    assert_eq!(got.header("content-length"), want.header("content-length"));
    assert_eq!(
        String::from_utf8_lossy(&got.body),
        String::from_utf8_lossy(&want.body)
    );
}

/// The salted `BlockStored` batches come out byte for byte as vLLM publishes them: the first
/// block's `extra_keys` is the bare salt (`["abc"]`, wire `91 a3 "abc"`), the later blocks' nil,
/// and an unsalted request's all nil. The scheduler runs the captured prompt with each salt;
/// its events are encoded with the default metadata and the captured timestamp.
#[test]
fn cache_salt_block_stored_payload_matches_vllm_bytes() {
    let msgs = container(&salted_events("frames.bin"));
    assert_eq!(msgs.len(), 4);
    let decoded: Value = serde_json::from_slice(&salted_events("decoded.json")).unwrap();
    let e = &decoded[1]["typed"]["events"][0];
    assert_eq!(e["extra_keys"][0], serde_json::json!(["abc"]));
    let tokens: Vec<u32> = e["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let mut prompt = tokens.clone();
    prompt.extend(100..125);
    for (salt, seq) in [(Some("abc"), 1usize), (Some("xyz"), 2), (None, 3)] {
        let frames = &msgs[seq];
        assert_eq!(frames[1], (seq as u64).to_be_bytes());
        let payload = &frames[2];
        // `[ts, events, 0]`: fixarray(3), then ts as float64.
        assert_eq!(&payload[..2], &[0x93, 0xcb]);
        let ts = f64::from_be_bytes(payload[2..10].try_into().unwrap());
        let config = SchedulerConfig {
            block_size: 32,
            num_gpu_blocks: 128,
            enable_prefix_caching: true,
            enable_kv_events: true,
            max_model_len: Some(2048),
            ..SchedulerConfig::default()
        };
        let mut sched = Scheduler::new(config, LatencyModel::zero()).unwrap();
        let mut req = Request::new(1, prompt.clone(), 4, 0.0);
        req.cache_salt = salt.map(str::to_owned);
        sched.add_request(req).unwrap();
        let events: Vec<KvCacheEvent> = sched
            .run_until_idle(0.0)
            .into_iter()
            .flat_map(|o| o.kv_events)
            .collect();
        assert_eq!(events.len(), 1, "seq {seq}: one BlockStored");
        let ours = batch_from_engine(ts, &events, Some(0), &EventMeta::default()).encode();
        if let Some(salt) = salt {
            let mut key = vec![0x91, 0xa0 | salt.len() as u8];
            key.extend_from_slice(salt.as_bytes());
            assert!(
                ours.windows(key.len()).any(|w| w == key.as_slice()),
                "seq {seq}: salt on the wire"
            );
        }
        assert_eq!(ours.len(), payload.len(), "seq {seq}: payload length");
        assert!(&ours == payload, "seq {seq}: payload bytes differ");
    }
}
