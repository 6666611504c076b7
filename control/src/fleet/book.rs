//! The control thread's pure book of its replicas: health (the [`HealthBook`]) and the facts
//! gathered beside it (engine reports, scrape results, ejection timing, the KV capacity given to
//! the index), fed the events the control thread receives — probe and scrape results, the data
//! cores' request reports, ticks, membership — with their time, and answering what the I/O shell
//! ([`crate::controller::Controller`]) must do: publish a snapshot, log a line, tell the index.
//! No I/O, no clock reads, no threads: every rule here is a unit test.

use crate::fleet::engine_load::EngineLoad;
use crate::fleet::health::{HealthBook, HealthChange};
use crate::fleet::scrape::ScrapeOutcome;
use inferrail_dataplane::reports::ReplicaReport;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// An engine's own load, from its latest `/metrics` page, with when it arrived: what the admin
/// API and metrics show; routing reads its [`Effect::Reading`] part from the replica's shared
/// cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineReport {
    /// The page's figures.
    pub load: EngineLoad,
    /// When the page was received.
    pub received: Instant,
    /// The gateway's own requests in flight to the replica when the page was received (every
    /// core's, from its ledger): what of `running + waiting` is this gateway's.
    pub own_in_flight: u32,
}

/// How the last scrape of a replica went.
#[derive(Debug, Clone, PartialEq)]
pub enum ScrapeState {
    /// Not scraped yet.
    Never,
    /// A readable report.
    Ok,
    /// The page was missing a family or not 200.
    Unreadable(String),
    /// No page (timeout, refused, too large, garbage).
    Failed(String),
}

/// Per-replica facts the control thread keeps beside the health book.
#[derive(Debug, Clone)]
pub struct ReplicaFacts {
    /// Latest readable engine report.
    pub report: Option<EngineReport>,
    /// Last scrape.
    pub scrape: ScrapeState,
    /// Scrapes by result: ok, unreadable, failed.
    pub scrapes: [u64; 3],
    /// Times the replica was ejected.
    pub ejections: u64,
    /// When the current streak of failed requests began (a core's clock at the first failure).
    pub streak_started: Option<Instant>,
    /// The last ejection: time from the streak's first failure, and from the failure that
    /// tripped it, to the ejection on the control thread.
    pub last_ejection: Option<(Duration, Duration)>,
    /// The capacity in blocks last given to the index for this replica.
    pub index_capacity: Option<u64>,
}

impl Default for ReplicaFacts {
    fn default() -> Self {
        ReplicaFacts {
            report: None,
            scrape: ScrapeState::Never,
            scrapes: [0; 3],
            ejections: 0,
            streak_started: None,
            last_ejection: None,
            index_capacity: None,
        }
    }
}

/// What the shell must do after an event, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Log this line about replica `key` (the shell prefixes the replica's id).
    Log {
        /// The replica.
        key: u64,
        /// What happened to it.
        text: String,
    },
    /// The engine restarted with an empty cache: forget what the index predicted for it.
    IndexClear(u64),
    /// Size the index's shadow of the replica to this many usable blocks.
    IndexCapacity {
        /// The replica.
        key: u64,
        /// Usable blocks (vLLM's pool counts a null block that never holds a prompt).
        usable: u64,
    },
    /// A readable scrape: write the routing part of this report into the replica's shared
    /// reading, which every core reads at decision time (no snapshot is published for it).
    Reading {
        /// The replica.
        key: u64,
        /// The report.
        report: EngineReport,
    },
    /// Routing changed (health, membership): build and publish a snapshot.
    Publish,
}

/// Health and facts of every member, driven by events (see the module docs).
#[derive(Debug)]
pub struct ReplicaBook {
    /// Health of every member.
    pub health: HealthBook,
    facts: HashMap<u64, ReplicaFacts>,
    /// Ejections `max_ejection_percent` refused.
    pub ejections_refused: u64,
}

impl ReplicaBook {
    /// A book over `health`, with no facts yet.
    pub fn new(health: HealthBook) -> ReplicaBook {
        ReplicaBook {
            health,
            facts: HashMap::new(),
            ejections_refused: 0,
        }
    }

    /// Facts about a member.
    pub fn facts(&self, key: u64) -> Option<&ReplicaFacts> {
        self.facts.get(&key)
    }

    /// The members are now `members` (key, models): health follows, facts of departed members
    /// go, new members start with none.
    pub fn sync_members(&mut self, members: &[(u64, Vec<String>)]) {
        self.health.sync_members(members);
        self.facts
            .retain(|k, _| members.iter().any(|(key, _)| key == k));
        for (key, _) in members {
            self.facts.entry(*key).or_default();
        }
    }

    /// A probe result.
    pub fn on_probe(&mut self, key: u64, ok: bool, at: Instant) -> Vec<Effect> {
        let changes = self.health.probe_result(key, ok, at);
        let mut effects = self.note_changes(&changes);
        if !changes.is_empty() {
            effects.push(Effect::Publish);
        }
        effects
    }

    /// A scrape result received at `finished`; `configured_blocks` is the replica's
    /// `kv_capacity_blocks` from config, which wins over the engine's report; `own_in_flight` is
    /// the gateway's own requests in flight to it then (its ledger), kept with the report so a
    /// candidate's load counts only the engine's requests beyond them as others'. A readable
    /// report is published at once, so the age a decision sees is bounded by the scrape
    /// interval.
    pub fn on_scrape(
        &mut self,
        key: u64,
        outcome: ScrapeOutcome,
        finished: Instant,
        configured_blocks: Option<u64>,
        own_in_flight: u32,
    ) -> Vec<Effect> {
        let Some(facts) = self.facts.get_mut(&key) else {
            return Vec::new();
        };
        let mut effects = Vec::new();
        match outcome {
            ScrapeOutcome::Report(load) => {
                // Prefix cache counters going backwards: the engine restarted with an empty
                // cache, so what the index remembers for it is gone.
                let restarted = facts.report.is_some_and(|prev| {
                    load.prefix_cache_queries < prev.load.prefix_cache_queries
                        || load.prefix_cache_hits < prev.load.prefix_cache_hits
                });
                let capacity = load.kv_capacity_blocks;
                let report = EngineReport {
                    load,
                    received: finished,
                    own_in_flight,
                };
                facts.report = Some(report);
                facts.scrape = ScrapeState::Ok;
                facts.scrapes[0] += 1;
                if restarted {
                    effects.push(Effect::IndexClear(key));
                    effects.push(Effect::Log {
                        key,
                        text: "its prefix cache counters went back (engine restart); its index \
                               entries are cleared"
                            .to_string(),
                    });
                }
                if let (Some(blocks), None) = (capacity, configured_blocks) {
                    effects.extend(self.capacity(key, blocks));
                }
                effects.push(Effect::Reading { key, report });
            }
            ScrapeOutcome::Unreadable(why) => {
                facts.scrape = ScrapeState::Unreadable(why);
                facts.scrapes[1] += 1;
            }
            ScrapeOutcome::Failed(e) => {
                facts.scrape = ScrapeState::Failed(e.to_string());
                facts.scrapes[2] += 1;
            }
        }
        effects
    }

    /// The replica's KV capacity is `blocks` (from config, or from the engine's report when the
    /// config names none): the index hears of it once per change.
    pub fn capacity(&mut self, key: u64, blocks: u64) -> Vec<Effect> {
        match self.facts.get_mut(&key) {
            Some(f) if f.index_capacity != Some(blocks) => {
                f.index_capacity = Some(blocks);
                let usable = blocks.saturating_sub(1).max(1);
                vec![Effect::IndexCapacity { key, usable }]
            }
            _ => Vec::new(),
        }
    }

    /// Request results reported by the data cores, handled at `now`: streak timing, ejections,
    /// and a publish when health or an open failure streak changed.
    pub fn on_reports(&mut self, batch: &[ReplicaReport], now: Instant) -> Vec<Effect> {
        let mut effects = Vec::new();
        let mut changed = false;
        for r in batch {
            let before = self.health.failure_streak(r.key) > 0;
            if let Some(f) = self.facts.get_mut(&r.key) {
                match (r.ok, f.streak_started) {
                    (true, _) => f.streak_started = None,
                    (false, None) => f.streak_started = Some(r.at),
                    (false, Some(_)) => {}
                }
            }
            let changes = self.health.request_result(r.key, r.ok, r.at);
            for change in &changes {
                if let HealthChange::Ejected { key, .. } = change {
                    if let Some(f) = self.facts.get_mut(key) {
                        let first = f.streak_started.unwrap_or(r.at);
                        f.last_ejection = Some((
                            now.saturating_duration_since(first),
                            now.saturating_duration_since(r.at),
                        ));
                        f.streak_started = None;
                    }
                }
            }
            effects.extend(self.note_changes(&changes));
            changed |= !changes.is_empty();
            changed |= before != (self.health.failure_streak(r.key) > 0);
        }
        if changed {
            effects.push(Effect::Publish);
        }
        effects
    }

    /// Ejection expiry at `now`: the health changes' log lines (the caller publishes when any).
    pub fn tick(&mut self, now: Instant) -> Vec<Effect> {
        let changes = self.health.tick(now);
        self.note_changes(&changes)
    }

    /// The log lines of health changes, counting ejections and refused ones.
    fn note_changes(&mut self, changes: &[HealthChange]) -> Vec<Effect> {
        changes
            .iter()
            .map(|change| {
                let (key, text) = match change {
                    HealthChange::ProbeDown { key } => (
                        *key,
                        "failed its health checks: out of rotation".to_string(),
                    ),
                    HealthChange::ProbeUp { key } => (
                        *key,
                        "passes its health checks: back in rotation".to_string(),
                    ),
                    HealthChange::Ejected { key, backoff, .. } => {
                        let timing = self.facts.get_mut(key).and_then(|f| {
                            f.ejections += 1;
                            f.last_ejection
                        });
                        let timing = timing.map_or(String::new(), |(first, trip)| {
                            format!(
                                " ({first:?} after its first failed request, {trip:?} after the \
                                 one that tripped it)"
                            )
                        });
                        (
                            *key,
                            format!(
                                "ejected for {backoff:?} after consecutive failed requests{timing}"
                            ),
                        )
                    }
                    HealthChange::Readmitted { key } => {
                        (*key, "readmitted after its ejection".to_string())
                    }
                    HealthChange::EjectionRefused { key } => {
                        self.ejections_refused += 1;
                        (
                            *key,
                            "kept in rotation: max_ejection_percent reached".to_string(),
                        )
                    }
                };
                Effect::Log { key, text }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::engine_load::EngineKind;
    use crate::fleet::health::HealthSettings;

    fn book(members: &[u64]) -> ReplicaBook {
        let mut b = ReplicaBook::new(HealthBook::new(HealthSettings {
            unhealthy_threshold: 2,
            ejection_backoff: Duration::from_secs(5),
            max_ejection_backoff: Duration::from_secs(60),
            max_ejection_percent: 100,
        }));
        let m: Vec<(u64, Vec<String>)> = members.iter().map(|k| (*k, vec!["m".into()])).collect();
        b.sync_members(&m);
        b
    }

    fn page(queries: f64, hits: f64, blocks: Option<u64>) -> ScrapeOutcome {
        ScrapeOutcome::Report(EngineLoad {
            engine: EngineKind::Vllm,
            running: 1.0,
            waiting: 0.0,
            kv_cache_usage: 0.1,
            prefix_cache_queries: queries,
            prefix_cache_hits: hits,
            preemptions: 0.0,
            kv_capacity_blocks: blocks,
        })
    }

    fn logs(effects: &[Effect]) -> Vec<&str> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Log { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The effects without their reports, for comparison.
    fn kinds(effects: &[Effect]) -> Vec<String> {
        effects
            .iter()
            .map(|e| match e {
                Effect::Reading { key, .. } => format!("reading {key}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_readable_scrape_is_read_by_routing_and_its_capacity_sized_once() {
        let mut b = book(&[1]);
        let t = Instant::now();
        let e = b.on_scrape(1, page(10.0, 5.0, Some(101)), t, None, 0);
        assert_eq!(
            kinds(&e),
            ["IndexCapacity { key: 1, usable: 100 }", "reading 1"],
            "a scrape publishes no snapshot"
        );
        assert_eq!(b.facts(1).map(|f| f.scrapes), Some([1, 0, 0]));
        // The same capacity again: the index hears nothing new.
        let e = b.on_scrape(1, page(11.0, 6.0, Some(101)), t, None, 3);
        match e.as_slice() {
            [Effect::Reading { key: 1, report }] => {
                assert_eq!(
                    report.load.running,
                    b.facts(1).and_then(|f| f.report).unwrap().load.running
                );
                assert_eq!((report.received, report.own_in_flight), (t, 3));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_configured_capacity_wins_over_the_engines() {
        let mut b = book(&[1]);
        assert_eq!(
            b.capacity(1, 50),
            vec![Effect::IndexCapacity { key: 1, usable: 49 }]
        );
        let e = b.on_scrape(1, page(1.0, 0.0, Some(900)), Instant::now(), Some(50), 0);
        assert_eq!(
            kinds(&e),
            ["reading 1"],
            "the engine's 900 blocks are ignored"
        );
        assert_eq!(b.facts(1).and_then(|f| f.index_capacity), Some(50));
    }

    #[test]
    fn a_report_keeps_the_gateways_own_in_flight_at_its_arrival() {
        let mut b = book(&[1]);
        let t = Instant::now();
        b.on_scrape(1, page(100.0, 40.0, None), t, None, 7);
        let report = b.facts(1).and_then(|f| f.report);
        assert_eq!(report.map(|r| (r.own_in_flight, r.received)), Some((7, t)));
    }

    #[test]
    fn prefix_counters_going_back_clear_the_index() {
        let mut b = book(&[1]);
        let t = Instant::now();
        b.on_scrape(1, page(100.0, 40.0, None), t, None, 0);
        let e = b.on_scrape(1, page(3.0, 1.0, None), t, None, 0);
        assert_eq!(e[0], Effect::IndexClear(1));
        assert!(logs(&e)[0].contains("engine restart"), "{e:?}");
        assert!(
            matches!(e.last(), Some(Effect::Reading { key: 1, .. })),
            "{e:?}"
        );
    }

    #[test]
    fn failed_and_unreadable_scrapes_are_counted_and_leave_routing_alone() {
        let mut b = book(&[1]);
        let t = Instant::now();
        b.on_scrape(1, page(1.0, 1.0, None), t, None, 0);
        let e = b.on_scrape(
            1,
            ScrapeOutcome::Unreadable("no families".into()),
            t,
            None,
            0,
        );
        // The last readable report stays where routing reads it, and ages out there.
        assert!(e.is_empty(), "{e:?}");
        assert!(b.facts(1).and_then(|f| f.report).is_some());
        assert_eq!(
            b.facts(1).map(|f| f.scrape.clone()),
            Some(ScrapeState::Unreadable("no families".into()))
        );
        assert_eq!(b.facts(1).map(|f| f.scrapes), Some([1, 1, 0]));
        // A scrape of a member the book does not know changes nothing.
        assert!(b.on_scrape(9, page(1.0, 1.0, None), t, None, 0).is_empty());
    }

    #[test]
    fn failed_requests_eject_with_their_timing_and_publish() {
        let mut b = book(&[1, 2]);
        let t0 = Instant::now();
        let fail = |at| ReplicaReport {
            key: 1,
            ok: false,
            at,
        };
        // The first failure opens a streak (cores report successes until it closes): publish.
        let e = b.on_reports(&[fail(t0)], t0);
        assert_eq!(e, vec![Effect::Publish]);
        let t1 = t0 + Duration::from_millis(30);
        let e = b.on_reports(&[fail(t1)], t1 + Duration::from_millis(5));
        let lines = logs(&e);
        assert_eq!(lines.len(), 1, "{e:?}");
        assert!(lines[0].starts_with("ejected for 5s"), "{lines:?}");
        assert!(
            lines[0].contains("35ms after its first failed request"),
            "{lines:?}"
        );
        assert_eq!(e.last(), Some(&Effect::Publish));
        assert_eq!(b.facts(1).map(|f| f.ejections), Some(1));
        assert!(!b.health.routable(1, t1));
        // The ejection expires: readmitted on a tick.
        let later = t1 + Duration::from_secs(6);
        let lines: Vec<String> = logs(&b.tick(later)).iter().map(|s| s.to_string()).collect();
        assert_eq!(lines, ["readmitted after its ejection"]);
        // A success in a quiet book changes nothing: no publish.
        let ok = ReplicaReport {
            key: 2,
            ok: true,
            at: later,
        };
        assert!(b.on_reports(&[ok], later).is_empty());
    }

    #[test]
    fn probes_take_a_replica_out_and_back() {
        let mut b = book(&[1]);
        let t = Instant::now();
        assert!(
            b.on_probe(1, false, t).is_empty(),
            "one failure is below the threshold"
        );
        let e = b.on_probe(1, false, t);
        assert_eq!(logs(&e), ["failed its health checks: out of rotation"]);
        assert_eq!(e.last(), Some(&Effect::Publish));
        let e = b.on_probe(1, true, t);
        assert_eq!(logs(&e), ["passes its health checks: back in rotation"]);
    }

    #[test]
    fn departed_members_lose_their_facts() {
        let mut b = book(&[1, 2]);
        b.on_scrape(2, page(1.0, 1.0, None), Instant::now(), None, 0);
        b.sync_members(&[(1, vec!["m".into()])]);
        assert!(b.facts(2).is_none());
        assert!(b.facts(1).is_some());
    }
}
