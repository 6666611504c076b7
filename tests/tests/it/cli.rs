//! The `inferrail` binary: check, serve on the epoll fallback, and SIGTERM.

use inferrail_tests::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn check_reports_every_problem_with_its_path() {
    let dir = std::env::temp_dir().join(format!("inferrail-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "server:\n  listn: 1\nmodels:\n  - name: m\nreplicas:\n  - id: a\n    url: ftp://x\n    models: [m]\n  - id: b\n    url: http://127.0.0.1:1\n    models: [nope]\n",
    )
    .unwrap();
    let out = Command::new(inferrail_bin())
        .args(["check", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("server.listn"), "{err}");
    assert!(err.contains("replicas[0].url"), "{err}");
    assert!(err.contains("replicas[1].models[0]"), "{err}");
    let good = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/examples/local-3-replicas.yaml"
    );
    let out = Command::new(inferrail_bin())
        .args(["check", "--config", good])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/examples/inferrail.yaml"
    );
    let out = Command::new(inferrail_bin())
        .args(["check", "--config", example])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn serves_on_the_epoll_driver_and_stops_on_sigterm() {
    let e = engines(1, EngineBehavior::Instant);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("inferrail-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("gw.yaml");
    std::fs::write(
        &cfg,
        config_yaml(&e, "round_robin", "", "").replace(
            "listen: 127.0.0.1:0\n  admin",
            &format!("listen: 127.0.0.1:{port}\n  admin"),
        ),
    )
    .unwrap();
    let mut child = Command::new(inferrail_bin())
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("MONOIO_FORCE_LEGACY_DRIVER", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut banner = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        banner.push_str(&line);
        banner.push('\n');
        if line.contains("serving on") {
            break;
        }
    }
    assert!(
        banner.contains("epoll"),
        "the fallback is said at start: {banner}"
    );
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let r = post_chat(addr, &chat(MODEL, false));
    assert_eq!(r.status, 200);
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let mut stopped = false;
    for _ in 0..100 {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            stopped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !stopped {
        let _ = child.kill();
        panic!("inferrail did not stop on SIGTERM");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_warns_about_a_tokenizer_that_does_not_load() {
    let dir = std::env::temp_dir().join(format!("inferrail-check-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("tok.yaml");
    std::fs::write(
        &cfg,
        "models:\n  - name: m\n    tokenizer: /nonexistent/tokenizer\n  - name: n\n    tokenizer: builtin:sim\nreplicas:\n  - id: a\n    url: http://127.0.0.1:1\n    models: [m, n]\n",
    )
    .unwrap();
    let out = Command::new(inferrail_bin())
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "a tokenizer problem is a warning: {text}"
    );
    assert!(
        text.contains("warning: models[0].tokenizer: /nonexistent/tokenizer")
            && text.contains("routed without cache predictions"),
        "{text}"
    );
    assert!(text.contains("1 with a tokenizer"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn demo_runs_to_the_end_and_checks_what_it_says() {
    let mut child = Command::new(inferrail_bin())
        .args(["demo"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: the demo takes a few seconds; a hung demo is killed and fails the test.
    let mut status = None;
    for _ in 0..1200 {
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if status.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let status = status.unwrap_or_else(|| panic!("inferrail demo did not end in 120 s:\n{text}"));
    assert!(
        status.success(),
        "{status}\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "1. 6 chats over three shared system prompts, policy cost_model",
        "the prediction equals the engine's own count on",
        "2. A streaming request",
        "data: [DONE]",
        "engine-1 is ejected",
        "none of the",
        "unknown model -> 404",
        "GET on a POST route -> 405 (allow: POST)",
        "inferrail_requests_total",
        "Done: all ",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(!text.contains("FAILED"), "{text}");
}
