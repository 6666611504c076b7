//! Per-replica caps hold fleet-wide, exactly, whatever the cores (one ledger per replica, ADR
//! 016): never more in flight than max_concurrency, never more queued at the gateway than
//! max_pending, and a full fleet whose queues are full gets 503 with Retry-After at once.

use inferrail_sim::ScriptedEngine;
use inferrail_tests::*;
use std::time::{Duration, Instant};

#[test]
fn concurrency_cap_never_overshoots_across_cores() {
    let e = engines(
        2,
        EngineBehavior::Slow {
            delay: Duration::from_millis(300),
        },
    );
    let replicas_extra = "";
    let yaml = config_yaml(&e, "least_request", "", replicas_extra).replace(
        "    models: [sim-llama]\n",
        "    models: [sim-llama]\n    max_concurrency: 3\n    max_pending: 3\n",
    );
    let gw = TestGateway::start(&yaml);
    let addr = gw.addr;
    let started = Instant::now();
    let handles: Vec<_> = (0..24)
        .map(|_| {
            std::thread::spawn(move || {
                let t = Instant::now();
                let r = post_chat(addr, &chat(MODEL, false));
                (r, t.elapsed())
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = results.iter().filter(|(r, _)| r.status == 200).count();
    let refused: Vec<_> = results.iter().filter(|(r, _)| r.status == 503).collect();
    assert_eq!(ok + refused.len(), 24);
    for x in &e {
        assert!(
            x.stats().max_in_flight <= 3,
            "cap overshot: {}",
            x.stats().max_in_flight
        );
    }
    assert!(ok >= 2, "some requests were served");
    assert!(
        !refused.is_empty(),
        "24 concurrent requests cannot fit 6 slots"
    );
    for (r, took) in &refused {
        assert_eq!(r.header("retry-after"), Some("1"));
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["error"]["code"], 503);
        // Refused at once: it did not wait for one of the engines' 1 s slots to free.
        assert!(*took < Duration::from_millis(900), "{took:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let text = gw.metrics();
    assert_eq!(
        metric(&text, "inferrail_errors_total{reason=\"fleet_full\"}"),
        Some(refused.len() as f64)
    );
}

/// Starts a gateway on two cores in front of `engines`, every replica with the given caps.
fn capped(e: &[ScriptedEngine], max_concurrency: u32, max_pending: u32) -> TestGateway {
    let yaml = config_yaml(e, "least_request", "", "").replace(
        "    models: [sim-llama]\n",
        &format!(
            "    models: [sim-llama]\n    max_concurrency: {max_concurrency}\n    max_pending: {max_pending}\n"
        ),
    );
    TestGateway::start(&yaml)
}

#[test]
fn a_cap_of_one_serves_every_sequential_request_on_any_core() {
    // Caps are fleet-wide (one ledger per replica), not split per core: with two cores a cap of
    // one used to leave one core a zero share, refusing about half of these.
    let e = engines(1, EngineBehavior::Instant);
    let gw = capped(&e, 1, 0);
    for i in 0..40 {
        let r = post_chat(gw.addr, &chat(MODEL, false));
        assert_eq!(
            r.status,
            200,
            "request {i}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    assert_eq!(e[0].stats().max_in_flight, 1);
}

#[test]
fn of_two_concurrent_requests_under_a_cap_of_one_without_a_queue_one_is_refused() {
    let e = engines(
        1,
        EngineBehavior::Slow {
            delay: Duration::from_millis(600),
        },
    );
    let gw = capped(&e, 1, 0);
    let addr = gw.addr;
    let handles: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || post_chat(addr, &chat(MODEL, false))))
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = results.iter().filter(|r| r.status == 200).count();
    let refused: Vec<_> = results.iter().filter(|r| r.status == 503).collect();
    assert_eq!(
        (ok, refused.len()),
        (1, 1),
        "exactly one served, one refused"
    );
    assert_eq!(refused[0].header("retry-after"), Some("1"));
    let v: serde_json::Value = serde_json::from_slice(&refused[0].body).unwrap();
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("concurrency limit") && msg.contains("max_pending"),
        "{msg}"
    );
    assert_eq!(e[0].stats().max_in_flight, 1);
}

#[test]
fn max_pending_queues_requests_until_a_slot_frees() {
    // Two slots and two queue places, fleet-wide over both cores: of six concurrent requests two
    // run, two wait at the gateway and run next, two are refused at once.
    let e = engines(
        1,
        EngineBehavior::Slow {
            delay: Duration::from_millis(400),
        },
    );
    let gw = capped(&e, 2, 2);
    let addr = gw.addr;
    let handles: Vec<_> = (0..6)
        .map(|i| {
            std::thread::spawn(move || {
                // Stagger the starts a little so the slots are taken before the rest arrive.
                std::thread::sleep(Duration::from_millis(if i < 2 { 0 } else { 100 }));
                let t = Instant::now();
                (post_chat(addr, &chat(MODEL, false)), t.elapsed())
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok: Vec<_> = results.iter().filter(|(r, _)| r.status == 200).collect();
    let refused: Vec<_> = results.iter().filter(|(r, _)| r.status == 503).collect();
    assert_eq!(
        (ok.len(), refused.len()),
        (4, 2),
        "two served, two queued then served, two refused"
    );
    assert_eq!(e[0].stats().max_in_flight, 2, "the cap holds");
    assert_eq!(e[0].stats().requests, 4);
    // The queued two ran after a slot freed: they took at least one engine delay more.
    let waited = ok
        .iter()
        .filter(|(_, took)| *took >= Duration::from_millis(600))
        .count();
    assert_eq!(waited, 2, "{results:?}");
    for (r, _) in &refused {
        assert_eq!(r.header("retry-after"), Some("1"));
    }
    let text = gw.metrics();
    assert_eq!(
        metric(&text, "inferrail_errors_total{reason=\"fleet_full\"}"),
        Some(2.0)
    );
}
