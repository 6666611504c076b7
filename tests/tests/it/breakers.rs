//! Per-replica caps hold across cores: never more in flight than max_concurrency, never more
//! waiting than max_pending, and a full fleet gets 503 with Retry-After at once.

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

#[test]
fn pending_cap_limits_requests_waiting_for_a_head() {
    let e = engines(1, EngineBehavior::Hang);
    let yaml = config_yaml(&e, "round_robin", "", "")
        .replace("cores: 2", "cores: 1")
        .replace(
            "    models: [sim-llama]\n",
            "    models: [sim-llama]\n    max_concurrency: 100\n    max_pending: 2\n",
        );
    let gw = TestGateway::start(&yaml);
    let mut waiting = Vec::new();
    for _ in 0..6 {
        let mut c = connect(gw.addr);
        c.send(
            "POST",
            "/v1/chat/completions",
            &[],
            Some(&chat(MODEL, false)),
        )
        .unwrap();
        waiting.push(c);
    }
    assert!(wait_until(Duration::from_secs(5), || e[0]
        .stats()
        .in_flight
        == 2));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(e[0].stats().max_in_flight, 2, "max_pending 2");
    let refused = waiting
        .iter_mut()
        .filter_map(|c| {
            c.stream()
                .set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            c.read_response("POST").ok()
        })
        .filter(|r| r.status == 503)
        .count();
    assert_eq!(refused, 4);
}
