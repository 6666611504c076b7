//! `inferrail-tools kv-events --endpoint tcp://HOST:PORT`: subscribes to an engine's KV event
//! stream with the gateway's own SUB client and decoder, and prints each batch as one JSON line
//! (`{"topic", "seq", "ts", "data_parallel_rank", "events", "unknown_events"}`), so a user can
//! see what an engine publishes and whether the router reads it. Stops after `--count` batches
//! or `--timeout` seconds without one; a payload that does not decode is printed as
//! `{"seq", "error"}` and the stream goes on.

use std::io::Write;
use std::time::{Duration, Instant};

use inferrail_events::subscriber::{Received, Subscriber, SubscriberConfig};
use inferrail_events::{decode_batch, ExternalBlockHash, KvEventBatch, Value, WireEvent};
use serde_json::{json, Value as Json};

/// What `kv-events` was asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchOptions {
    /// The engine's PUB endpoint.
    pub endpoint: String,
    /// Topic prefix.
    pub topic: String,
    /// Stop after this many batches (`None`: never).
    pub count: Option<u64>,
    /// Stop after this long without a batch.
    pub timeout: Duration,
}

/// Why `kv-events` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The command line is wrong (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The subscription failed (the engine's side; retrying may help).
    #[error(transparent)]
    Subscribe(#[from] inferrail_events::SubscribeError),
    /// Nothing arrived within the timeout.
    #[error("no KV event batch within {0:?}")]
    Timeout(Duration),
    /// Writing to stdout failed.
    #[error("cannot write: {0}")]
    Output(#[from] std::io::Error),
}

/// Parses `--endpoint E [--topic T] [--count N] [--timeout SECS]`.
pub fn parse_args(args: &[String]) -> Result<WatchOptions, WatchError> {
    let mut o = WatchOptions {
        endpoint: String::new(),
        topic: String::new(),
        count: None,
        timeout: Duration::from_secs(10),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| WatchError::Usage(format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--endpoint" => o.endpoint = value()?,
            "--topic" => o.topic = value()?,
            "--count" => {
                o.count = Some(
                    value()?
                        .parse()
                        .map_err(|_| WatchError::Usage("--count needs a whole number".into()))?,
                )
            }
            "--timeout" => {
                let secs: f64 = value()?
                    .parse()
                    .map_err(|_| WatchError::Usage("--timeout needs seconds".into()))?;
                if !(secs.is_finite() && secs > 0.0) {
                    return Err(WatchError::Usage("--timeout must be above 0".into()));
                }
                o.timeout = Duration::from_secs_f64(secs);
            }
            other => return Err(WatchError::Usage(format!("unknown argument {other:?}"))),
        }
    }
    if o.endpoint.is_empty() {
        return Err(WatchError::Usage("--endpoint is required".into()));
    }
    Ok(o)
}

fn hash(h: &ExternalBlockHash) -> Json {
    match h {
        ExternalBlockHash::Int(i) => json!(i),
        ExternalBlockHash::Bytes(b) => {
            json!(b.iter().map(|x| format!("{x:02x}")).collect::<String>())
        }
    }
}

fn value(v: &Value) -> Json {
    match v {
        Value::Nil => Json::Null,
        Value::Bool(b) => json!(b),
        Value::Int(i) => json!(i),
        Value::Float(f) => json!(f),
        Value::Str(s) => json!(s),
        Value::Bytes(b) => json!(b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        Value::Array(items) => Json::Array(items.iter().map(value).collect()),
    }
}

/// One event as JSON, with vLLM's field names.
pub fn event_json(e: &WireEvent) -> Json {
    match e {
        WireEvent::BlockStored(s) => json!({
            "type": "BlockStored",
            "block_hashes": s.block_hashes.iter().map(hash).collect::<Vec<_>>(),
            "parent_block_hash": s.parent_block_hash.as_ref().map(hash),
            "token_ids": s.token_ids,
            "block_size": s.block_size,
            "lora_id": s.lora_id,
            "medium": s.medium,
            "lora_name": s.lora_name,
            "extra_keys": s.extra_keys.as_ref().map(|ks| ks.iter()
                .map(|k| k.as_ref().map(|t| t.iter().map(value).collect::<Vec<_>>()))
                .collect::<Vec<_>>()),
            "group_idx": s.group_idx,
            "kv_cache_spec_kind": s.kv_cache_spec_kind,
            "kv_cache_spec_sliding_window": s.kv_cache_spec_sliding_window,
            "locality": s.locality,
            "ownership": s.ownership,
            "session_id": s.session_id,
        }),
        WireEvent::BlockRemoved(r) => json!({
            "type": "BlockRemoved",
            "block_hashes": r.block_hashes.iter().map(hash).collect::<Vec<_>>(),
            "medium": r.medium,
            "group_idx": r.group_idx,
            "locality": r.locality,
            "ownership": r.ownership,
        }),
        WireEvent::AllBlocksCleared => json!({"type": "AllBlocksCleared"}),
    }
}

/// One batch as a JSON line's value.
pub fn batch_json(topic: &[u8], seq: u64, b: &KvEventBatch, unknown_events: usize) -> Json {
    json!({
        "topic": String::from_utf8_lossy(topic),
        "seq": seq,
        "ts": b.ts,
        "data_parallel_rank": b.data_parallel_rank,
        "events": b.events.iter().map(event_json).collect::<Vec<_>>(),
        "unknown_events": unknown_events,
    })
}

/// Subscribes and prints batches to `out` until `count` or the timeout.
pub fn run(o: &WatchOptions, out: &mut impl Write) -> Result<(), WatchError> {
    let mut sub = Subscriber::connect(&SubscriberConfig {
        topic: o.topic.as_bytes().to_vec(),
        idle_timeout: Duration::from_millis(100),
        connect_timeout: o.timeout.min(Duration::from_secs(5)),
        ..SubscriberConfig::new(o.endpoint.clone())
    })?;
    let mut seen = 0u64;
    let mut last = Instant::now();
    while o.count.is_none_or(|c| seen < c) {
        match sub.receive()? {
            Received::Message(m) => {
                last = Instant::now();
                seen += 1;
                let line = match decode_batch(&m.payload) {
                    Ok(d) => batch_json(&m.topic, m.seq, &d.batch, d.unknown_events),
                    Err(e) => json!({"seq": m.seq, "error": e.to_string()}),
                };
                writeln!(out, "{line}")?;
                out.flush()?;
            }
            Received::Malformed { frames } => {
                writeln!(
                    out,
                    "{}",
                    json!({"error": format!("message of {frames} frames")})
                )?;
            }
            Received::Idle => {
                if last.elapsed() >= o.timeout {
                    return Err(WatchError::Timeout(o.timeout));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments_parse_and_refuse() {
        let o = parse_args(&args(&[
            "--endpoint",
            "tcp://127.0.0.1:1",
            "--count",
            "3",
            "--timeout",
            "0.5",
        ]))
        .unwrap();
        assert_eq!(o.count, Some(3));
        assert_eq!(o.timeout, Duration::from_millis(500));
        for bad in [
            &[][..],
            &["--endpoint"][..],
            &["--endpoint", "e", "--count", "x"][..],
            &["--endpoint", "e", "--timeout", "0"][..],
            &["--endpoint", "e", "--what"][..],
        ] {
            assert!(
                matches!(parse_args(&args(bad)), Err(WatchError::Usage(_))),
                "{bad:?}"
            );
        }
    }
}
