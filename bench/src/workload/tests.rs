//! Tests over every workload, and helpers for the family tests.

use serde_json::Value;

use super::*;

/// The parsed body of `r`.
pub(crate) fn body(r: &Request) -> Value {
    serde_json::from_slice(&r.body).expect("body is JSON")
}

/// `(role, content)` of every message of `body` (content `""` when not a string).
pub(crate) fn contents(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn every_workload_is_deterministic_for_a_seed() {
    let o = Options::default();
    for w in Workload::ALL {
        let a = w.requests(60, 1, &o);
        assert_eq!(a.len(), 60, "{}", w.name());
        assert_eq!(a, w.requests(60, 1, &o), "{}", w.name());
        let b = w.requests(60, 2, &o);
        assert_ne!(a, b, "{}", w.name());
        // No two bodies of one list are the same request.
        let distinct: std::collections::HashSet<&Vec<u8>> = a.iter().map(|r| &r.body).collect();
        assert_eq!(distinct.len(), a.len(), "{}", w.name());
    }
}

#[test]
fn every_body_is_a_valid_chat_request() {
    let o = Options {
        model: "m".to_string(),
        max_tokens: 17,
        stream: true,
    };
    for w in Workload::ALL {
        for r in w.requests(40, 3, &o) {
            let b = body(&r);
            assert_eq!(r.path, CHAT_PATH);
            assert_eq!(b["model"], "m", "{}", w.name());
            assert_eq!(b["max_tokens"], 17, "{}", w.name());
            assert_eq!(b["stream"], true, "{}", w.name());
            let m = b["messages"].as_array().expect("messages");
            assert!(!m.is_empty(), "{}", w.name());
            assert!(m.iter().all(|m| m["role"].is_string()), "{}", w.name());
            let last = m.last().and_then(|m| m["role"].as_str()).unwrap_or("");
            assert!(
                last == "user" || last == "tool",
                "{}: ends with a user turn or a tool result, not {last}",
                w.name()
            );
        }
    }
}

#[test]
fn sessions_only_where_there_are_conversations() {
    let o = Options::default();
    for w in Workload::ALL {
        let multi = matches!(w, Workload::W2 | Workload::W3);
        for r in w.requests(30, 4, &o) {
            assert_eq!(r.session_id.is_some(), multi, "{}", w.name());
            assert_eq!(r.position.is_some(), multi, "{}", w.name());
            if !multi {
                assert!(r.think_time.is_zero());
            }
        }
    }
}

#[test]
fn w8_is_w1_on_bursty_diurnal_arrivals() {
    let o = Options::default();
    assert_eq!(
        Workload::W8.requests(50, 9, &o),
        Workload::W1.requests(50, 9, &o)
    );
    assert_eq!(
        Workload::W8.arrivals(),
        ArrivalKind::GammaDiurnal {
            cv: 3.0,
            amplitude: 0.5
        }
    );
    assert_eq!(Workload::W1.arrivals(), ArrivalKind::Poisson);
}

#[test]
fn mix_is_half_w1_half_w6_interleaved() {
    let o = Options::default();
    let reqs = Workload::Mix.requests(400, 5, &o);
    let shared: Vec<bool> = reqs
        .iter()
        .map(|r| contents(&body(r))[0].0 == "system")
        .collect();
    assert_eq!(shared.iter().filter(|s| **s).count(), 200);
    // Interleaved, not one block after the other.
    assert!(shared[..100].iter().filter(|s| **s).count() > 25);
    assert!(shared[300..].iter().filter(|s| **s).count() > 25);
    let systems = SharedPrompts::default().system_prompts(text::sub_seed(5, 1));
    for r in reqs.iter().filter(|r| contents(&body(r))[0].0 == "system") {
        assert!(systems.contains(&contents(&body(r))[0].1));
    }
}

#[test]
fn names_parse_back() {
    for w in Workload::ALL {
        assert_eq!(Workload::parse(w.name()), Some(w));
    }
    assert_eq!(Workload::parse("W1"), Some(Workload::W1));
    assert_eq!(Workload::parse("w7"), None);
}
