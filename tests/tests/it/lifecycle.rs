//! Graceful shutdown: listeners close at once, running responses finish.

use inferrail_tests::*;
use std::time::Duration;

#[test]
fn shutdown_lets_running_responses_finish_and_refuses_new_connections() {
    let e = engines(
        1,
        EngineBehavior::Slow {
            delay: Duration::from_millis(400),
        },
    );
    let gw = TestGateway::start(&config_yaml(
        &e,
        "round_robin",
        "  shutdown_timeout: 5s\n",
        "",
    ));
    let addr = gw.addr;
    let running = std::thread::spawn(move || post_chat(addr, &chat(MODEL, false)));
    assert!(wait_until(Duration::from_secs(5), || e[0]
        .stats()
        .in_flight
        == 1));
    gw.begin_shutdown();
    assert!(
        wait_until(Duration::from_secs(2), || std::net::TcpStream::connect(
            addr
        )
        .is_err()),
        "the listener closed"
    );
    let r = running.join().unwrap();
    assert_eq!(r.status, 200, "the running response finished");
    assert_eq!(r.header("connection"), Some("close"));
    gw.stop();
}

#[test]
fn shutdown_timeout_cuts_responses_that_run_too_long() {
    let e = engines(1, EngineBehavior::Hang);
    let gw = TestGateway::start(&config_yaml(
        &e,
        "round_robin",
        "  shutdown_timeout: 200ms\n",
        "",
    ));
    let mut c = connect(gw.addr);
    c.send(
        "POST",
        "/v1/chat/completions",
        &[],
        Some(&chat(MODEL, false)),
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(5), || e[0]
        .stats()
        .in_flight
        == 1));
    let t = std::time::Instant::now();
    gw.stop();
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(
        c.read_response("POST").is_err(),
        "the hung request was closed"
    );
    assert!(wait_until(Duration::from_secs(2), || e[0]
        .stats()
        .client_disconnects
        == 1));
}
