//! Where a replica's streams are: from its `kv_events` config or from the engine's
//! `GET /kv_event_sources` (vLLM 0.32: an object keyed by data-parallel rank, each value the
//! rank's KV events config with its bound endpoints). A `*` (or bind-all) host is the engine's
//! bind address, and is replaced by the replica's own address. Pure.

use inferrail_config::KvEventEndpoints;
use std::net::IpAddr;

/// One rank's endpoints, ready to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankSource {
    /// The data-parallel rank.
    pub rank: usize,
    /// The PUB endpoint.
    pub endpoint: String,
    /// The replay endpoint.
    pub replay_endpoint: Option<String>,
    /// Topic prefix.
    pub topic: Vec<u8>,
}

/// Hosts that mean "every address of the engine's machine".
const BIND_ALL: [&str; 4] = ["*", "0.0.0.0", "[::]", "::"];

/// `endpoint` with a bind-all host replaced by `host`; other endpoints unchanged.
pub fn connectable(endpoint: &str, host: IpAddr) -> String {
    let Some(rest) = endpoint.strip_prefix("tcp://") else {
        return endpoint.to_string();
    };
    let Some(colon) = rest.rfind(':') else {
        return endpoint.to_string();
    };
    let (h, port) = rest.split_at(colon);
    if !BIND_ALL.contains(&h) {
        return endpoint.to_string();
    }
    match host {
        IpAddr::V4(v4) => format!("tcp://{v4}{port}"),
        IpAddr::V6(v6) => format!("tcp://[{v6}]{port}"),
    }
}

/// The one stream of a configured `kv_events` mapping.
pub fn from_config(e: &KvEventEndpoints, host: IpAddr) -> Vec<RankSource> {
    vec![RankSource {
        rank: 0,
        endpoint: connectable(&e.endpoint, host),
        replay_endpoint: e.replay_endpoint.as_deref().map(|r| connectable(r, host)),
        topic: e.topic.as_bytes().to_vec(),
    }]
}

/// Why a `/kv_event_sources` body gave no stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourcesError {
    /// Not a JSON object.
    #[error("/kv_event_sources is not a JSON object keyed by rank")]
    NotAnObject,
    /// No rank publishes over ZMQ (events disabled, or another publisher).
    #[error("the engine publishes no KV events over ZMQ (start it with --kv-events-config)")]
    NoneEnabled,
    /// A rank's entry is unusable.
    #[error("/kv_event_sources rank {rank}: {what}")]
    Rank {
        /// The rank key as written.
        rank: String,
        /// What is wrong.
        what: &'static str,
    },
}

/// The streams a `/kv_event_sources` body lists, in rank order. Ranks with events disabled or
/// another publisher are skipped; a page with none is an error.
pub fn parse_sources(body: &[u8], host: IpAddr) -> Result<Vec<RankSource>, SourcesError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| SourcesError::NotAnObject)?;
    let object = value.as_object().ok_or(SourcesError::NotAnObject)?;
    let mut out = Vec::new();
    for (rank_key, entry) in object {
        let bad = |what| SourcesError::Rank {
            rank: rank_key.clone(),
            what,
        };
        let rank: usize = rank_key
            .parse()
            .map_err(|_| bad("the key is not a rank number"))?;
        let Some(entry) = entry.as_object() else {
            return Err(bad("not an object"));
        };
        let enabled = entry
            .get("enable_kv_cache_events")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        let zmq = entry.get("publisher").and_then(serde_json::Value::as_str) == Some("zmq");
        if !enabled || !zmq {
            continue;
        }
        let endpoint = entry
            .get("endpoint")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| bad("no endpoint"))?;
        if !endpoint.starts_with("tcp://") {
            return Err(bad(
                "the endpoint is not tcp:// (ipc and inproc cannot be reached)",
            ));
        }
        let replay_endpoint = entry
            .get("replay_endpoint")
            .and_then(serde_json::Value::as_str)
            .filter(|r| r.starts_with("tcp://"))
            .map(|r| connectable(r, host));
        let topic = entry
            .get("topic")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        out.push(RankSource {
            rank,
            endpoint: connectable(endpoint, host),
            replay_endpoint,
            topic: topic.as_bytes().to_vec(),
        });
    }
    if out.is_empty() {
        return Err(SourcesError::NoneEnabled);
    }
    out.sort_by_key(|s| s.rank);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4() -> IpAddr {
        "10.1.2.3".parse().unwrap()
    }

    #[test]
    fn bind_hosts_become_the_replica_host() {
        assert_eq!(connectable("tcp://*:5557", v4()), "tcp://10.1.2.3:5557");
        assert_eq!(connectable("tcp://0.0.0.0:1", v4()), "tcp://10.1.2.3:1");
        assert_eq!(
            connectable("tcp://[::]:9", "::1".parse().unwrap()),
            "tcp://[::1]:9"
        );
        assert_eq!(connectable("tcp://engine:5557", v4()), "tcp://engine:5557");
    }

    #[test]
    fn the_real_vllm_page_gives_rank_zero() {
        let body = include_bytes!("../../../tests/fixtures/vllm_kv_event_sources.body");
        let got = parse_sources(body, v4()).unwrap();
        assert_eq!(
            got,
            vec![RankSource {
                rank: 0,
                endpoint: "tcp://127.0.0.1:18967".into(),
                replay_endpoint: Some("tcp://127.0.0.1:18968".into()),
                topic: b"kv".to_vec(),
            }]
        );
    }

    #[test]
    fn ranks_are_ordered_and_disabled_ones_skipped() {
        let body = br#"{"1":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5558","topic":""},
            "0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":null},
            "2":{"enable_kv_cache_events":false,"publisher":"null","endpoint":"tcp://*:5559"}}"#;
        let got = parse_sources(body, v4()).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].rank, got[0].endpoint.as_str()),
            (0, "tcp://10.1.2.3:5557")
        );
        assert_eq!(got[0].replay_endpoint, None);
        assert_eq!(
            (got[1].rank, got[1].endpoint.as_str()),
            (1, "tcp://10.1.2.3:5558")
        );
    }

    #[test]
    fn unusable_pages_say_why() {
        assert_eq!(parse_sources(b"{}", v4()), Err(SourcesError::NoneEnabled));
        assert_eq!(parse_sources(b"[1]", v4()), Err(SourcesError::NotAnObject));
        assert_eq!(
            parse_sources(b"not json", v4()),
            Err(SourcesError::NotAnObject)
        );
        assert!(matches!(
            parse_sources(br#"{"x":{}}"#, v4()),
            Err(SourcesError::Rank { .. })
        ));
        assert!(matches!(
            parse_sources(
                br#"{"0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"ipc:///tmp/x"}}"#,
                v4()
            ),
            Err(SourcesError::Rank { .. })
        ));
    }
}
