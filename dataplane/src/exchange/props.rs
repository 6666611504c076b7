//! Property: for any fleet of engine behaviours, routing order, `max_attempts` and timeouts, the
//! exchange ends exactly as a naive reference walk of the rules says; a request succeeds whenever
//! a healthy replica is reachable within its attempts; nothing is retried once a byte reached
//! the client; no attempt starts and no backoff ends at or past the deadline.

use super::*;
use crate::errors::Failure;
use proptest::prelude::*;
use std::time::{Duration, Instant};

/// How one simulated engine behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    /// Answers 200.
    Healthy,
    /// Answers 503.
    Refuses503,
    /// Refuses connections.
    ConnectFails,
    /// Reads the request and dies: closes without a byte, then refuses connections.
    Dies,
    /// Its pooled connection is stale (closed without a byte); a fresh one is healthy.
    StalePooled,
    /// Reads the request and never answers.
    Hangs,
}

/// How a request ended, as far as the properties care.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// A response from `replica` with `status` reached the client.
    Relayed { replica: usize, status: u16 },
    /// The gateway answered the client itself.
    Answered(Kind),
}

/// The failure the client was answered with, coarsely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Connect,
    Closed,
    FirstByte,
    Deadline,
    Poison,
}

fn kind(f: &Failure) -> Kind {
    match f {
        Failure::Connect(_) => Kind::Connect,
        Failure::EngineClosed { .. } => Kind::Closed,
        Failure::FirstByteTimeout => Kind::FirstByte,
        Failure::Deadline => Kind::Deadline,
        Failure::Poison => Kind::Poison,
        other => panic!("unexpected answer {other:?}"),
    }
}

/// A case: engines (with whether each has a pooled connection), the routing order of the first
/// pass (attempt k goes to `order[(k - 1) % n]`) and the limits in milliseconds.
#[derive(Debug, Clone)]
struct Case {
    engines: Vec<(Engine, bool)>,
    order: Vec<usize>,
    max_attempts: u32,
    backoff_ms: u64,
    max_backoff_ms: u64,
    first_byte_ms: u64,
    deadline_ms: u64,
}

impl Case {
    fn pick(&self, attempt: u32) -> usize {
        self.order[(attempt as usize - 1) % self.order.len()]
    }

    fn backoff(&self, attempts: u32) -> u64 {
        backoff(
            Duration::from_millis(self.backoff_ms),
            Duration::from_millis(self.max_backoff_ms),
            attempts,
        )
        .as_millis() as u64
    }

    /// Whether a stale pooled connection is what the engine's pool holds.
    fn pooled(&self, r: usize) -> bool {
        match self.engines[r] {
            (Engine::StalePooled, _) => true,
            (Engine::ConnectFails, _) => false,
            (_, pooled) => pooled,
        }
    }
}

/// The rules walked naively: returns the end and the replicas that received the request.
fn reference(case: &Case) -> (End, Vec<usize>) {
    let n = case.engines.len();
    let mut alive = vec![true; n];
    let mut pooled: Vec<bool> = (0..n).map(|r| case.pooled(r)).collect();
    let mut seen = Vec::new();
    let mut strikes = 0;
    let mut t = 0u64;
    for attempt in 1u32.. {
        let r = case.pick(attempt);
        let used_pool = std::mem::take(&mut pooled[r]);
        let retry_allowed =
            |t: u64| attempt < case.max_attempts && t + case.backoff(attempt) < case.deadline_ms;
        let failure = match case.engines[r].0 {
            Engine::Healthy | Engine::StalePooled => {
                seen.push(r);
                return (
                    End::Relayed {
                        replica: r,
                        status: 200,
                    },
                    seen,
                );
            }
            Engine::Refuses503 => {
                seen.push(r);
                if !retry_allowed(t) {
                    return (
                        End::Relayed {
                            replica: r,
                            status: 503,
                        },
                        seen,
                    );
                }
                None
            }
            Engine::ConnectFails => Some(Kind::Connect),
            Engine::Dies if alive[r] => {
                seen.push(r);
                alive[r] = false;
                strikes += 1;
                // Through a pooled connection it looks stale; its fresh retry cannot connect.
                Some(if used_pool {
                    Kind::Connect
                } else {
                    Kind::Closed
                })
            }
            Engine::Dies => Some(Kind::Connect),
            Engine::Hangs => {
                seen.push(r);
                if t + case.first_byte_ms >= case.deadline_ms {
                    return (End::Answered(Kind::Deadline), seen);
                }
                t += case.first_byte_ms;
                Some(Kind::FirstByte)
            }
        };
        if strikes >= 2 {
            return (End::Answered(Kind::Poison), seen);
        }
        if let Some(f) = failure {
            if !retry_allowed(t) {
                return (End::Answered(f), seen);
            }
        }
        t += case.backoff(attempt);
    }
    unreachable!("the loop returns")
}

/// Runs the machine against the simulated engines, checking the step invariants on the way.
fn simulate(case: &Case) -> Result<(End, Vec<usize>), TestCaseError> {
    let t0 = Instant::now();
    let ms = |d: u64| t0 + Duration::from_millis(d);
    let deadline = ms(case.deadline_ms);
    let mut ex: Exchange<u32> = Exchange::new(Limits {
        deadline,
        max_attempts: case.max_attempts,
        backoff: Duration::from_millis(case.backoff_ms),
        max_backoff: Duration::from_millis(case.max_backoff_ms),
        connect_timeout: Duration::from_secs(3600),
        first_byte_timeout: Duration::from_millis(case.first_byte_ms),
        stream_idle_timeout: Duration::from_secs(3600),
    });
    let n = case.engines.len();
    let mut alive = vec![true; n];
    let mut pooled: Vec<bool> = (0..n).map(|r| case.pooled(r)).collect();
    let mut seen = Vec::new();
    let mut now = t0;
    let mut conn: Option<(usize, bool)> = None; // replica, reused
    let mut committed = false;
    let mut taken_back = Vec::new();
    let mut relayed = None;
    let mut answered = None;
    let mut finished = false;
    for _ in 0..1000 {
        let Some(action) = ex.poll_action() else {
            if finished {
                break;
            }
            // Something hangs: the next timer fires.
            let (timer, at) = ex.timer().expect("a pending exchange has a timer");
            prop_assert!(at >= now);
            now = at;
            ex.handle(Event::TimerFired(timer), now);
            continue;
        };
        prop_assert!(!finished, "an action after Finish: {action:?}");
        let event = match action {
            Action::Route { attempt } => {
                prop_assert!(!committed && now < deadline);
                prop_assert!(attempt <= case.max_attempts);
                Some(Event::Routed {
                    replica: case.pick(attempt),
                    ticket: Some(attempt),
                })
            }
            Action::Connect {
                replica,
                pooled: may_pool,
            } => {
                prop_assert!(!committed && now < deadline);
                if may_pool && std::mem::take(&mut pooled[replica]) {
                    conn = Some((replica, true));
                    Some(Event::Connected { reused: true })
                } else if !alive[replica] || case.engines[replica].0 == Engine::ConnectFails {
                    Some(Event::ConnectFailed("refused".into()))
                } else {
                    conn = Some((replica, false));
                    Some(Event::Connected { reused: false })
                }
            }
            Action::Send => {
                prop_assert!(!committed);
                Some(Event::RequestWritten)
            }
            Action::ReadHead => {
                let (r, reused) = conn.expect("connected");
                match case.engines[r].0 {
                    Engine::StalePooled if reused => Some(Event::EngineClosed {
                        received_any: false,
                    }),
                    Engine::Dies => {
                        seen.push(r);
                        alive[r] = false;
                        Some(Event::EngineClosed {
                            received_any: false,
                        })
                    }
                    Engine::Hangs => {
                        seen.push(r);
                        None
                    }
                    Engine::Refuses503 => {
                        seen.push(r);
                        Some(Event::Head { status: 503 })
                    }
                    _ => {
                        seen.push(r);
                        Some(Event::Head { status: 200 })
                    }
                }
            }
            Action::Relay { status } => {
                committed = true;
                relayed = Some(End::Relayed {
                    replica: conn.expect("connected").0,
                    status,
                });
                ex.handle(Event::Received, now);
                ex.handle(Event::Delivered, now);
                Some(Event::StreamEnded)
            }
            Action::BackOff { until } => {
                prop_assert!(until < deadline, "backoff past the deadline");
                None
            }
            Action::TakeBack(ticket) => {
                prop_assert!(!taken_back.contains(&ticket));
                taken_back.push(ticket);
                None
            }
            Action::Release => {
                conn = None;
                None
            }
            Action::Answer { failure, .. } => {
                prop_assert!(!committed, "an answer after the commit");
                answered = Some(End::Answered(kind(&failure)));
                None
            }
            Action::Finish { .. } => {
                finished = true;
                None
            }
            Action::Report { .. } | Action::Failed { .. } => None,
            Action::WaitForSlot { .. } => {
                return Err(TestCaseError::fail("no fleet here is full"));
            }
        };
        if let Some(e) = event {
            ex.handle(e, now);
        }
    }
    prop_assert!(finished && ex.is_done());
    prop_assert!(ex.attempts() <= case.max_attempts);
    let end = relayed.or(answered).expect("the request ended");
    Ok((end, seen))
}

fn engine() -> impl Strategy<Value = Engine> {
    prop_oneof![
        Just(Engine::Healthy),
        Just(Engine::Refuses503),
        Just(Engine::ConnectFails),
        Just(Engine::Dies),
        Just(Engine::StalePooled),
        Just(Engine::Hangs),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec((engine(), any::<bool>()), 1..6),
        1u32..7,
        0u64..50,
        0u64..200,
        1u64..500,
        1u64..3000,
    )
        .prop_flat_map(|(engines, max_attempts, b, mb, fb, dl)| {
            let order: Vec<usize> = (0..engines.len()).collect();
            (Just(engines), Just(order).prop_shuffle()).prop_map(move |(engines, order)| Case {
                engines,
                order,
                max_attempts,
                backoff_ms: b,
                max_backoff_ms: mb.max(b),
                first_byte_ms: fb,
                deadline_ms: dl,
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_exchange_ends_as_the_rules_say(case in case()) {
        let (end, seen) = simulate(&case)?;
        let (want, want_seen) = reference(&case);
        prop_assert_eq!(&end, &want);
        prop_assert_eq!(&seen, &want_seen);
        // At most two engines ever die of one request.
        let died: Vec<_> = seen.iter().filter(|&&r| case.engines[r].0 == Engine::Dies).collect();
        prop_assert!(died.len() <= 2);
    }

    #[test]
    fn a_reachable_healthy_replica_serves_the_request(case in case()) {
        // The first healthy replica in routing order, reached when every replica before it
        // fails fast (refuses, 503, dies at most once) within the attempts and the deadline.
        let n = case.order.len();
        let first = (0..n).find(|&k| {
            matches!(case.engines[case.order[k]].0, Engine::Healthy | Engine::StalePooled)
        });
        if let Some(k) = first {
            let before = &case.order[..k];
            let fast = before.iter().all(|&r| case.engines[r].0 != Engine::Hangs);
            let deaths = before.iter().filter(|&&r| case.engines[r].0 == Engine::Dies).count();
            let mut t = 0;
            let in_time = (1..=k as u32).all(|a| {
                t += case.backoff(a);
                t < case.deadline_ms
            });
            if fast && deaths < 2 && in_time && (k as u32) < case.max_attempts {
                let (end, _) = simulate(&case)?;
                prop_assert_eq!(end, End::Relayed { replica: case.order[k], status: 200 });
            }
        }
    }
}
