//! The exchange's state machine: its states, and the transition each event makes.

use super::rules::{next_attempt_at, POISON_STRIKES};
use super::{Action, Event, Limits, Timer};
use crate::errors::{Failure, NoCandidate};
use crate::metrics::Outcome;
use std::collections::VecDeque;
use std::time::Instant;

/// Where the request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the driver's routing answer.
    Routing,
    /// Waiting for a slot on a full fleet.
    WaitingForSlot,
    /// Connecting, since `since`.
    Connecting { since: Instant },
    /// Writing the request.
    Sending,
    /// Waiting for the response head.
    AwaitingHead,
    /// Between attempts, until `until`.
    BackingOff { until: Instant },
    /// Committed: relaying a `status` response; it last moved at `last`; `writing` while bytes
    /// are on their way to the client (a stall then is the client's).
    Relaying {
        status: u16,
        last: Instant,
        writing: bool,
    },
    /// Over: every action was issued.
    Done,
}

/// The attempt in progress.
#[derive(Debug)]
struct Attempt<T> {
    replica: usize,
    ticket: Option<T>,
    /// When the attempt started (its first-byte timer runs from here).
    started: Instant,
    /// The current connection came from the idle pool.
    reused: bool,
    /// The attempt already used its fresh retry after a stale pooled connection.
    fresh_retry: bool,
}

/// One request's exchange with the engines. `T` is the index record ticket an attempt carries
/// (taken back, by move, at most once).
#[derive(Debug)]
pub struct Exchange<T> {
    limits: Limits,
    state: State,
    attempt: Option<Attempt<T>>,
    /// Counted attempts started.
    attempts: u32,
    /// Replicas tried, in order (repeats when every replica was tried).
    tried: Vec<usize>,
    /// Closes after the whole request was written.
    strikes: u32,
    /// The latest failed attempt's failure and replica (already counted), answered when no
    /// further attempt can be made.
    last_failure: Option<(Failure, usize)>,
    actions: VecDeque<Action<T>>,
}

/// The two buffers an exchange fills (its action queue and the replicas it tried), handed from
/// a finished exchange to the next one on the same connection.
#[derive(Debug)]
pub struct ExchangeBufs<T> {
    actions: VecDeque<Action<T>>,
    tried: Vec<usize>,
}

impl<T> Default for ExchangeBufs<T> {
    fn default() -> Self {
        ExchangeBufs {
            actions: VecDeque::new(),
            tried: Vec::new(),
        }
    }
}

impl<T> Exchange<T> {
    /// A request starting under `limits`: its first action is [`Action::Route`] for attempt 1.
    pub fn new(limits: Limits) -> Exchange<T> {
        Exchange::with_bufs(limits, ExchangeBufs::default())
    }

    /// [`Exchange::new`] in the buffers a finished exchange gave back ([`Exchange::into_bufs`]),
    /// so a connection's next request allocates neither.
    pub fn with_bufs(limits: Limits, bufs: ExchangeBufs<T>) -> Exchange<T> {
        let ExchangeBufs {
            mut actions,
            mut tried,
        } = bufs;
        actions.clear();
        tried.clear();
        actions.reserve(8);
        tried.reserve(limits.max_attempts.min(8) as usize);
        actions.push_back(Action::Route { attempt: 1 });
        Exchange {
            limits: Limits {
                max_attempts: limits.max_attempts.max(1),
                ..limits
            },
            state: State::Routing,
            attempt: None,
            attempts: 0,
            tried,
            strikes: 0,
            last_failure: None,
            actions,
        }
    }

    /// The exchange's buffers, emptied, for the next exchange ([`Exchange::with_bufs`]).
    pub fn into_bufs(self) -> ExchangeBufs<T> {
        let Exchange {
            mut actions,
            mut tried,
            ..
        } = self;
        actions.clear();
        tried.clear();
        ExchangeBufs { actions, tried }
    }

    /// The next action to perform, in order; `None` until an event makes more.
    pub fn poll_action(&mut self) -> Option<Action<T>> {
        self.actions.pop_front()
    }

    /// The next timer to sleep until, if any (none once the request is over). When several are
    /// due at the same instant the deadline comes first.
    pub fn timer(&self) -> Option<(Timer, Instant)> {
        let deadline = (Timer::Deadline, self.limits.deadline);
        let first_byte = self
            .attempt
            .as_ref()
            .map(|a| (Timer::FirstByte, a.started + self.limits.first_byte_timeout));
        let other = match self.state {
            State::Done => return None,
            State::Routing | State::WaitingForSlot => None,
            State::Connecting { since } => {
                let connect = (Timer::Connect, since + self.limits.connect_timeout);
                earliest(Some(connect), first_byte)
            }
            State::Sending | State::AwaitingHead => first_byte,
            State::BackingOff { until } => Some((Timer::Backoff, until)),
            State::Relaying { last, .. } => {
                Some((Timer::Stall, last + self.limits.stream_idle_timeout))
            }
        };
        earliest(Some(deadline), other)
    }

    /// Replicas tried so far, in order.
    pub fn tried(&self) -> &[usize] {
        &self.tried
    }

    /// Counted attempts started so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The response was committed and is being relayed.
    pub fn relaying(&self) -> bool {
        matches!(self.state, State::Relaying { .. })
    }

    /// The request is over (its last action, [`Action::Finish`], was issued).
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Feeds one event that happened at `now`.
    pub fn handle(&mut self, event: Event<T>, now: Instant) {
        match (self.state, event) {
            (State::Done, _) => {}
            (_, Event::ClientLeft) => self.client_left(),
            (_, Event::TimerFired(timer)) if self.timer_due(timer, now) => self.fire(timer, now),
            (State::Routing, Event::Routed { replica, ticket }) => {
                self.attempts += 1;
                self.tried.push(replica);
                self.attempt = Some(Attempt {
                    replica,
                    ticket,
                    started: now,
                    reused: false,
                    fresh_retry: false,
                });
                self.connect(replica, true, now);
            }
            (State::Routing, Event::NoCandidate { why, can_wait }) => {
                self.no_candidate(why, can_wait)
            }
            (State::WaitingForSlot, Event::SlotFreed) => self.route(),
            (State::Connecting { .. }, Event::Connected { reused }) => {
                if let Some(a) = &mut self.attempt {
                    // A fresh retry asked for a new connection, whatever the driver says.
                    a.reused = reused && !a.fresh_retry;
                }
                self.state = State::Sending;
                self.actions.push_back(Action::Send);
            }
            (State::Connecting { .. }, Event::ConnectFailed(e)) => {
                self.attempt_failed(Failure::Connect(e), now)
            }
            (State::Sending, Event::RequestWritten) => {
                self.state = State::AwaitingHead;
                self.actions.push_back(Action::ReadHead);
            }
            (State::Sending | State::AwaitingHead, Event::EngineClosed { received_any }) => {
                let failure = Failure::EngineClosed {
                    reused: self.attempt.as_ref().is_some_and(|a| a.reused),
                    request_written: self.state == State::AwaitingHead,
                    received_any,
                };
                self.attempt_failed(failure, now)
            }
            (State::Sending | State::AwaitingHead, Event::Protocol(what)) => {
                self.attempt_failed(Failure::Protocol(what), now)
            }
            (
                State::Connecting { .. } | State::Sending | State::AwaitingHead,
                Event::LeftRotation,
            ) => self.attempt_failed(Failure::LeftRotation, now),
            (State::AwaitingHead, Event::Head { status }) => {
                let retry_status = matches!(status, 502..=504)
                    && next_attempt_at(&self.limits, self.attempts, now).is_some();
                if retry_status {
                    self.attempt_failed(Failure::Unavailable(status), now)
                } else {
                    self.commit(status, now)
                }
            }
            (State::Relaying { status, .. }, Event::Received) => {
                self.state = State::Relaying {
                    status,
                    last: now,
                    writing: true,
                }
            }
            (State::Relaying { status, .. }, Event::Delivered) => {
                self.state = State::Relaying {
                    status,
                    last: now,
                    writing: false,
                }
            }
            (State::Relaying { .. }, Event::StreamEnded) => self.end_relay(None),
            (State::Relaying { .. }, Event::EngineClosed { .. }) => {
                let reused = self.attempt.as_ref().is_some_and(|a| a.reused);
                self.end_relay(Some(Failure::EngineClosed {
                    reused,
                    request_written: true,
                    received_any: true,
                }))
            }
            (State::Relaying { .. }, Event::Protocol(what)) => {
                self.end_relay(Some(Failure::Protocol(what)))
            }
            _ => {}
        }
    }

    fn timer_due(&self, timer: Timer, now: Instant) -> bool {
        let armed = |t: Timer| match (t, self.state) {
            (_, State::Done) => None,
            (Timer::Deadline, _) => Some(self.limits.deadline),
            (Timer::Connect, State::Connecting { since }) => {
                Some(since + self.limits.connect_timeout)
            }
            (Timer::FirstByte, State::Connecting { .. } | State::Sending | State::AwaitingHead) => {
                self.attempt
                    .as_ref()
                    .map(|a| a.started + self.limits.first_byte_timeout)
            }
            (Timer::Backoff, State::BackingOff { until }) => Some(until),
            (Timer::Stall, State::Relaying { last, .. }) => {
                Some(last + self.limits.stream_idle_timeout)
            }
            _ => None,
        };
        armed(timer).is_some_and(|at| at <= now)
    }

    fn fire(&mut self, timer: Timer, now: Instant) {
        match (timer, self.state) {
            (Timer::Deadline, State::Routing | State::WaitingForSlot) => {
                self.refuse(Failure::WaitedForSlot)
            }
            (Timer::Deadline, State::BackingOff { .. }) => self.give_up(),
            // The request ran out of time, whichever side was slow: nobody's failure to report.
            (Timer::Deadline, State::Relaying { .. }) => self.end_relay(Some(Failure::Deadline)),
            (Timer::Deadline, _) => self.attempt_failed(Failure::Deadline, now),
            (Timer::Connect, _) => self.attempt_failed(Failure::ConnectTimeout, now),
            (Timer::FirstByte, _) => self.attempt_failed(Failure::FirstByteTimeout, now),
            (Timer::Backoff, _) => self.route(),
            (Timer::Stall, State::Relaying { writing, .. }) => self.end_relay(Some(if writing {
                Failure::ClientGone
            } else {
                Failure::Stalled
            })),
            (Timer::Stall, _) => {}
        }
    }

    fn route(&mut self) {
        self.state = State::Routing;
        self.actions.push_back(Action::Route {
            attempt: self.attempts + 1,
        });
    }

    fn connect(&mut self, replica: usize, pooled: bool, now: Instant) {
        self.state = State::Connecting { since: now };
        self.actions.push_back(Action::Connect { replica, pooled });
    }

    fn no_candidate(&mut self, why: NoCandidate, can_wait: bool) {
        if self.last_failure.is_some() {
            // A retry found nowhere to go: the client hears what went wrong last.
            return self.give_up();
        }
        if can_wait && matches!(why, NoCandidate::AtCapacity | NoCandidate::QueueFull) {
            self.state = State::WaitingForSlot;
            self.actions.push_back(Action::WaitForSlot {
                until: self.limits.deadline,
            });
            return;
        }
        self.refuse(Failure::NoCandidate(why))
    }

    /// Ends the current attempt on `failure` and decides what comes next.
    fn attempt_failed(&mut self, failure: Failure, now: Instant) {
        let Some(mut attempt) = self.attempt.take() else {
            return;
        };
        let replica = attempt.replica;
        if failure.stale_reuse() && !attempt.fresh_retry {
            attempt.fresh_retry = true;
            attempt.reused = false;
            self.attempt = Some(attempt);
            return self.connect(replica, false, now);
        }
        self.actions.push_back(Action::Failed {
            replica: Some(replica),
            failure: failure.clone(),
        });
        if failure.counts_against_replica() {
            self.actions
                .push_back(Action::Report { replica, ok: false });
        }
        if let Some(ticket) = attempt.ticket.take() {
            self.actions.push_back(Action::TakeBack(ticket));
        }
        self.actions.push_back(Action::Release);
        // A stale-looking close whose fresh retry cannot even connect was the engine dying.
        let died_behind_the_pool =
            attempt.fresh_retry && matches!(failure, Failure::Connect(_) | Failure::ConnectTimeout);
        if failure.died_on_request() || died_behind_the_pool {
            self.strikes += 1;
            if self.strikes >= POISON_STRIKES {
                self.last_failure = Some((Failure::Poison, replica));
                self.actions.push_back(Action::Failed {
                    replica: None,
                    failure: Failure::Poison,
                });
                return self.give_up();
            }
        }
        self.last_failure = Some((failure.clone(), replica));
        let next = if failure.retryable() {
            next_attempt_at(&self.limits, self.attempts, now)
        } else {
            None
        };
        match next {
            Some(until) if until > now => {
                self.state = State::BackingOff { until };
                self.actions.push_back(Action::BackOff { until });
            }
            Some(_) => self.route(),
            None => self.give_up(),
        }
    }

    /// Answers the client with the last failure (already counted) and ends the request.
    fn give_up(&mut self) {
        let Some((failure, replica)) = self.last_failure.take() else {
            return self.refuse(Failure::NoCandidate(NoCandidate::NoReplicas));
        };
        self.actions.push_back(Action::Answer {
            failure,
            replica: Some(replica),
        });
        self.finish(Outcome::Failed, Some(replica));
    }

    /// Refuses the request without an attempt to blame: counts and answers `failure`.
    fn refuse(&mut self, failure: Failure) {
        self.actions.push_back(Action::Failed {
            replica: None,
            failure: failure.clone(),
        });
        self.actions.push_back(Action::Answer {
            failure,
            replica: None,
        });
        self.finish(Outcome::Rejected, None);
    }

    fn client_left(&mut self) {
        let replica = self.attempt.as_ref().map(|a| a.replica);
        if self.relaying() {
            return self.end_relay(Some(Failure::ClientGone));
        }
        self.actions.push_back(Action::Failed {
            replica,
            failure: Failure::ClientGone,
        });
        if self.attempt.take().is_some() {
            // The engine got the request: its index record stays.
            self.actions.push_back(Action::Release);
        }
        self.finish(Outcome::ClientClosed, replica);
    }

    fn commit(&mut self, status: u16, now: Instant) {
        if status >= 400 {
            if let Some(ticket) = self.attempt.as_mut().and_then(|a| a.ticket.take()) {
                self.actions.push_back(Action::TakeBack(ticket));
            }
        }
        self.state = State::Relaying {
            status,
            last: now,
            writing: true,
        };
        self.actions.push_back(Action::Relay { status });
    }

    /// Ends a committed response: complete (`cut` is `None`) or cut by `cut`.
    fn end_relay(&mut self, cut: Option<Failure>) {
        let State::Relaying { status, .. } = self.state else {
            return;
        };
        let Some(attempt) = self.attempt.take() else {
            return;
        };
        let replica = attempt.replica;
        let served = !matches!(status, 502..=504);
        let outcome = match cut {
            None => Outcome::for_status(status),
            Some(Failure::ClientGone) => Outcome::ClientClosed,
            Some(_) => Outcome::Failed,
        };
        if let Some(failure) = cut {
            // Mid-response only a silent, closing or garbled engine is the engine's failure.
            let engine_failed = matches!(
                failure,
                Failure::Stalled | Failure::EngineClosed { .. } | Failure::Protocol(_)
            );
            let ok = served && !engine_failed;
            self.actions.push_back(Action::Failed {
                replica: Some(replica),
                failure,
            });
            self.actions.push_back(Action::Report { replica, ok });
        } else {
            self.actions.push_back(Action::Report {
                replica,
                ok: served,
            });
        }
        self.finish(outcome, Some(replica));
    }

    fn finish(&mut self, outcome: Outcome, replica: Option<usize>) {
        self.state = State::Done;
        self.attempt = None;
        self.actions.push_back(Action::Finish { outcome, replica });
    }
}

/// The earlier of two timers; the first wins a tie.
fn earliest(a: Option<(Timer, Instant)>, b: Option<(Timer, Instant)>) -> Option<(Timer, Instant)> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.1 < x.1 { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}
