//! Throughput of the KV event codec and transport (`cargo bench -p inferrail-events`).
//!
//! Plain `std::time::Instant` timing; prints medians over repetitions. The machine is shared
//! and noisy: read the figures side by side within one run, not across runs.
//!
//! - `decode`: one batch holding a BlockStored of a 2,048-token prompt in blocks of 16 (128
//!   hashes, 2,048 token ids, per-block extra keys), as vLLM writes it;
//! - `encode`: the same batch;
//! - `loopback`: that batch published 2,000 times through the PUB socket and read back by a SUB
//!   client on 127.0.0.1, decoded, first publish to last decode.

use std::time::{Duration, Instant};

use inferrail_events::subscriber::{Received, Subscriber, SubscriberConfig};
use inferrail_events::{
    decode_batch, BlockStored, ExternalBlockHash, KvEventBatch, KvEventPublisher, PublisherConfig,
    WireEvent,
};

fn prompt_batch() -> KvEventBatch {
    let blocks = 128u64;
    KvEventBatch {
        ts: 1_796_014_365.359_944_3,
        events: vec![WireEvent::BlockStored(BlockStored {
            block_hashes: (0..blocks)
                .map(|i| ExternalBlockHash::Int(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
                .collect(),
            parent_block_hash: None,
            token_ids: (0..blocks as u32 * 16)
                .map(|t| (t * 7919) % 151_000)
                .collect(),
            block_size: 16,
            lora_id: None,
            medium: Some("GPU".into()),
            lora_name: None,
            extra_keys: Some(vec![None; blocks as usize]),
            group_idx: Some(0),
            kv_cache_spec_kind: Some("full_attention".into()),
            kv_cache_spec_sliding_window: None,
            locality: None,
            ownership: None,
            session_id: None,
        })],
        data_parallel_rank: Some(0),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn per_op(reps: usize, iters: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..iters {
                    f();
                }
                t.elapsed().as_secs_f64() / iters as f64
            })
            .collect(),
    )
}

fn main() {
    let batch = prompt_batch();
    let payload = batch.encode();
    let dec = per_op(15, 2_000, || {
        std::hint::black_box(decode_batch(std::hint::black_box(&payload)).ok());
    });
    let enc = per_op(15, 2_000, || {
        std::hint::black_box(std::hint::black_box(&batch).encode());
    });
    println!(
        "decode  {:>8.2} µs/batch  {:>7.0} MB/s  {:>6.1} M blocks/s  (payload {} bytes)",
        dec * 1e6,
        payload.len() as f64 / dec / 1e6,
        128.0 / dec / 1e6,
        payload.len()
    );
    println!(
        "encode  {:>8.2} µs/batch  {:>7.0} MB/s",
        enc * 1e6,
        payload.len() as f64 / enc / 1e6
    );

    let mut rates = Vec::new();
    for _ in 0..5 {
        let publisher = KvEventPublisher::start(PublisherConfig {
            endpoint: "tcp://*:0".into(),
            ..PublisherConfig::default()
        })
        .expect("publisher");
        let endpoint = format!(
            "tcp://127.0.0.1:{}",
            publisher.local_addr().expect("bound").port()
        );
        let mut sub = Subscriber::connect(&SubscriberConfig {
            idle_timeout: Duration::from_millis(50),
            ..SubscriberConfig::new(endpoint)
        })
        .expect("subscriber");
        let deadline = Instant::now() + Duration::from_secs(10);
        while publisher.num_subscriptions() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        let n = 2_000;
        let t = Instant::now();
        for _ in 0..n {
            publisher.publish(batch.clone());
        }
        let mut got = 0;
        while got < n && Instant::now() < deadline {
            if let Ok(Received::Message(m)) = sub.receive() {
                if decode_batch(&m.payload).is_ok() {
                    got += 1;
                }
            }
        }
        assert_eq!(got, n, "every published batch arrived");
        rates.push(n as f64 / t.elapsed().as_secs_f64());
    }
    let r = median(rates);
    println!(
        "loopback {:>7.0} batches/s  {:>6.2} M blocks/s  (PUB thread -> SUB on 127.0.0.1, decoded)",
        r,
        r * 128.0 / 1e6
    );
}
