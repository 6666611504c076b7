//! The same engine on monoio's epoll driver (what runs where io_uring is missing). One test per
//! binary: the driver choice is read once per process.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::*;
use inferrail_sim::{Behavior, EngineOptions, ScriptedEngine};

#[test]
fn behaviors_work_on_the_epoll_driver() {
    // Set before any runtime exists in this process; this binary has no other test.
    std::env::set_var("MONOIO_FORCE_LEGACY_DRIVER", "1");
    let mut e = ScriptedEngine::start(EngineOptions::new("tiny")).unwrap();
    let addr = e.addr();

    let mut c = Client::new(addr);
    for _ in 0..3 {
        c.send(&chat());
        assert_eq!(c.response().status(), 200);
    }
    c.send(&post("/v1/chat/completions", CHAT_STREAM, ""));
    assert_eq!(
        c.response().events().last().map(String::as_str),
        Some("[DONE]")
    );

    e.set_behavior(Behavior::Stream {
        chunks: 3,
        interval: Duration::from_millis(20),
    });
    c.send(&post("/v1/chat/completions", CHAT_STREAM, ""));
    assert_eq!(c.response().events().len(), 6);

    e.set_behavior(Behavior::Hang);
    let mut h = Client::new(addr);
    h.send(&chat());
    assert!(eventually(Duration::from_secs(2), || e.stats().in_flight == 1));
    drop(h);
    assert!(eventually(Duration::from_secs(2), || e
        .stats()
        .client_disconnects
        == 1));

    e.set_behavior(Behavior::CloseBeforeResponse);
    let mut k = Client::new(addr);
    k.send(&chat());
    assert_eq!(k.read_to_eof(), b"");

    e.set_behavior(Behavior::Refuse);
    assert!(TcpStream::connect_timeout(&addr, IO_TIMEOUT).is_err());
    assert_eq!(c.read_to_eof(), b"");
    e.set_behavior(Behavior::Instant);
    assert_eq!(exchange(addr, &chat()).status(), 200);

    let mut h = Client::new(addr);
    e.set_behavior(Behavior::Hang);
    h.send(&chat());
    assert!(eventually(Duration::from_secs(2), || e.stats().in_flight == 1));
    e.stop();
    assert_eq!(h.read_to_eof(), b"");
    assert!(TcpStream::connect_timeout(&addr, IO_TIMEOUT).is_err());
}
