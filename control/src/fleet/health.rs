//! The health of every replica: active probes, passive ejection and its percent cap.
//!
//! [`HealthBook`] is a pure state machine. It does no I/O and never reads the clock: every event
//! carries the `now` it happened at, and the caller (the control thread) turns the returned
//! [`HealthChange`]s into a new snapshot. Tests drive it with virtual time.
//!
//! - Active: `unhealthy_threshold` consecutive failed probes take a replica out of rotation; one
//!   passing probe brings it back. Probe state is never capped: a replica failing probes is down.
//! - Passive: `unhealthy_threshold` consecutive failed requests eject a replica for a backoff that
//!   doubles with each ejection in a row, up to `max_ejection_backoff`.
//! - Cap: no model ever has more than `max_ejection_percent` of its probe-healthy replicas
//!   ejected. When probes or membership shrink a model's healthy set, the ejections closest to
//!   their end are lifted early until the cap holds again.

use inferrail_config::Health;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Identifies one replica for its whole lifetime in the registry; never reused for another.
pub type ReplicaKey = u64;

/// The health settings the book applies (the `health` config section minus probe timing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthSettings {
    /// Consecutive failures (probes or requests) that take a replica out. Values below 1 act as 1.
    pub unhealthy_threshold: u32,
    /// Length of the first ejection in a row; each further one doubles it.
    pub ejection_backoff: Duration,
    /// Longest ejection; no ejection ever lasts longer.
    pub max_ejection_backoff: Duration,
    /// Most replicas of a model ejected at once, in percent of its probe-healthy replicas.
    pub max_ejection_percent: u32,
}

impl HealthSettings {
    /// The settings of a validated `health` config section.
    pub fn from_config(h: &Health) -> Self {
        HealthSettings {
            unhealthy_threshold: h.unhealthy_threshold,
            ejection_backoff: h.ejection_backoff,
            max_ejection_backoff: h.max_ejection_backoff,
            max_ejection_percent: h.max_ejection_percent,
        }
    }

    fn threshold(&self) -> u32 {
        self.unhealthy_threshold.max(1)
    }

    /// The length of the `n`-th ejection in a row (`n >= 1`): `ejection_backoff * 2^(n-1)`,
    /// never more than `max_ejection_backoff`.
    pub fn backoff(&self, n: u32) -> Duration {
        let factor = 2u32.saturating_pow(n.saturating_sub(1));
        self.ejection_backoff
            .saturating_mul(factor)
            .min(self.max_ejection_backoff)
    }

    /// How long a readmitted replica must stay clear of ejection for its next ejection to count
    /// as the first in a row again: `min(max_ejection_backoff, 10 * ejection_backoff)`.
    pub fn streak_reset_after(&self) -> Duration {
        self.max_ejection_backoff
            .min(self.ejection_backoff.saturating_mul(10))
    }
}

/// A replica's health as the book sees it at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaHealth {
    /// False after `unhealthy_threshold` consecutive failed probes, until one passes.
    pub probe_healthy: bool,
    /// Failed probes since the last passing one.
    pub consecutive_probe_failures: u32,
    /// Failed requests since the last success, readmission or ejection.
    pub consecutive_request_failures: u32,
    /// When the current ejection ends; `None` when not ejected.
    pub ejected_until: Option<Instant>,
    /// Ejections in a row (the current one included); 0 once the replica stayed clear for
    /// [`HealthSettings::streak_reset_after`] after its last readmission.
    pub ejections: u32,
}

/// Something that changed a replica's place in rotation; the caller republishes on any change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthChange {
    /// Failed probes took the replica out of rotation.
    ProbeDown {
        /// The replica.
        key: ReplicaKey,
    },
    /// A passing probe brought the replica back.
    ProbeUp {
        /// The replica.
        key: ReplicaKey,
    },
    /// Failed requests ejected the replica until `until` (`until - backoff` is when it started).
    Ejected {
        /// The replica.
        key: ReplicaKey,
        /// When the ejection ends.
        until: Instant,
        /// How long it lasts.
        backoff: Duration,
    },
    /// The ejection ended (expired, or lifted early to restore the percent cap); failure streak
    /// is clean.
    Readmitted {
        /// The replica.
        key: ReplicaKey,
    },
    /// The replica crossed the failure threshold but the percent cap kept it in rotation.
    /// Emitted once per streak; later failures of the same streak retry the ejection silently.
    EjectionRefused {
        /// The replica.
        key: ReplicaKey,
    },
}

/// An ejection in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ejection {
    since: Instant,
    until: Instant,
}

/// One replica's state.
#[derive(Clone, Debug)]
struct Member {
    /// Canonical names of the models it serves, sorted and deduplicated.
    models: Vec<String>,
    probe_healthy: bool,
    probe_failures: u32,
    request_failures: u32,
    /// `EjectionRefused` was already emitted for the open failure streak.
    refused: bool,
    ejection: Option<Ejection>,
    /// Ejections in a row, as of the last ejection.
    ejections: u32,
    /// When the last ejection ended.
    readmitted_at: Option<Instant>,
}

impl Member {
    fn new(models: Vec<String>) -> Member {
        Member {
            models,
            probe_healthy: true,
            probe_failures: 0,
            request_failures: 0,
            refused: false,
            ejection: None,
            ejections: 0,
            readmitted_at: None,
        }
    }

    /// Ejections in a row at `now`, after the reset window is applied.
    fn ejections_at(&self, now: Instant, settings: &HealthSettings) -> u32 {
        let cleared = self.ejection.is_none()
            && self
                .readmitted_at
                .is_some_and(|t| now.saturating_duration_since(t) >= settings.streak_reset_after());
        if cleared {
            0
        } else {
            self.ejections
        }
    }

    fn readmit(&mut self, at: Instant) {
        self.ejection = None;
        self.readmitted_at = Some(at);
        self.request_failures = 0;
        self.refused = false;
    }
}

/// `now + d`, shortened to the latest instant that can be represented.
fn later(now: Instant, mut d: Duration) -> Instant {
    loop {
        if let Some(t) = now.checked_add(d) {
            return t;
        }
        d /= 2;
    }
}

/// Per model: (ejected replicas, probe-healthy replicas).
type ModelCounts<'a> = BTreeMap<&'a str, (u64, u64)>;

/// Whether `ejected` ejections of a model with `healthy` probe-healthy replicas respect `percent`.
fn within_cap(ejected: u64, healthy: u64, percent: u32) -> bool {
    ejected.saturating_mul(100) <= u64::from(percent).saturating_mul(healthy)
}

/// Every replica's health, driven by probe results, request results and time.
#[derive(Clone, Debug)]
pub struct HealthBook {
    settings: HealthSettings,
    members: BTreeMap<ReplicaKey, Member>,
}

impl HealthBook {
    /// An empty book applying `settings`.
    pub fn new(settings: HealthSettings) -> Self {
        HealthBook {
            settings,
            members: BTreeMap::new(),
        }
    }

    /// The settings in effect.
    pub fn settings(&self) -> &HealthSettings {
        &self.settings
    }

    /// Applies new settings (live reload), keeping every replica's state. Ejections in progress
    /// are shortened to end at most the new `max_ejection_backoff` after they started; a lower
    /// threshold or percent takes effect at the next event or [`tick`](Self::tick).
    pub fn set_settings(&mut self, s: HealthSettings) {
        for m in self.members.values_mut() {
            if let Some(e) = m.ejection.as_mut() {
                e.until = e.until.min(later(e.since, s.max_ejection_backoff));
            }
        }
        self.settings = s;
    }

    /// Replaces the member set: new keys start healthy (in rotation), keys not listed are
    /// dropped, keys that stay keep all their state (their model list is updated). `models` are
    /// the canonical model names the replica serves; a key listed twice takes its last entry.
    /// If the change leaves a model over the percent cap, the next event or
    /// [`tick`](Self::tick) lifts ejections until it holds again.
    pub fn sync_members(&mut self, members: &[(ReplicaKey, Vec<String>)]) {
        let mut next = BTreeMap::new();
        for (key, models) in members {
            let models: Vec<String> = models
                .iter()
                .cloned()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let member = match self.members.remove(key).or_else(|| next.remove(key)) {
                Some(mut old) => {
                    old.models = models;
                    old
                }
                None => Member::new(models),
            };
            next.insert(*key, member);
        }
        self.members = next;
    }

    /// Records a probe of `key` at `now`. Unknown keys are ignored (expiries still happen).
    pub fn probe_result(&mut self, key: ReplicaKey, ok: bool, now: Instant) -> Vec<HealthChange> {
        let mut changes = self.expire(now);
        let threshold = self.settings.threshold();
        if let Some(m) = self.members.get_mut(&key) {
            if ok {
                m.probe_failures = 0;
                if !m.probe_healthy {
                    m.probe_healthy = true;
                    changes.push(HealthChange::ProbeUp { key });
                }
            } else {
                m.probe_failures = m.probe_failures.saturating_add(1);
                if m.probe_healthy && m.probe_failures >= threshold {
                    m.probe_healthy = false;
                    changes.push(HealthChange::ProbeDown { key });
                }
            }
        }
        self.enforce_cap(now, &mut changes);
        changes
    }

    /// Records the outcome of a request proxied to `key` at `now`. A success resets the failure
    /// streak; reaching the threshold ejects the replica if the percent cap allows. Results
    /// reported while the replica is ejected, or for unknown keys, are ignored.
    pub fn request_result(&mut self, key: ReplicaKey, ok: bool, now: Instant) -> Vec<HealthChange> {
        let mut changes = self.expire(now);
        let threshold = self.settings.threshold();
        let crossed = match self.members.get_mut(&key) {
            Some(m) if m.ejection.is_none() => {
                if ok {
                    m.request_failures = 0;
                    m.refused = false;
                    false
                } else {
                    m.request_failures = m.request_failures.saturating_add(1);
                    m.request_failures >= threshold
                }
            }
            _ => false,
        };
        if crossed {
            if self.may_eject(key) {
                self.eject(key, now, &mut changes);
            } else if let Some(m) = self.members.get_mut(&key) {
                if !m.refused {
                    m.refused = true;
                    changes.push(HealthChange::EjectionRefused { key });
                }
            }
        }
        self.enforce_cap(now, &mut changes);
        changes
    }

    /// Ends every ejection due at `now` and lifts any that the percent cap no longer allows.
    pub fn tick(&mut self, now: Instant) -> Vec<HealthChange> {
        let mut changes = self.expire(now);
        self.enforce_cap(now, &mut changes);
        changes
    }

    /// The earliest instant an ejection ends, when one is in progress: call
    /// [`tick`](Self::tick) then.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.members
            .values()
            .filter_map(|m| m.ejection.map(|e| e.until))
            .min()
    }

    /// Whether `key` may receive requests at `now`: known, probe-healthy and not ejected.
    pub fn routable(&self, key: ReplicaKey, now: Instant) -> bool {
        self.members
            .get(&key)
            .is_some_and(|m| m.probe_healthy && m.ejection.is_none_or(|e| e.until <= now))
    }

    /// The health of `key` at `now`; `None` for unknown keys.
    pub fn status(&self, key: ReplicaKey, now: Instant) -> Option<ReplicaHealth> {
        self.members.get(&key).map(|m| ReplicaHealth {
            probe_healthy: m.probe_healthy,
            consecutive_probe_failures: m.probe_failures,
            consecutive_request_failures: m.request_failures,
            ejected_until: m.ejection.map(|e| e.until).filter(|u| *u > now),
            ejections: m.ejections_at(now, &self.settings),
        })
    }

    /// Consecutive request failures currently counted (> 0 means a streak is open); 0 for
    /// unknown keys and while ejected.
    pub fn failure_streak(&self, key: ReplicaKey) -> u32 {
        self.members.get(&key).map_or(0, |m| m.request_failures)
    }

    /// Ends ejections due at `now`, in key order.
    fn expire(&mut self, now: Instant) -> Vec<HealthChange> {
        let mut changes = Vec::new();
        for (key, m) in &mut self.members {
            if let Some(e) = m.ejection {
                if e.until <= now {
                    m.readmit(e.until);
                    changes.push(HealthChange::Readmitted { key: *key });
                }
            }
        }
        changes
    }

    fn model_counts(&self) -> ModelCounts<'_> {
        let mut counts = ModelCounts::new();
        for m in self.members.values() {
            for model in &m.models {
                let c = counts.entry(model.as_str()).or_default();
                c.0 += u64::from(m.ejection.is_some());
                c.1 += u64::from(m.probe_healthy);
            }
        }
        counts
    }

    /// Whether ejecting `key` keeps every model it serves within the percent cap.
    fn may_eject(&self, key: ReplicaKey) -> bool {
        let Some(member) = self.members.get(&key) else {
            return false;
        };
        let counts = self.model_counts();
        let percent = self.settings.max_ejection_percent;
        member.models.iter().all(|model| {
            let (ejected, healthy) = counts.get(model.as_str()).copied().unwrap_or((0, 0));
            within_cap(ejected + 1, healthy, percent)
        })
    }

    fn eject(&mut self, key: ReplicaKey, now: Instant, changes: &mut Vec<HealthChange>) {
        let settings = &self.settings;
        if let Some(m) = self.members.get_mut(&key) {
            let n = m.ejections_at(now, settings).saturating_add(1);
            let backoff = settings.backoff(n);
            let until = later(now, backoff);
            m.ejection = Some(Ejection { since: now, until });
            m.ejections = n;
            m.request_failures = 0;
            m.refused = false;
            changes.push(HealthChange::Ejected {
                key,
                until,
                backoff: until.saturating_duration_since(now),
            });
        }
    }

    /// Lifts ejections, soonest-ending first, while some model is over the percent cap.
    fn enforce_cap(&mut self, now: Instant, changes: &mut Vec<HealthChange>) {
        loop {
            let percent = self.settings.max_ejection_percent;
            let over: Option<String> = self
                .model_counts()
                .into_iter()
                .find(|(_, (ejected, healthy))| !within_cap(*ejected, *healthy, percent))
                .map(|(model, _)| model.to_owned());
            let Some(model) = over else {
                return;
            };
            let lift = self
                .members
                .iter()
                .filter(|(_, m)| m.models.contains(&model))
                .filter_map(|(key, m)| m.ejection.map(|e| (e.until, *key)))
                .min();
            let Some((_, key)) = lift else {
                return;
            };
            if let Some(m) = self.members.get_mut(&key) {
                m.readmit(now);
                changes.push(HealthChange::Readmitted { key });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn settings(threshold: u32, percent: u32) -> HealthSettings {
        HealthSettings {
            unhealthy_threshold: threshold,
            ejection_backoff: secs(5),
            max_ejection_backoff: secs(30),
            max_ejection_percent: percent,
        }
    }

    /// A book with replicas `0..n` all serving model "m".
    fn book(n: u64, threshold: u32, percent: u32) -> HealthBook {
        let mut b = HealthBook::new(settings(threshold, percent));
        let members: Vec<_> = (0..n).map(|k| (k, vec!["m".to_string()])).collect();
        b.sync_members(&members);
        b
    }

    /// Fails `n` requests to `key` at `now`, returning every change.
    fn fail(b: &mut HealthBook, key: ReplicaKey, n: u32, now: Instant) -> Vec<HealthChange> {
        (0..n)
            .flat_map(|_| b.request_result(key, false, now))
            .collect()
    }

    fn ejected(changes: &[HealthChange]) -> Vec<ReplicaKey> {
        changes
            .iter()
            .filter_map(|c| match c {
                HealthChange::Ejected { key, .. } => Some(*key),
                _ => None,
            })
            .collect()
    }

    fn refused(changes: &[HealthChange]) -> Vec<ReplicaKey> {
        changes
            .iter()
            .filter_map(|c| match c {
                HealthChange::EjectionRefused { key } => Some(*key),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn settings_from_config() {
        let h = Health::default();
        let s = HealthSettings::from_config(&h);
        assert_eq!(s.unhealthy_threshold, 3);
        assert_eq!(s.ejection_backoff, secs(5));
        assert_eq!(s.max_ejection_backoff, secs(300));
        assert_eq!(s.max_ejection_percent, 50);
        assert_eq!(s.streak_reset_after(), secs(50));
        assert_eq!(settings(1, 50).streak_reset_after(), secs(30));
    }

    #[test]
    fn threshold_counts_and_success_resets() {
        let t0 = Instant::now();
        let mut b = book(2, 3, 50);
        assert!(fail(&mut b, 0, 2, t0).is_empty());
        assert_eq!(b.failure_streak(0), 2);
        assert!(b.request_result(0, true, t0).is_empty());
        assert_eq!(b.failure_streak(0), 0);
        assert!(fail(&mut b, 0, 2, t0).is_empty());
        assert!(b.routable(0, t0));
        let changes = b.request_result(0, false, t0);
        assert_eq!(
            changes,
            vec![HealthChange::Ejected {
                key: 0,
                until: t0 + secs(5),
                backoff: secs(5)
            }]
        );
        assert!(!b.routable(0, t0));
        assert_eq!(b.failure_streak(0), 0);
        let st = b.status(0, t0);
        assert_eq!(st.map(|s| s.ejected_until), Some(Some(t0 + secs(5))));
        assert_eq!(st.map(|s| s.ejections), Some(1));
        // Other replicas keep their own streaks.
        assert_eq!(b.failure_streak(1), 0);
        assert!(b.routable(1, t0));
    }

    #[test]
    fn failures_while_ejected_are_ignored_and_readmission_is_clean() {
        let t0 = Instant::now();
        let mut b = book(2, 2, 50);
        assert_eq!(ejected(&fail(&mut b, 0, 2, t0)), vec![0]);
        assert_eq!(b.next_deadline(), Some(t0 + secs(5)));
        assert!(fail(&mut b, 0, 5, t0 + secs(1)).is_empty());
        assert_eq!(b.failure_streak(0), 0);
        assert!(b.tick(t0 + secs(4)).is_empty());
        assert_eq!(
            b.tick(t0 + secs(6)),
            vec![HealthChange::Readmitted { key: 0 }]
        );
        assert!(b.routable(0, t0 + secs(6)));
        assert_eq!(b.next_deadline(), None);
        assert_eq!(b.failure_streak(0), 0);
        // One failure after readmission does not eject again.
        assert!(fail(&mut b, 0, 1, t0 + secs(6)).is_empty());
        // An event past the deadline readmits even without a tick.
        let mut b = book(2, 1, 50);
        fail(&mut b, 0, 1, t0);
        assert!(!b.routable(0, t0));
        assert!(b.routable(0, t0 + secs(5)), "expired by time alone");
        let changes = b.probe_result(1, true, t0 + secs(7));
        assert_eq!(changes, vec![HealthChange::Readmitted { key: 0 }]);
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut t = Instant::now();
        let mut b = book(2, 1, 50);
        let mut seen = Vec::new();
        for _ in 0..6 {
            let changes = fail(&mut b, 0, 1, t);
            let Some(HealthChange::Ejected { until, backoff, .. }) = changes.first().copied()
            else {
                panic!("not ejected: {changes:?}");
            };
            assert_eq!(until, t + backoff);
            seen.push(backoff.as_secs());
            t = until;
            assert_eq!(b.tick(t), vec![HealthChange::Readmitted { key: 0 }]);
        }
        assert_eq!(seen, vec![5, 10, 20, 30, 30, 30]);
        assert_eq!(b.status(0, t).map(|s| s.ejections), Some(6));
    }

    #[test]
    fn doubling_resets_after_a_clean_window() {
        let t0 = Instant::now();
        let mut b = book(2, 1, 50);
        fail(&mut b, 0, 1, t0);
        b.tick(t0 + secs(5));
        // Just inside the window (30s = max backoff < 10 * 5s): the next ejection doubles.
        let t1 = t0 + secs(5) + secs(29);
        assert_eq!(b.status(0, t1).map(|s| s.ejections), Some(1));
        let changes = fail(&mut b, 0, 1, t1);
        assert!(
            matches!(changes.as_slice(), [HealthChange::Ejected { backoff, .. }] if *backoff == secs(10))
        );
        b.tick(t1 + secs(10));
        // A full clean window after readmission: back to the first backoff.
        let t2 = t1 + secs(10) + secs(30);
        assert_eq!(b.status(0, t2).map(|s| s.ejections), Some(0));
        let changes = fail(&mut b, 0, 1, t2);
        assert!(
            matches!(changes.as_slice(), [HealthChange::Ejected { backoff, .. }] if *backoff == secs(5))
        );
    }

    #[test]
    fn percent_cap_by_fleet_size() {
        let t0 = Instant::now();
        for (n, expect) in [(1u64, 0usize), (2, 1), (3, 1), (4, 2)] {
            let mut b = book(n, 2, 50);
            let mut changes = Vec::new();
            for k in 0..n {
                changes.extend(fail(&mut b, k, 2, t0));
            }
            let out = ejected(&changes).len();
            assert_eq!(out, expect, "{n} replicas: {changes:?}");
            assert_eq!(refused(&changes).len(), n as usize - expect);
            // Further failures of the same streak do not repeat the refusal.
            let mut again = Vec::new();
            for k in 0..n {
                again.extend(fail(&mut b, k, 3, t0));
            }
            assert!(again.is_empty(), "{n} replicas: {again:?}");
            let routable = (0..n).filter(|k| b.routable(*k, t0)).count();
            assert_eq!(routable, n as usize - expect);
        }
        // 100% lets the whole fleet go; 0% keeps everyone in.
        let mut b = book(2, 1, 100);
        assert_eq!(
            ejected(&[fail(&mut b, 0, 1, t0), fail(&mut b, 1, 1, t0)].concat()).len(),
            2
        );
        let mut b = book(2, 1, 0);
        assert_eq!(refused(&fail(&mut b, 0, 1, t0)), vec![0]);
    }

    #[test]
    fn refused_replica_is_ejected_once_the_cap_allows() {
        let t0 = Instant::now();
        let mut b = book(2, 2, 50);
        assert_eq!(ejected(&fail(&mut b, 0, 2, t0)), vec![0]);
        assert_eq!(refused(&fail(&mut b, 1, 2, t0)), vec![1]);
        assert_eq!(b.failure_streak(1), 2);
        assert!(fail(&mut b, 1, 1, t0 + secs(1)).is_empty());
        assert_eq!(b.failure_streak(1), 3);
        // 0's ejection ends; 1's next failure ejects it.
        let changes = b.request_result(1, false, t0 + secs(5));
        assert_eq!(changes[0], HealthChange::Readmitted { key: 0 });
        assert_eq!(ejected(&changes), vec![1]);
        // A success closes a refused streak, so the next crossing is reported again.
        let mut b = book(2, 1, 50);
        fail(&mut b, 0, 1, t0);
        assert_eq!(refused(&fail(&mut b, 1, 1, t0)), vec![1]);
        b.request_result(1, true, t0);
        assert_eq!(refused(&fail(&mut b, 1, 1, t0)), vec![1]);
    }

    #[test]
    fn percent_cap_with_multi_model_replicas() {
        let t0 = Instant::now();
        let mut b = HealthBook::new(settings(1, 50));
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        // m1: A(0), B(1). m2: A(0), C(2), D(3), E(4).
        b.sync_members(&[
            (0, s(&["m1", "m2"])),
            (1, s(&["m1"])),
            (2, s(&["m2"])),
            (3, s(&["m2", "m2"])),
            (4, s(&["m2"])),
        ]);
        assert_eq!(ejected(&fail(&mut b, 1, 1, t0)), vec![1]);
        // m2 would allow A (1 of 4) but m1 would be 2 of 2.
        assert_eq!(refused(&fail(&mut b, 0, 1, t0)), vec![0]);
        assert_eq!(ejected(&fail(&mut b, 2, 1, t0)), vec![2]);
        assert_eq!(ejected(&fail(&mut b, 3, 1, t0)), vec![3]);
        assert_eq!(refused(&fail(&mut b, 4, 1, t0)), vec![4]);
        assert!(b.routable(0, t0) && b.routable(4, t0));
    }

    #[test]
    fn probes_take_down_and_bring_back() {
        let t0 = Instant::now();
        let mut b = book(1, 2, 50);
        assert!(b.probe_result(0, false, t0).is_empty());
        assert!(b.routable(0, t0));
        assert_eq!(
            b.probe_result(0, false, t0),
            vec![HealthChange::ProbeDown { key: 0 }],
            "probe failures are not capped, even for a single replica"
        );
        assert!(!b.routable(0, t0));
        assert!(b.probe_result(0, false, t0).is_empty(), "reported once");
        let st = b.status(0, t0);
        assert_eq!(
            st.map(|s| (s.probe_healthy, s.consecutive_probe_failures)),
            Some((false, 3))
        );
        assert_eq!(
            b.failure_streak(0),
            0,
            "probes do not count toward ejection"
        );
        assert_eq!(
            b.probe_result(0, true, t0),
            vec![HealthChange::ProbeUp { key: 0 }]
        );
        assert!(b.routable(0, t0));
        assert!(b.probe_result(0, true, t0).is_empty());
        assert!(b.probe_result(9, false, t0).is_empty(), "unknown key");
    }

    #[test]
    fn probe_down_lifts_ejections_over_the_cap() {
        let t0 = Instant::now();
        let mut b = book(2, 1, 50);
        assert_eq!(ejected(&fail(&mut b, 0, 1, t0)), vec![0]);
        let changes = b.probe_result(1, false, t0 + secs(1));
        assert_eq!(
            changes,
            vec![
                HealthChange::ProbeDown { key: 1 },
                HealthChange::Readmitted { key: 0 }
            ]
        );
        assert!(b.routable(0, t0 + secs(1)));
        // The lifted ejection still counts in the row.
        assert_eq!(b.status(0, t0 + secs(1)).map(|s| s.ejections), Some(1));
    }

    #[test]
    fn sync_members_keeps_state_of_stayers() {
        let t0 = Instant::now();
        let mut b = book(4, 2, 50);
        fail(&mut b, 0, 1, t0);
        assert_eq!(ejected(&fail(&mut b, 1, 2, t0)), vec![1]);
        b.probe_result(2, false, t0);
        b.probe_result(2, false, t0);
        let m = || vec!["m".to_string()];
        b.sync_members(&[(0, m()), (1, m()), (2, m()), (5, m())]);
        assert_eq!(b.failure_streak(0), 1);
        assert!(!b.routable(1, t0));
        assert_eq!(b.next_deadline(), Some(t0 + secs(5)));
        assert_eq!(b.status(2, t0).map(|s| s.probe_healthy), Some(false));
        assert!(b.status(3, t0).is_none());
        assert!(b.routable(5, t0));
        assert_eq!(
            b.status(5, t0),
            Some(ReplicaHealth {
                probe_healthy: true,
                consecutive_probe_failures: 0,
                consecutive_request_failures: 0,
                ejected_until: None,
                ejections: 0,
            })
        );
        // Dropped then re-added: a fresh replica.
        b.sync_members(&[(0, m()), (5, m())]);
        assert_eq!(b.next_deadline(), None);
        b.sync_members(&[(0, m()), (1, m()), (5, m())]);
        assert!(b.routable(1, t0));
        assert_eq!(b.failure_streak(0), 1);
    }

    #[test]
    fn new_settings_shorten_ejections_and_keep_state() {
        let t0 = Instant::now();
        let mut b = book(2, 3, 50);
        fail(&mut b, 1, 2, t0);
        let mut long = settings(3, 50);
        long.ejection_backoff = secs(100);
        long.max_ejection_backoff = secs(100);
        b.set_settings(long);
        fail(&mut b, 0, 3, t0);
        assert_eq!(b.next_deadline(), Some(t0 + secs(100)));
        b.set_settings(settings(2, 50));
        assert_eq!(b.next_deadline(), Some(t0 + secs(30)));
        assert_eq!(b.failure_streak(1), 2);
        // A lower percent lifts the ejection at the next tick.
        b.set_settings(settings(2, 0));
        assert_eq!(b.tick(t0), vec![HealthChange::Readmitted { key: 0 }]);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Advance(u64),
        Probe(usize, bool),
        Request(usize, bool),
        Tick,
        Sync(u8),
        Percent(u32),
        MaxBackoff(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => (0u64..20_000).prop_map(Op::Advance),
            2 => (0usize..6, prop::bool::weighted(0.6)).prop_map(|(k, ok)| Op::Probe(k, ok)),
            6 => (0usize..6, prop::bool::weighted(0.2)).prop_map(|(k, ok)| Op::Request(k, ok)),
            1 => Just(Op::Tick),
            1 => any::<u8>().prop_map(Op::Sync),
            1 => (0u32..=100).prop_map(Op::Percent),
            1 => (1u64..20).prop_map(Op::MaxBackoff),
        ]
    }

    const MODELS: [&str; 3] = ["a", "b", "c"];

    fn check(
        b: &HealthBook,
        present: &[(ReplicaKey, Vec<String>)],
        starts: &BTreeMap<ReplicaKey, Instant>,
        now: Instant,
    ) -> Result<(), TestCaseError> {
        let s = b.settings().clone();
        for model in MODELS {
            let serving: Vec<_> = present
                .iter()
                .filter(|(_, ms)| ms.iter().any(|m| m == model))
                .filter_map(|(k, _)| b.status(*k, now))
                .collect();
            let out = serving.iter().filter(|h| h.ejected_until.is_some()).count() as u64;
            let healthy = serving.iter().filter(|h| h.probe_healthy).count() as u64;
            prop_assert!(
                out * 100 <= u64::from(s.max_ejection_percent) * healthy,
                "model {model}: {out} ejected of {healthy} healthy at {}%",
                s.max_ejection_percent
            );
        }
        for (key, _) in present {
            let Some(h) = b.status(*key, now) else {
                return Err(TestCaseError::fail(format!("{key} missing")));
            };
            prop_assert_eq!(
                b.routable(*key, now),
                h.probe_healthy && h.ejected_until.is_none()
            );
            if let Some(until) = h.ejected_until {
                let start = starts.get(key).copied();
                prop_assert!(start.is_some_and(|t| until <= t + s.max_ejection_backoff));
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn ejections_respect_the_cap_and_expire_in_time(
            masks in prop::collection::vec(1u8..8, 6),
            threshold in 1u32..4,
            base in 1u64..10,
            factor in 1u64..20,
            percent in 0u32..=100,
            ops in prop::collection::vec(op(), 1..200),
        ) {
            let t0 = Instant::now();
            let mut now = t0;
            let mut s = HealthSettings {
                unhealthy_threshold: threshold,
                ejection_backoff: secs(base),
                max_ejection_backoff: secs(base * factor),
                max_ejection_percent: percent,
            };
            let all: Vec<(ReplicaKey, Vec<String>)> = masks
                .iter()
                .enumerate()
                .map(|(k, mask)| {
                    let models = MODELS
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| mask & (1 << i) != 0)
                        .map(|(_, m)| m.to_string())
                        .collect();
                    (k as ReplicaKey, models)
                })
                .collect();
            let mut b = HealthBook::new(s.clone());
            let mut present = all.clone();
            b.sync_members(&present);
            let mut starts = BTreeMap::new();
            for op in ops {
                let changes = match op {
                    Op::Advance(ms) => {
                        now += Duration::from_millis(ms);
                        Vec::new()
                    }
                    Op::Probe(k, ok) => b.probe_result(k as ReplicaKey, ok, now),
                    Op::Request(k, ok) => b.request_result(k as ReplicaKey, ok, now),
                    Op::Tick => {
                        let changes = b.tick(now);
                        prop_assert!(b.next_deadline().is_none_or(|d| d > now));
                        changes
                    }
                    Op::Sync(mask) => {
                        present = all
                            .iter()
                            .filter(|(k, _)| mask & (1 << k) != 0)
                            .cloned()
                            .collect();
                        b.sync_members(&present);
                        b.tick(now)
                    }
                    Op::Percent(p) => {
                        s.max_ejection_percent = p;
                        b.set_settings(s.clone());
                        b.tick(now)
                    }
                    Op::MaxBackoff(factor) => {
                        s.max_ejection_backoff = secs(base * factor);
                        b.set_settings(s.clone());
                        b.tick(now)
                    }
                };
                // An ejection made by a call is not lifted by the same call: the cap was checked
                // before ejecting, not repaired after.
                for (i, c) in changes.iter().enumerate() {
                    if let HealthChange::Ejected { key, .. } = c {
                        let lifted = HealthChange::Readmitted { key: *key };
                        prop_assert!(!changes[i..].contains(&lifted), "{changes:?}");
                    }
                }
                for c in changes {
                    if let HealthChange::Ejected { key, until, backoff } = c {
                        prop_assert!(backoff <= s.max_ejection_backoff);
                        prop_assert_eq!(until, now + backoff);
                        starts.insert(key, now);
                    }
                }
                check(&b, &present, &starts, now)?;
            }
        }
    }
}
