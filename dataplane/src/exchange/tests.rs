//! Every retry rule of the exchange, driven with virtual time and no socket.

use super::*;
use crate::errors::Failure;
use std::time::{Duration, Instant};

/// A request under test: the machine, the virtual clock, and every action it issued.
struct Run {
    ex: Exchange<u32>,
    t0: Instant,
    now: Instant,
    log: Vec<Action<u32>>,
}

fn limits(t0: Instant, max_attempts: u32) -> Limits {
    Limits {
        deadline: t0 + Duration::from_secs(10),
        max_attempts,
        backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        first_byte_timeout: Duration::from_secs(3),
        stream_idle_timeout: Duration::from_secs(2),
    }
}

impl Run {
    fn new(max_attempts: u32) -> Run {
        Run::with(|l| Limits { max_attempts, ..l })
    }

    fn with(f: impl FnOnce(Limits) -> Limits) -> Run {
        let t0 = Instant::now();
        let mut run = Run {
            ex: Exchange::new(f(limits(t0, 3))),
            t0,
            now: t0,
            log: Vec::new(),
        };
        run.drain();
        run
    }

    fn drain(&mut self) -> Vec<Action<u32>> {
        let mut new = Vec::new();
        while let Some(a) = self.ex.poll_action() {
            new.push(a);
        }
        for a in &new {
            self.log.push(clone_action(a));
        }
        new
    }

    fn feed(&mut self, event: Event<u32>) -> Vec<Action<u32>> {
        self.ex.handle(event, self.now);
        self.drain()
    }

    fn at(&mut self, offset_ms: u64) -> &mut Run {
        self.now = self.t0 + Duration::from_millis(offset_ms);
        self
    }

    /// Fires the machine's next timer at its instant.
    fn fire_next(&mut self) -> (Timer, Vec<Action<u32>>) {
        let (timer, at) = self.ex.timer().expect("a timer is armed");
        self.now = at;
        (timer, self.feed(Event::TimerFired(timer)))
    }

    /// Routes to `replica` (ticket = 100 + replica) and connects.
    fn route(&mut self, replica: usize, reused: bool) -> Vec<Action<u32>> {
        let mut out = self.feed(Event::Routed {
            replica,
            ticket: Some(100 + replica as u32),
        });
        out.extend(self.feed(Event::Connected { reused }));
        out
    }

    /// Routes to `replica`, connects and writes the whole request.
    fn sent(&mut self, replica: usize, reused: bool) -> Vec<Action<u32>> {
        let mut out = self.route(replica, reused);
        out.extend(self.feed(Event::RequestWritten));
        out
    }

    fn count(&self, pred: impl Fn(&Action<u32>) -> bool) -> usize {
        self.log.iter().filter(|a| pred(a)).count()
    }

    fn connects(&self) -> usize {
        self.count(|a| matches!(a, Action::Connect { .. }))
    }

    fn routes(&self) -> usize {
        self.count(|a| matches!(a, Action::Route { .. }))
    }

    fn answer(&self) -> Option<&Failure> {
        self.log.iter().find_map(|a| match a {
            Action::Answer { failure, .. } => Some(failure),
            _ => None,
        })
    }

    fn finish(&self) -> Option<Outcome> {
        self.log.iter().find_map(|a| match a {
            Action::Finish { outcome, .. } => Some(*outcome),
            _ => None,
        })
    }
}

fn clone_action(a: &Action<u32>) -> Action<u32> {
    match a {
        Action::Route { attempt } => Action::Route { attempt: *attempt },
        Action::WaitForSlot { until } => Action::WaitForSlot { until: *until },
        Action::Connect { replica, pooled } => Action::Connect {
            replica: *replica,
            pooled: *pooled,
        },
        Action::Send => Action::Send,
        Action::ReadHead => Action::ReadHead,
        Action::Relay { status } => Action::Relay { status: *status },
        Action::Failed { replica, failure } => Action::Failed {
            replica: *replica,
            failure: failure.clone(),
        },
        Action::Report { replica, ok } => Action::Report {
            replica: *replica,
            ok: *ok,
        },
        Action::TakeBack(t) => Action::TakeBack(*t),
        Action::Release => Action::Release,
        Action::BackOff { until } => Action::BackOff { until: *until },
        Action::Answer { failure, replica } => Action::Answer {
            failure: failure.clone(),
            replica: *replica,
        },
        Action::Finish { outcome, replica } => Action::Finish {
            outcome: *outcome,
            replica: *replica,
        },
    }
}

const CLOSED: Event<u32> = Event::EngineClosed {
    received_any: false,
};

#[test]
fn a_healthy_engine_is_relayed_and_reported_once() {
    let mut r = Run::new(3);
    assert_eq!(r.log, vec![Action::Route { attempt: 1 }]);
    let out = r.sent(0, false);
    assert_eq!(
        out,
        vec![
            Action::Connect {
                replica: 0,
                pooled: true
            },
            Action::Send,
            Action::ReadHead
        ]
    );
    assert_eq!(
        r.feed(Event::Head { status: 200 }),
        vec![Action::Relay { status: 200 }]
    );
    assert!(r.ex.relaying());
    r.feed(Event::Delivered);
    let out = r.feed(Event::StreamEnded);
    assert_eq!(
        out,
        vec![
            Action::Report {
                replica: 0,
                ok: true
            },
            Action::Finish {
                outcome: Outcome::Success,
                replica: Some(0)
            }
        ]
    );
    assert!(r.ex.is_done() && r.ex.timer().is_none());
    assert_eq!(r.count(|a| matches!(a, Action::TakeBack(_))), 0);
}

#[test]
fn connect_failure_moves_to_another_replica_after_backoff() {
    let mut r = Run::new(3);
    r.feed(Event::Routed {
        replica: 0,
        ticket: Some(7),
    });
    let out = r.feed(Event::ConnectFailed("refused".into()));
    let until = r.t0 + Duration::from_millis(100);
    assert_eq!(
        out,
        vec![
            Action::Failed {
                replica: Some(0),
                failure: Failure::Connect("refused".into())
            },
            Action::Report {
                replica: 0,
                ok: false
            },
            Action::TakeBack(7),
            Action::Release,
            Action::BackOff { until },
        ]
    );
    assert_eq!(r.ex.timer(), Some((Timer::Backoff, until)));
    // A backoff timer fed early is ignored.
    assert!(r.at(50).feed(Event::TimerFired(Timer::Backoff)).is_empty());
    let (timer, out) = r.fire_next();
    assert_eq!(timer, Timer::Backoff);
    assert_eq!(out, vec![Action::Route { attempt: 2 }]);
    assert_eq!(r.ex.tried(), &[0]);
}

#[test]
fn connect_timeout_and_first_byte_timeout_are_retried() {
    let mut r = Run::new(3);
    r.feed(Event::Routed {
        replica: 0,
        ticket: None,
    });
    let (timer, out) = r.fire_next();
    assert_eq!(timer, Timer::Connect);
    assert!(out.contains(&Action::Failed {
        replica: Some(0),
        failure: Failure::ConnectTimeout
    }));
    r.fire_next();
    r.sent(1, false);
    let (timer, out) = r.fire_next();
    assert_eq!(timer, Timer::FirstByte);
    assert!(out.contains(&Action::Report {
        replica: 1,
        ok: false
    }));
    assert!(matches!(out.last(), Some(Action::BackOff { .. })));
}

#[test]
fn a_close_before_the_head_is_retried() {
    for written in [false, true] {
        let mut r = Run::new(3);
        r.route(0, false);
        if written {
            r.feed(Event::RequestWritten);
        }
        let out = r.feed(Event::EngineClosed { received_any: true });
        assert!(out.contains(&Action::Failed {
            replica: Some(0),
            failure: Failure::EngineClosed {
                reused: false,
                request_written: written,
                received_any: true
            }
        }));
        assert!(matches!(out.last(), Some(Action::BackOff { .. })));
    }
}

#[test]
fn unavailable_statuses_are_retried_only_while_another_attempt_is_allowed() {
    for status in [502, 503, 504] {
        let mut r = Run::new(2);
        r.sent(0, false);
        let out = r.feed(Event::Head { status });
        assert!(out.contains(&Action::Failed {
            replica: Some(0),
            failure: Failure::Unavailable(status)
        }));
        assert!(out.contains(&Action::TakeBack(100)));
        r.fire_next();
        r.sent(1, false);
        // The last attempt: the engine's own answer is passed through.
        assert_eq!(
            r.feed(Event::Head { status }),
            vec![Action::TakeBack(101), Action::Relay { status }]
        );
        let out = r.feed(Event::StreamEnded);
        assert_eq!(
            out[0],
            Action::Report {
                replica: 1,
                ok: false
            }
        );
    }
    // 500 and 4xx are never retried.
    for status in [400, 429, 500] {
        let mut r = Run::new(3);
        r.sent(0, false);
        assert_eq!(
            r.feed(Event::Head { status }),
            vec![Action::TakeBack(100), Action::Relay { status }]
        );
    }
}

#[test]
fn a_503_whose_retry_would_cross_the_deadline_is_passed_through() {
    let mut r = Run::with(|l| Limits {
        deadline: l.deadline - Duration::from_millis(9_950),
        ..l
    });
    r.sent(0, false);
    // Backoff 100 ms would end after the 50 ms deadline.
    assert_eq!(
        r.feed(Event::Head { status: 503 }),
        vec![Action::TakeBack(100), Action::Relay { status: 503 }]
    );
}

#[test]
fn nothing_is_retried_after_the_commit() {
    let mut r = Run::new(5);
    r.sent(0, false);
    r.feed(Event::Head { status: 200 });
    r.feed(Event::Received);
    r.feed(Event::Delivered);
    let out = r.feed(Event::EngineClosed { received_any: true });
    assert_eq!(
        out,
        vec![
            Action::Failed {
                replica: Some(0),
                failure: Failure::EngineClosed {
                    reused: false,
                    request_written: true,
                    received_any: true
                }
            },
            Action::Report {
                replica: 0,
                ok: false
            },
            Action::Finish {
                outcome: Outcome::Failed,
                replica: Some(0)
            }
        ]
    );
    assert_eq!(r.routes(), 1);
    // Late events change nothing.
    assert!(r.feed(Event::ConnectFailed("x".into())).is_empty());
    assert!(r.feed(Event::Head { status: 503 }).is_empty());
}

#[test]
fn a_stale_pooled_connection_gets_one_uncounted_fresh_try() {
    let mut r = Run::new(1);
    r.sent(0, true);
    let out = r.feed(CLOSED);
    assert_eq!(
        out,
        vec![Action::Connect {
            replica: 0,
            pooled: false
        }]
    );
    assert_eq!(r.ex.attempts(), 1, "not an attempt");
    assert_eq!(r.connects(), 2);
    assert_eq!(r.count(|a| matches!(a, Action::Report { .. })), 0);
    assert_eq!(r.count(|a| matches!(a, Action::Failed { .. })), 0);
    r.feed(Event::Connected { reused: false });
    r.feed(Event::RequestWritten);
    assert_eq!(
        r.feed(Event::Head { status: 200 }),
        vec![Action::Relay { status: 200 }]
    );
}

#[test]
fn a_second_stale_close_in_one_attempt_is_a_real_failure() {
    let mut r = Run::new(2);
    r.sent(0, true);
    r.feed(CLOSED);
    // The fresh connection is reported reused by a confused driver: still only one fresh try.
    r.feed(Event::Connected { reused: true });
    r.feed(Event::RequestWritten);
    let out = r.feed(CLOSED);
    assert!(out.contains(&Action::Report {
        replica: 0,
        ok: false
    }));
    assert!(matches!(out.last(), Some(Action::BackOff { .. })));
}

#[test]
fn a_request_two_engines_died_on_is_refused_as_poison() {
    let mut r = Run::new(5);
    r.sent(0, false);
    let out = r.feed(CLOSED);
    assert!(
        matches!(out.last(), Some(Action::BackOff { .. })),
        "{out:?}"
    );
    r.fire_next();
    r.sent(1, false);
    let out = r.feed(CLOSED);
    assert!(out.contains(&Action::Report {
        replica: 1,
        ok: false
    }));
    assert!(out.contains(&Action::TakeBack(101)));
    assert!(out.contains(&Action::Failed {
        replica: None,
        failure: Failure::Poison
    }));
    assert_eq!(r.answer(), Some(&Failure::Poison));
    assert_eq!(r.finish(), Some(Outcome::Failed));
    assert_eq!(r.ex.tried(), &[0, 1], "a third engine never sees it");
}

#[test]
fn closes_before_the_whole_request_was_written_are_not_strikes() {
    let mut r = Run::new(3);
    for replica in 0..2 {
        r.route(replica, false);
        r.feed(CLOSED);
        r.fire_next();
    }
    assert_eq!(r.routes(), 3);
    assert_eq!(r.answer(), None);
}

#[test]
fn a_stale_close_whose_engine_is_gone_counts_toward_poison() {
    // Pooled connections everywhere: the dying engine looks stale, then refuses connections.
    let mut r = Run::new(5);
    for replica in 0..2 {
        r.sent(replica, true);
        r.feed(CLOSED);
        let out = r.feed(Event::ConnectFailed("refused".into()));
        if replica == 0 {
            assert!(matches!(out.last(), Some(Action::BackOff { .. })));
            r.fire_next();
        }
    }
    assert_eq!(r.answer(), Some(&Failure::Poison));
    assert_eq!(r.ex.tried(), &[0, 1]);
}

#[test]
fn the_stream_has_one_deadline_however_often_it_moves() {
    let mut r = Run::new(3);
    r.sent(0, false);
    r.feed(Event::Head { status: 200 });
    // One event a second under a 2 s stall limit: never stalls, but the 10 s deadline cuts it.
    for s in 1..=9 {
        r.at(s * 1000);
        r.feed(Event::Received);
        r.feed(Event::Delivered);
    }
    let (timer, out) = r.fire_next();
    assert_eq!(timer, Timer::Deadline);
    assert_eq!(r.now, r.t0 + Duration::from_secs(10));
    assert!(out.contains(&Action::Failed {
        replica: Some(0),
        failure: Failure::Deadline
    }));
    assert!(
        out.contains(&Action::Report {
            replica: 0,
            ok: true
        }),
        "a long stream is not the replica's failure"
    );
    assert_eq!(r.finish(), Some(Outcome::Failed));
}

#[test]
fn a_silent_engine_is_cut_at_the_stall_timeout_and_a_silent_client_too() {
    let mut r = Run::new(3);
    r.sent(0, false);
    r.at(500).feed(Event::Head { status: 200 });
    r.feed(Event::Delivered);
    let (timer, out) = r.fire_next();
    assert_eq!(timer, Timer::Stall);
    assert_eq!(r.now, r.t0 + Duration::from_millis(2500));
    assert!(out.contains(&Action::Failed {
        replica: Some(0),
        failure: Failure::Stalled
    }));
    assert!(out.contains(&Action::Report {
        replica: 0,
        ok: false
    }));

    // The engine sent, the client never took it.
    let mut r = Run::new(3);
    r.sent(0, false);
    r.feed(Event::Head { status: 200 });
    let (_, out) = r.fire_next();
    assert!(out.contains(&Action::Failed {
        replica: Some(0),
        failure: Failure::ClientGone
    }));
    assert!(out.contains(&Action::Report {
        replica: 0,
        ok: true
    }));
    assert_eq!(r.finish(), Some(Outcome::ClientClosed));
}

#[test]
fn the_first_byte_timer_runs_per_attempt_and_never_past_the_deadline() {
    let mut r = Run::with(|l| Limits {
        first_byte_timeout: Duration::from_secs(6),
        ..l
    });
    r.sent(0, false);
    let (timer, _) = r.fire_next();
    assert_eq!(
        (timer, r.now),
        (Timer::FirstByte, r.t0 + Duration::from_secs(6))
    );
    r.fire_next(); // backoff
    let start = r.now;
    r.sent(1, false);
    assert_eq!(
        r.ex.timer(),
        Some((Timer::Deadline, r.t0 + Duration::from_secs(10))),
        "the attempt started at {:?}: its first-byte limit is past the deadline",
        start - r.t0
    );
    r.fire_next();
    assert_eq!(r.answer(), Some(&Failure::Deadline));
}

#[test]
fn backoff_stays_inside_the_deadline() {
    let mut r = Run::with(|l| Limits {
        deadline: l.deadline - Duration::from_millis(9_700),
        max_attempts: 10,
        ..l
    });
    // Attempts at 0 and 100 ms; the next backoff (200 ms) would end at the 300 ms deadline.
    r.feed(Event::Routed {
        replica: 0,
        ticket: None,
    });
    r.feed(Event::ConnectFailed("refused".into()));
    r.fire_next();
    r.feed(Event::Routed {
        replica: 1,
        ticket: None,
    });
    let out = r.feed(Event::ConnectFailed("refused".into()));
    assert!(!out.iter().any(|a| matches!(a, Action::BackOff { .. })));
    assert_eq!(r.answer(), Some(&Failure::Connect("refused".into())));
    for a in &r.log {
        if let Action::BackOff { until } = a {
            assert!(*until < r.t0 + Duration::from_millis(300));
        }
    }
}

#[test]
fn max_attempts_bounds_the_attempts() {
    let mut r = Run::new(2);
    for replica in 0..2 {
        r.feed(Event::Routed {
            replica,
            ticket: None,
        });
        r.feed(Event::ConnectFailed("refused".into()));
        if replica == 0 {
            r.fire_next();
        }
    }
    assert_eq!(r.routes(), 2);
    assert_eq!(r.finish(), Some(Outcome::Failed));
    assert!(r.ex.is_done());
}

#[test]
fn protocol_errors_and_the_deadline_are_not_retried() {
    let mut r = Run::new(3);
    r.sent(0, false);
    r.feed(Event::Protocol("garbage".into()));
    assert_eq!(r.answer(), Some(&Failure::Protocol("garbage".into())));
    assert_eq!(r.routes(), 1);
}

#[test]
fn a_replica_leaving_rotation_moves_the_request_without_blaming_it() {
    let mut r = Run::new(3);
    r.sent(0, false);
    let out = r.feed(Event::LeftRotation);
    assert!(!out.iter().any(|a| matches!(a, Action::Report { .. })));
    assert!(out.contains(&Action::TakeBack(100)));
    assert!(matches!(out.last(), Some(Action::BackOff { .. })));
}

#[test]
fn a_client_leaving_ends_the_request_wherever_it_is() {
    // Waiting for the head: the engine has the request, its record stays.
    let mut r = Run::new(3);
    r.sent(0, false);
    let out = r.feed(Event::ClientLeft);
    assert_eq!(
        out,
        vec![
            Action::Failed {
                replica: Some(0),
                failure: Failure::ClientGone
            },
            Action::Release,
            Action::Finish {
                outcome: Outcome::ClientClosed,
                replica: Some(0)
            }
        ]
    );
    // Backing off.
    let mut r = Run::new(3);
    r.feed(Event::Routed {
        replica: 0,
        ticket: None,
    });
    r.feed(Event::ConnectFailed("x".into()));
    let out = r.feed(Event::ClientLeft);
    assert_eq!(
        out.last(),
        Some(&Action::Finish {
            outcome: Outcome::ClientClosed,
            replica: None
        })
    );
    assert!(r.feed(Event::TimerFired(Timer::Backoff)).is_empty());
}

#[test]
fn refusals_name_what_refused() {
    for why in [
        NoCandidate::OutOfRotation,
        NoCandidate::AtCapacity,
        NoCandidate::QueueFull,
    ] {
        let mut r = Run::new(3);
        let out = r.feed(Event::NoCandidate {
            why,
            can_wait: false,
        });
        assert_eq!(
            out,
            vec![
                Action::Failed {
                    replica: None,
                    failure: Failure::NoCandidate(why)
                },
                Action::Answer {
                    failure: Failure::NoCandidate(why),
                    replica: None
                },
                Action::Finish {
                    outcome: Outcome::Rejected,
                    replica: None
                }
            ]
        );
    }
}

#[test]
fn a_retry_with_nowhere_to_go_answers_the_last_failure() {
    let mut r = Run::new(3);
    r.sent(0, false);
    r.feed(Event::Head { status: 503 });
    r.fire_next();
    r.feed(Event::NoCandidate {
        why: NoCandidate::OutOfRotation,
        can_wait: false,
    });
    assert_eq!(r.answer(), Some(&Failure::Unavailable(503)));
    assert_eq!(r.count(|a| matches!(a, Action::Failed { .. })), 1);
}

#[test]
fn a_full_fleet_may_wait_for_a_slot_until_the_deadline() {
    let mut r = Run::new(3);
    let out = r.feed(Event::NoCandidate {
        why: NoCandidate::AtCapacity,
        can_wait: true,
    });
    let deadline = r.t0 + Duration::from_secs(10);
    assert_eq!(out, vec![Action::WaitForSlot { until: deadline }]);
    assert_eq!(r.ex.timer(), Some((Timer::Deadline, deadline)));
    assert_eq!(
        r.at(300).feed(Event::SlotFreed),
        vec![Action::Route { attempt: 1 }]
    );
    // Full again: wait again, and the deadline ends the wait.
    r.feed(Event::NoCandidate {
        why: NoCandidate::AtCapacity,
        can_wait: true,
    });
    let (timer, _) = r.fire_next();
    assert_eq!(timer, Timer::Deadline);
    assert_eq!(r.answer(), Some(&Failure::WaitedForSlot));
    assert_eq!(r.finish(), Some(Outcome::Rejected));
    // A wait is refused when no queue has room, and never offered to an unhealthy fleet.
    let mut r = Run::new(3);
    let out = r.feed(Event::NoCandidate {
        why: NoCandidate::OutOfRotation,
        can_wait: true,
    });
    assert!(matches!(out[1], Action::Answer { .. }));
}

#[test]
fn timers_due_together_fire_the_deadline_first() {
    let mut r = Run::with(|l| Limits {
        first_byte_timeout: Duration::from_secs(10),
        ..l
    });
    r.sent(0, false);
    assert_eq!(
        r.ex.timer(),
        Some((Timer::Deadline, r.t0 + Duration::from_secs(10)))
    );
    // A first-byte timer fed for the same instant is not the deadline: the answer is 504 either
    // way, but the deadline, not a retry, decides.
    r.at(10_000).feed(Event::TimerFired(Timer::Deadline));
    assert_eq!(r.answer(), Some(&Failure::Deadline));
}
