//! `--kv-events-config`: vLLM's `KVEventsConfig` (`vllm/config/kv_events.py`), parsed from the
//! same JSON `vllm serve` takes, refusing unknown keys as vLLM's config validation does.

use std::time::Duration;

use serde::Deserialize;

use inferrail_events::PublisherConfig;

/// vLLM's `KVEventsConfig`, with its defaults.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KvEventsConfig {
    /// Whether the engine produces KV cache events at all.
    pub enable_kv_cache_events: bool,
    /// `"zmq"` or `"null"`; unset means `"zmq"` when events are enabled, else `"null"`.
    pub publisher: Option<String>,
    /// The PUB endpoint (bound when it contains `*` or `::`, connected to otherwise).
    pub endpoint: String,
    /// The replay ROUTER endpoint (always bound); `None`: no replay.
    pub replay_endpoint: Option<String>,
    /// How many of the latest batches the replay socket can serve.
    pub buffer_steps: usize,
    /// The PUB high-water mark. Accepted for compatibility; the simulator's publisher drops a
    /// subscriber that stops reading instead (see [`inferrail_events::publisher`]).
    pub hwm: usize,
    /// Batches queued for the publisher thread before new ones are dropped (vLLM's Python
    /// `Queue(maxsize=0)` is unbounded; 0 is taken as the default, 100,000).
    pub max_queue_size: usize,
    /// The topic frame of every message.
    pub topic: String,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        KvEventsConfig {
            enable_kv_cache_events: false,
            publisher: None,
            endpoint: "tcp://*:5557".into(),
            replay_endpoint: None,
            buffer_steps: 10_000,
            hwm: 100_000,
            max_queue_size: 100_000,
            topic: String::new(),
        }
    }
}

impl KvEventsConfig {
    /// Parses `--kv-events-config`'s JSON. Unknown keys, wrong types and an unknown
    /// publisher are refused with a message naming them.
    pub fn parse(json: &str) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| format!("--kv-events-config: not valid JSON: {e}"))?;
        if !v.is_object() {
            return Err("--kv-events-config: expected a JSON object".into());
        }
        let c: KvEventsConfig = serde_json::from_value(v)
            .map_err(|e| format!("--kv-events-config: invalid KVEventsConfig: {e}"))?;
        match c.publisher.as_deref() {
            None | Some("zmq") | Some("null") => {}
            Some(other) => {
                return Err(format!(
                    "--kv-events-config: unknown event publisher {other:?} (expected \"zmq\" or \"null\")"
                ))
            }
        }
        if let Some(ep) = &c.replay_endpoint {
            if !ep.starts_with("tcp://") {
                return Err(format!(
                    "--kv-events-config: unsupported replay_endpoint {ep:?} (expected tcp://host:port)"
                ));
            }
        }
        Ok(c)
    }

    /// The effective publisher, as vLLM's `__post_init__` resolves it.
    pub fn publisher_kind(&self) -> &str {
        match self.publisher.as_deref() {
            Some(p) => p,
            None if self.enable_kv_cache_events => "zmq",
            None => "null",
        }
    }

    /// Whether batches go out on a ZMQ socket (events enabled and publisher `zmq`).
    pub fn publishes(&self) -> bool {
        self.enable_kv_cache_events && self.publisher_kind() == "zmq"
    }

    /// The publisher's settings.
    pub fn publisher_config(&self) -> PublisherConfig {
        PublisherConfig {
            endpoint: self.endpoint.clone(),
            topic: self.topic.clone(),
            max_queue_size: if self.max_queue_size == 0 {
                100_000
            } else {
                self.max_queue_size
            },
            send_timeout: Duration::from_secs(1),
            replay_endpoint: self.replay_endpoint.clone(),
            buffer_steps: self.buffer_steps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_capture_config() {
        let c = KvEventsConfig::parse(
            r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:18957", "replay_endpoint": "tcp://127.0.0.1:18958", "topic": "kv"}"#,
        )
        .unwrap();
        assert!(c.publishes());
        assert_eq!(c.buffer_steps, 10_000);
        assert_eq!(c.hwm, 100_000);
        let p = c.publisher_config();
        assert_eq!(p.endpoint, "tcp://127.0.0.1:18957");
        assert_eq!(p.replay_endpoint.as_deref(), Some("tcp://127.0.0.1:18958"));
        assert_eq!(p.topic, "kv");
        assert_eq!(p.max_queue_size, 100_000);
    }

    #[test]
    fn defaults_like_vllm() {
        let c = KvEventsConfig::parse("{}").unwrap();
        assert_eq!(c, KvEventsConfig::default());
        assert_eq!(c.publisher_kind(), "null");
        assert!(!c.publishes());
        let c = KvEventsConfig::parse(r#"{"enable_kv_cache_events": true}"#).unwrap();
        assert_eq!(c.publisher_kind(), "zmq");
        assert_eq!(c.endpoint, "tcp://*:5557");
        let c = KvEventsConfig::parse(r#"{"enable_kv_cache_events": true, "publisher": "null"}"#)
            .unwrap();
        assert!(!c.publishes());
        let c = KvEventsConfig::parse(r#"{"replay_endpoint": null, "buffer_steps": 3}"#).unwrap();
        assert_eq!((c.replay_endpoint, c.buffer_steps), (None, 3));
    }

    #[test]
    fn refusals_name_the_problem() {
        let e = KvEventsConfig::parse(r#"{"enable_kv_cache_events": true, "endpont": "x"}"#)
            .unwrap_err();
        assert!(e.contains("unknown field `endpont`"), "{e}");
        assert!(e.contains("endpoint"), "{e}");
        let e = KvEventsConfig::parse(r#"{"publisher": "kafka"}"#).unwrap_err();
        assert!(e.contains("kafka"), "{e}");
        let e = KvEventsConfig::parse(r#"{"buffer_steps": -1}"#).unwrap_err();
        assert!(e.contains("buffer_steps") || e.contains("-1"), "{e}");
        assert!(KvEventsConfig::parse("not json").is_err());
        assert!(KvEventsConfig::parse("[]").is_err());
        assert!(KvEventsConfig::parse(r#"{"replay_endpoint": "ipc:///tmp/x"}"#).is_err());
    }
}
