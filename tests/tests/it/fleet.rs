//! Fleet membership and health: passive ejection under load, flapping replicas, health checks
//! moving waiting requests, and engine scrapes that bad engines cannot delay.

use inferrail_sim::server::{SimOptions, SimServer};
use inferrail_tests::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn replica<'a>(replicas: &'a Value, id: &str) -> Option<&'a Value> {
    replicas["replicas"]
        .as_array()?
        .iter()
        .find(|r| r["id"] == id)
}

#[test]
fn a_killed_engine_is_ejected_fast_under_load_and_readmitted_when_back() {
    let e = engines(3, EngineBehavior::Instant);
    let yaml = config_yaml(
        &e,
        "round_robin",
        "",
        "health:\n  unhealthy_threshold: 3\n  ejection_backoff: 400ms\n  interval: 5s\n  timeout: 1s\nretry:\n  max_attempts: 3\n  backoff: 1ms\n",
    );
    let gw = TestGateway::start(&yaml);
    let addr = gw.addr;
    let admin = gw.admin;
    let load = std::thread::spawn(move || paced_load(addr, 2000, 1000.0, 8, false, |_| Vec::new()));

    std::thread::sleep(Duration::from_millis(500));
    e[1].set_behavior(EngineBehavior::Refuse);
    let kill_at = Instant::now();
    // Poll the admin API as fast as it answers until the replica is out of rotation.
    let mut ejected_after = None;
    while kill_at.elapsed() < Duration::from_secs(5) {
        let r = inferrail_tools::client::call(admin, "GET", "/admin/replicas", &[], None).unwrap();
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        if replica(&v, "engine-1").is_some_and(|r| r["ejected"] == true) {
            ejected_after = Some(kill_at.elapsed());
            break;
        }
    }
    let ejected_after = ejected_after.expect("the killed engine was ejected");
    let (_, v) = gw.admin("GET", "/admin/replicas", None);
    let timing = &replica(&v, "engine-1").unwrap()["last_ejection"];
    assert!(timing["after_first_failure_ms"].is_number(), "{timing}");
    eprintln!("engine-1 ejected {ejected_after:?} after it was killed; {timing}");
    // Generous bound for a noisy machine; the figure is measured by perf/control-plane.
    assert!(ejected_after < Duration::from_secs(1), "{ejected_after:?}");

    // Back after its ejection: it gets traffic again.
    e[1].set_behavior(EngineBehavior::Instant);
    let before = e[1].stats().requests;
    assert!(
        wait_until(Duration::from_secs(5), || e[1].stats().requests
            > before + 10),
        "the engine gets requests again once readmitted"
    );
    let seen = load.join().unwrap();
    let failed: Vec<&Seen> = seen.iter().filter(|s| s.status != 200).collect();
    assert!(failed.is_empty(), "client errors: {failed:?}");
    let text = gw.metrics();
    assert!(
        metric(&text, "inferrail_ejections_total{replica=\"engine-1\"}").unwrap_or(0.0) >= 1.0,
        "{text}"
    );
}

#[test]
fn a_replica_flapping_between_healthy_and_503_gives_no_client_errors() {
    let e = engines(3, EngineBehavior::Instant);
    let yaml = config_yaml(
        &e,
        "round_robin",
        "",
        "health:\n  unhealthy_threshold: 2\n  ejection_backoff: 50ms\nretry:\n  max_attempts: 3\n  backoff: 1ms\n",
    );
    let gw = TestGateway::start(&yaml);
    let stop = AtomicBool::new(false);
    let seen = std::thread::scope(|s| {
        let flap = s.spawn(|| {
            let mut down = false;
            while !stop.load(Ordering::SeqCst) {
                down = !down;
                e[0].set_behavior(if down {
                    EngineBehavior::Status { code: 503 }
                } else {
                    EngineBehavior::Instant
                });
                std::thread::sleep(Duration::from_millis(100));
            }
            e[0].set_behavior(EngineBehavior::Instant);
        });
        let seen = paced_load(gw.addr, 600, 300.0, 6, true, |_| Vec::new());
        stop.store(true, Ordering::SeqCst);
        flap.join().unwrap();
        seen
    });
    let failed: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.status != 200 || !s.complete)
        .collect();
    assert!(failed.is_empty(), "client errors: {failed:?}");
    assert!(e[0].stats().requests > 0, "the flapping replica was used");
}

/// A tiny engine whose `/health` answers 200 until `sick` is set (then 503), and which never
/// answers completion requests.
fn hanging_engine(sick: Arc<AtomicBool>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(10_000) {
            let Ok(mut stream) = stream else { continue };
            let sick = sick.clone();
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                let mut buf = [0u8; 4096];
                let mut seen = Vec::new();
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                if seen.starts_with(b"GET /health") {
                    let status = if sick.load(Ordering::SeqCst) {
                        "503 Service Unavailable"
                    } else {
                        "200 OK"
                    };
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    return;
                }
                // Completions (and anything else): hold the connection, never answer.
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn requests_waiting_on_a_replica_that_fails_health_checks_move_to_another() {
    let good = engines(1, EngineBehavior::Instant);
    let sick = Arc::new(AtomicBool::new(false));
    let bad = hanging_engine(sick.clone());
    let yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 1\n  request_timeout: 30s\n\
         models:\n  - name: {MODEL}\n    policy: round_robin\n\
         health:\n  interval: 50ms\n  timeout: 40ms\n  unhealthy_threshold: 2\n\
         replicas:\n  - id: hanging\n    url: http://{bad}\n    models: [{MODEL}]\n  - id: good\n    url: {}\n    models: [{MODEL}]\n",
        good[0].url()
    );
    let gw = TestGateway::start(&yaml);
    let addr = gw.addr;
    // Round robin: some of these wait on the hanging replica.
    let clients: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || post_chat(addr, &chat(MODEL, false))))
        .collect();
    assert!(
        wait_until(Duration::from_secs(5), || good[0].stats().requests >= 1),
        "some requests reached the good replica"
    );
    std::thread::sleep(Duration::from_millis(200));
    let moved_at = Instant::now();
    sick.store(true, Ordering::SeqCst);
    for c in clients {
        let r = c.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-inferrail-replica"), Some("good"));
    }
    // Well before the 30 s request timeout: they moved when the health checks failed.
    assert!(moved_at.elapsed() < Duration::from_secs(10));
    let text = gw.metrics();
    assert!(
        metric(
            &text,
            "inferrail_errors_total{reason=\"replica_left_rotation\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
}

/// A server answering every request on a fresh connection with `respond`.
fn bad_metrics_engine(respond: fn(&mut TcpStream)) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(10_000) {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = stream.read(&mut buf);
                respond(&mut stream);
            });
        }
    });
    addr
}

fn huge_page(s: &mut TcpStream) {
    let _ = write!(s, "HTTP/1.1 200 OK\r\ncontent-length: 52428800\r\n\r\n");
    let chunk = vec![b'#'; 64 * 1024];
    for _ in 0..800 {
        if s.write_all(&chunk).is_err() {
            return;
        }
    }
}

fn endless_page(s: &mut TcpStream) {
    let _ = write!(s, "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
    let line = b"400\r\n";
    let body = vec![b'v'; 1024];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if s.write_all(line)
            .and_then(|_| s.write_all(&body))
            .and_then(|_| s.write_all(b"\r\n"))
            .is_err()
        {
            return;
        }
    }
}

fn garbage_page(s: &mut TcpStream) {
    let _ = s.write_all(b"\x00\xffNOT HTTP AT ALL\r\n\r\n\x13\x37");
}

#[test]
fn bad_metrics_pages_never_delay_the_healthy_replicas_report() {
    let sim = SimServer::start(SimOptions::new(MODEL)).unwrap();
    let bad = [
        bad_metrics_engine(huge_page),
        bad_metrics_engine(endless_page),
        bad_metrics_engine(garbage_page),
    ];
    let mut yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 1\n\
         models:\n  - name: {MODEL}\n\
         load:\n  scrape_interval: 100ms\n  scrape_timeout: 80ms\n\
         replicas:\n  - id: healthy\n    url: {}\n    models: [{MODEL}]\n",
        sim.url()
    );
    for (i, a) in bad.iter().enumerate() {
        yaml.push_str(&format!(
            "  - id: bad-{i}\n    url: http://{a}\n    models: [{MODEL}]\n"
        ));
    }
    let gw = TestGateway::start(&yaml);
    assert!(wait_until(Duration::from_secs(5), || {
        let (_, v) = gw.admin("GET", "/admin/replicas", None);
        replica(&v, "healthy").is_some_and(|r| r["engine"].is_object())
    }));
    // For two seconds the healthy replica's report stays fresh: its age never exceeds the scrape
    // interval by more than a generous scheduling margin, while the others time out or fail.
    let mut oldest = 0.0f64;
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        let (_, v) = gw.admin("GET", "/admin/replicas", None);
        let age = replica(&v, "healthy").unwrap()["engine"]["age_ms"]
            .as_f64()
            .unwrap();
        oldest = oldest.max(age);
        std::thread::sleep(Duration::from_millis(7));
    }
    eprintln!("oldest healthy report seen: {oldest} ms");
    assert!(oldest < 250.0, "healthy report aged {oldest} ms");
    let (_, v) = gw.admin("GET", "/admin/replicas", None);
    for i in 0..3 {
        let r = replica(&v, &format!("bad-{i}")).unwrap();
        assert!(r["engine"].is_null(), "{r}");
        assert_ne!(r["scrape"]["result"], "ok", "{r}");
    }
    let text = gw.metrics();
    assert!(
        metric(
            &text,
            "inferrail_scrapes_total{replica=\"bad-0\",result=\"failed\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    assert!(
        metric(&text, "inferrail_engine_running{replica=\"healthy\"}").is_some(),
        "{text}"
    );
}
