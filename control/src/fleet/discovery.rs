//! DNS discovery: every address a `discovery.dns` group's host name resolves to is a replica.
//!
//! Lookups (getaddrinfo can block for seconds) run on one background thread, never on the
//! control thread: [`Discovery`] resolves each group every `refresh` and the control thread
//! picks up changed member sets with the non-blocking [`Discovery::poll`]. The bookkeeping is a
//! pure state machine ([`Membership`]) fed with lookup results and `now`, so it is tested without
//! threads or clocks.
//!
//! Rules: a failed lookup keeps the group's last known set (it is logged to stderr once per
//! streak of failures, and once when the name resolves again); a lookup that succeeds with no
//! address empties the group. Members are sorted by group name, then address. A member's id is
//! `<group>-<ip>-<port>` with an IPv6 address's colons replaced by `_` (`pool-fd00__1-8000` for
//! `[fd00::1]:8000`), so discovered ids keep to the characters of configured replica ids
//! (letters, digits, `.`, `_`, `-`) and are safe in Prometheus label values and headers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use inferrail_config::DnsGroup;

/// Turns a host name and port into socket addresses. Implementations may block; [`Discovery`]
/// only calls them on its background thread.
pub trait Resolver: Send + Sync {
    /// Every address `host` resolves to, with `port`; an error when the name does not resolve.
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>>;
}

/// The system resolver: std's `ToSocketAddrs` (getaddrinfo), which also accepts IP literals.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok((host, port).to_socket_addrs()?.collect())
    }
}

/// A resolver for tests: a map from host name to addresses (or a failure) that tests change at
/// will. Clones share the map, so a test keeps one clone and hands another to [`Discovery`]. A
/// host that was never set fails like an unknown name.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver {
    shared: Arc<Mutex<StaticMap>>,
}

#[derive(Debug, Default)]
struct StaticMap {
    hosts: HashMap<String, Result<Vec<IpAddr>, String>>,
    lookups: u64,
}

impl StaticResolver {
    /// An empty map: every name fails to resolve.
    pub fn new() -> Self {
        StaticResolver::default()
    }

    /// From now on `host` resolves to `ips` (each with the port asked for, like a DNS A/AAAA
    /// answer).
    pub fn set(&self, host: &str, ips: impl IntoIterator<Item = IpAddr>) {
        let ips = ips.into_iter().collect();
        self.map().hosts.insert(host.to_string(), Ok(ips));
    }

    /// From now on looking `host` up fails.
    pub fn fail(&self, host: &str) {
        let message = format!("lookup of {host} failed (test)");
        self.map().hosts.insert(host.to_string(), Err(message));
    }

    /// How many lookups were made through any clone.
    pub fn lookups(&self) -> u64 {
        self.map().lookups
    }

    fn map(&self) -> MutexGuard<'_, StaticMap> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Resolver for StaticResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let mut map = self.map();
        map.lookups += 1;
        match map.hosts.get(host) {
            Some(Ok(ips)) => Ok(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()),
            Some(Err(message)) => Err(io::Error::other(message.clone())),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("unknown host {host} (test)"),
            )),
        }
    }
}

/// One replica found by DNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredMember {
    /// The `discovery.dns` group it belongs to.
    pub group: String,
    /// Its replica id, `<group>-<ip>-<port>` (see [`member_id`]).
    pub id: String,
    /// The address to connect to.
    pub addr: SocketAddr,
    /// `host:port` of the group's URL, for the `Host` header (the engine was named by it).
    pub authority: String,
    /// Canonical names of the models it serves (the group's).
    pub models: Vec<String>,
    /// The group's `kv_events`.
    pub kv_events: Option<inferrail_config::KvEvents>,
}

/// The replica id of `addr` in `group`: `<group>-<ip>-<port>`, an IPv6 address's colons replaced
/// by `_` (`g-fd00__1-8000`). Distinct addresses of one group always get distinct ids.
pub fn member_id(group: &str, addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => ip.to_string().replace(':', "_"),
    };
    format!("{group}-{ip}-{}", addr.port())
}

/// The members of `group` for the addresses a lookup returned: the URL's port on each address,
/// duplicates removed, sorted by address.
fn members_of(group: &DnsGroup, addrs: &[SocketAddr]) -> Vec<DiscoveredMember> {
    let addrs: BTreeSet<SocketAddr> = addrs
        .iter()
        .map(|addr| SocketAddr::new(addr.ip(), group.url.port))
        .collect();
    addrs
        .into_iter()
        .map(|addr| DiscoveredMember {
            group: group.name.clone(),
            id: member_id(&group.name, addr),
            addr,
            authority: group.url.authority(),
            models: group.models.clone(),
            kv_events: group.kv_events.clone(),
        })
        .collect()
}

/// One group's state: its config, last known members, failure streak and next lookup.
#[derive(Debug)]
struct GroupState {
    config: DnsGroup,
    members: Vec<DiscoveredMember>,
    /// In a streak of failed lookups (already logged).
    failing: bool,
    next_due: Instant,
}

/// Discovery's bookkeeping, without threads or clocks: which groups are due for a lookup, the
/// last known members of each, and a version that changes whenever the member set does.
#[derive(Debug, Default)]
pub struct Membership {
    groups: BTreeMap<String, GroupState>,
    version: u64,
}

impl Membership {
    /// Bookkeeping for `groups`, each due for a lookup at `now`.
    pub fn new(groups: Vec<DnsGroup>, now: Instant) -> Self {
        let mut membership = Membership::default();
        membership.set_groups(groups, now);
        membership
    }

    /// Takes a new list of groups (a reload). A group whose URL is unchanged keeps its members
    /// (with the new models); a new group, or one whose URL or refresh changed, is due at `now`;
    /// a group whose URL changed, or that is gone, loses its members.
    pub fn set_groups(&mut self, groups: Vec<DnsGroup>, now: Instant) {
        let mut old = std::mem::take(&mut self.groups);
        let mut changed = false;
        for config in groups {
            let state = match old.remove(&config.name) {
                Some(mut state) if state.config.url == config.url => {
                    if state.config.models != config.models {
                        for member in &mut state.members {
                            member.models.clone_from(&config.models);
                        }
                        changed |= !state.members.is_empty();
                    }
                    if state.config.refresh != config.refresh {
                        state.next_due = now;
                    }
                    state.config = config;
                    state
                }
                replaced => {
                    changed |= replaced.is_some_and(|s| !s.members.is_empty());
                    GroupState {
                        config,
                        members: Vec::new(),
                        failing: false,
                        next_due: now,
                    }
                }
            };
            self.groups.insert(state.config.name.clone(), state);
        }
        changed |= old.values().any(|s| !s.members.is_empty());
        if changed {
            self.version += 1;
        }
    }

    /// Makes every group due at `now` (a resolution asked for out of schedule).
    pub fn force_all(&mut self, now: Instant) {
        for state in self.groups.values_mut() {
            state.next_due = now;
        }
    }

    /// The groups due for a lookup at `now`; each is next due one `refresh` after `now`.
    pub fn take_due(&mut self, now: Instant) -> Vec<DnsGroup> {
        self.groups
            .values_mut()
            .filter(|state| state.next_due <= now)
            .map(|state| {
                state.next_due = now + state.config.refresh;
                state.config.clone()
            })
            .collect()
    }

    /// When the next group is due; `None` without groups.
    pub fn next_due(&self) -> Option<Instant> {
        self.groups.values().map(|state| state.next_due).min()
    }

    /// Records the result of looking up `group` (as it was configured when the lookup started).
    /// A result for a group since removed or re-pointed to another URL is dropped. On success
    /// the group's members become the addresses found; on failure they stay. Returns a line to
    /// log when a failure streak starts or ends, `None` otherwise.
    pub fn apply(
        &mut self,
        group: &DnsGroup,
        result: io::Result<Vec<SocketAddr>>,
    ) -> Option<String> {
        let state = self.groups.get_mut(&group.name)?;
        if state.config.url != group.url {
            return None;
        }
        let host = &state.config.url.host;
        match result {
            Ok(addrs) => {
                let members = members_of(&state.config, &addrs);
                if members != state.members {
                    state.members = members;
                    self.version += 1;
                }
                if !state.failing {
                    return None;
                }
                state.failing = false;
                Some(format!(
                    "discovery.dns group {}: {host} resolves again ({} replicas)",
                    group.name,
                    state.members.len()
                ))
            }
            Err(err) => {
                if state.failing {
                    return None;
                }
                state.failing = true;
                Some(format!(
                    "discovery.dns group {}: cannot resolve {host}: {err}; keeping its last {} known replicas until it resolves",
                    group.name,
                    state.members.len()
                ))
            }
        }
    }

    /// Changes whenever the member set changes (starts at 0).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Every group's members: by group name, then address.
    pub fn members(&self) -> Vec<DiscoveredMember> {
        self.groups
            .values()
            .flat_map(|state| state.members.iter().cloned())
            .collect()
    }
}

/// What the background thread and its owner share, behind one mutex.
#[derive(Debug)]
struct State {
    membership: Membership,
    /// Out-of-schedule resolutions asked for (by `resolve_now_blocking`), and done.
    requested: u64,
    served: u64,
    /// The membership version `poll` (or `resolve_now_blocking`) last handed out.
    polled: u64,
    stop: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the thread (new work, stop) and its owner (a resolution done).
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long the thread sleeps when no group is configured (it is woken on any change).
const IDLE: Duration = Duration::from_secs(3600);

/// DNS discovery running on its own background thread, which stops (and is joined) when this is
/// dropped; a drop during a lookup waits for that lookup to end.
#[derive(Debug)]
pub struct Discovery {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Discovery {
    /// Starts the background thread, which resolves every group at once and then each every
    /// `refresh`. Fails only when the thread cannot be spawned.
    pub fn start(groups: Vec<DnsGroup>, resolver: Arc<dyn Resolver>) -> io::Result<Discovery> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                membership: Membership::new(groups, Instant::now()),
                requested: 0,
                served: 0,
                polled: 0,
                stop: false,
            }),
            wake: Condvar::new(),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("inferrail-discovery".to_string())
            .spawn(move || run(&thread_shared, resolver.as_ref()))?;
        Ok(Discovery {
            shared,
            thread: Some(thread),
        })
    }

    /// Resolves every group now and waits for the results, at most `timeout`; then returns
    /// every member known (those of groups that did not answer in time are their last known
    /// set, empty at start). For the initial resolution before the first request. The set
    /// returned counts as polled: [`Discovery::poll`] reports only later changes.
    pub fn resolve_now_blocking(&self, timeout: Duration) -> Vec<DiscoveredMember> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        state.requested += 1;
        let ticket = state.requested;
        self.shared.wake.notify_all();
        while state.served < ticket && !state.stop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = self
                .shared
                .wake
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        state.polled = state.membership.version();
        state.membership.members()
    }

    /// Every member, when the member set changed since the last poll; `None` otherwise. Never
    /// waits for a lookup (the lock is only held for bookkeeping).
    pub fn poll(&self) -> Option<Vec<DiscoveredMember>> {
        let mut state = self.shared.lock();
        let version = state.membership.version();
        if version == state.polled {
            return None;
        }
        state.polled = version;
        Some(state.membership.members())
    }

    /// Takes a reloaded `discovery.dns` (see [`Membership::set_groups`]); new and re-pointed
    /// groups are looked up at once.
    pub fn set_groups(&self, groups: Vec<DnsGroup>) {
        let mut state = self.shared.lock();
        state.membership.set_groups(groups, Instant::now());
        self.shared.wake.notify_all();
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The background thread: looks up due groups without holding the lock, records the results,
/// sleeps until the next group is due or it is woken.
fn run(shared: &Shared, resolver: &dyn Resolver) {
    let mut state = shared.lock();
    loop {
        if state.stop {
            return;
        }
        let now = Instant::now();
        let request = state.requested;
        if request > state.served {
            state.membership.force_all(now);
        }
        let due = state.membership.take_due(now);
        if due.is_empty() {
            if request > state.served {
                state.served = request;
                shared.wake.notify_all();
                continue;
            }
            let wait = state
                .membership
                .next_due()
                .map_or(IDLE, |at| at.saturating_duration_since(now));
            state = shared
                .wake
                .wait_timeout(state, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            continue;
        }
        drop(state);
        let results: Vec<_> = due
            .into_iter()
            .map(|group| {
                let result = resolver.resolve(&group.url.host, group.url.port);
                (group, result)
            })
            .collect();
        state = shared.lock();
        for (group, result) in results {
            if let Some(line) = state.membership.apply(&group, result) {
                eprintln!("inferrail: {line}");
            }
        }
        if request > state.served {
            state.served = request;
        }
        shared.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::{Duration, Instant};

    use inferrail_config::{DnsGroup, UpstreamUrl};

    use super::{member_id, DiscoveredMember, Discovery, Membership, Resolver, StaticResolver};

    fn group(name: &str, url: &str, refresh_ms: u64) -> DnsGroup {
        DnsGroup {
            name: name.to_string(),
            url: UpstreamUrl::parse(url).unwrap(),
            models: vec!["m".to_string()],
            refresh: Duration::from_millis(refresh_ms),
            kv_events: None,
        }
    }

    fn v4(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    fn addrs(ips: &[IpAddr], port: u16) -> Vec<SocketAddr> {
        ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()
    }

    fn ids(members: &[DiscoveredMember]) -> Vec<&str> {
        members.iter().map(|m| m.id.as_str()).collect()
    }

    fn failure() -> std::io::Result<Vec<SocketAddr>> {
        Err(std::io::Error::other("SERVFAIL"))
    }

    #[test]
    fn ids_name_the_group_address_and_port() {
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(
            member_id("pool", SocketAddr::new(v4(7), 8000)),
            "pool-10.0.0.7-8000"
        );
        assert_eq!(
            member_id("pool", SocketAddr::new(v6, 8000)),
            "pool-fd00__1-8000"
        );
        assert_eq!(
            member_id("g", SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 1)),
            "g-__1-1"
        );
        // Ids keep to the characters of configured replica ids.
        let id = member_id(
            "g",
            SocketAddr::new("2001:db8::ff00:42:8329".parse().unwrap(), 80),
        );
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')),
            "{id}"
        );
    }

    #[test]
    fn members_are_sorted_deduplicated_and_carry_the_group() {
        let t0 = Instant::now();
        let pool = group("pool", "http://vllm.svc:8000", 1000);
        let mut m = Membership::new(vec![pool.clone()], t0);
        assert_eq!(m.version(), 0);
        let v6: IpAddr = "fd00::1".parse().unwrap();
        // Addresses come back in any order, with duplicates and any port.
        let found = vec![
            SocketAddr::new(v4(9), 8000),
            SocketAddr::new(v6, 8000),
            SocketAddr::new(v4(2), 0),
            SocketAddr::new(v4(9), 8000),
        ];
        assert_eq!(m.apply(&pool, Ok(found)), None);
        assert_eq!(m.version(), 1);
        let members = m.members();
        assert_eq!(
            ids(&members),
            [
                "pool-10.0.0.2-8000",
                "pool-10.0.0.9-8000",
                "pool-fd00__1-8000"
            ]
        );
        assert_eq!(members[0].addr, SocketAddr::new(v4(2), 8000));
        assert_eq!(members[0].group, "pool");
        assert_eq!(members[0].authority, "vllm.svc:8000");
        assert_eq!(members[0].models, ["m"]);
    }

    #[test]
    fn join_and_leave_change_the_version_and_the_same_set_does_not() {
        let t0 = Instant::now();
        let pool = group("pool", "http://vllm.svc:8000", 1000);
        let mut m = Membership::new(vec![pool.clone()], t0);
        m.apply(&pool, Ok(addrs(&[v4(1)], 8000)));
        assert_eq!(m.version(), 1);
        m.apply(&pool, Ok(addrs(&[v4(1)], 8000)));
        assert_eq!(m.version(), 1);
        m.apply(&pool, Ok(addrs(&[v4(2), v4(1)], 8000)));
        assert_eq!(m.version(), 2);
        assert_eq!(
            ids(&m.members()),
            ["pool-10.0.0.1-8000", "pool-10.0.0.2-8000"]
        );
        m.apply(&pool, Ok(addrs(&[v4(2)], 8000)));
        assert_eq!(m.version(), 3);
        assert_eq!(ids(&m.members()), ["pool-10.0.0.2-8000"]);
        // A lookup that succeeds with no address empties the group.
        m.apply(&pool, Ok(Vec::new()));
        assert_eq!(m.version(), 4);
        assert!(m.members().is_empty());
    }

    #[test]
    fn a_failed_lookup_keeps_the_last_set_and_logs_once_per_streak() {
        let t0 = Instant::now();
        let pool = group("pool", "http://vllm.svc:8000", 1000);
        let mut m = Membership::new(vec![pool.clone()], t0);
        m.apply(&pool, Ok(addrs(&[v4(1), v4(2)], 8000)));
        let line = m.apply(&pool, failure()).unwrap();
        assert_eq!(
            line,
            "discovery.dns group pool: cannot resolve vllm.svc: SERVFAIL; keeping its last 2 known replicas until it resolves"
        );
        assert_eq!(m.apply(&pool, failure()), None);
        assert_eq!(m.apply(&pool, failure()), None);
        assert_eq!(m.version(), 1);
        assert_eq!(m.members().len(), 2);
        let line = m.apply(&pool, Ok(addrs(&[v4(1)], 8000))).unwrap();
        assert_eq!(
            line,
            "discovery.dns group pool: vllm.svc resolves again (1 replicas)"
        );
        assert_eq!(m.version(), 2);
        assert_eq!(m.apply(&pool, Ok(addrs(&[v4(1)], 8000))), None);
        // A new streak is logged again.
        assert!(m.apply(&pool, failure()).is_some());
    }

    #[test]
    fn groups_are_due_every_refresh() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let a = group("a", "http://a.svc:8000", 100);
        let b = group("b", "http://b.svc:8000", 300);
        let mut m = Membership::new(vec![b.clone(), a.clone()], t0);
        assert_eq!(m.take_due(t0), [a.clone(), b.clone()]);
        assert!(m.take_due(t0).is_empty());
        assert_eq!(m.next_due(), Some(t0 + ms(100)));
        assert!(m.take_due(t0 + ms(99)).is_empty());
        assert_eq!(m.take_due(t0 + ms(100)), std::slice::from_ref(&a));
        assert_eq!(m.take_due(t0 + ms(300)), [a.clone(), b.clone()]);
        m.force_all(t0 + ms(310));
        assert_eq!(m.take_due(t0 + ms(310)).len(), 2);
        assert_eq!(Membership::new(Vec::new(), t0).next_due(), None);
    }

    #[test]
    fn group_removal_and_reconfiguration() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let a = group("a", "http://a.svc:8000", 100);
        let b = group("b", "http://b.svc:9000", 100);
        let mut m = Membership::new(vec![a.clone(), b.clone()], t0);
        m.take_due(t0);
        m.apply(&a, Ok(addrs(&[v4(1)], 8000)));
        m.apply(&b, Ok(addrs(&[v4(2)], 9000)));
        assert_eq!(ids(&m.members()), ["a-10.0.0.1-8000", "b-10.0.0.2-9000"]);
        let version = m.version();

        // Same groups: nothing changes, nothing is due early.
        m.set_groups(vec![a.clone(), b.clone()], t0 + ms(10));
        assert_eq!(m.version(), version);
        assert!(m.take_due(t0 + ms(10)).is_empty());

        // New models are carried by the kept members.
        let mut a2 = a.clone();
        a2.models = vec!["m".to_string(), "n".to_string()];
        m.set_groups(vec![a2.clone(), b.clone()], t0 + ms(20));
        assert_eq!(m.version(), version + 1);
        assert_eq!(m.members()[0].models, ["m", "n"]);

        // Removing a group removes its members; a late result for it is dropped.
        m.set_groups(vec![a2.clone()], t0 + ms(30));
        assert_eq!(m.version(), version + 2);
        assert_eq!(ids(&m.members()), ["a-10.0.0.1-8000"]);
        assert_eq!(m.apply(&b, Ok(addrs(&[v4(3)], 9000))), None);
        assert_eq!(ids(&m.members()), ["a-10.0.0.1-8000"]);

        // A group pointed at another URL loses its members, is due at once, and a result of
        // a lookup of the old URL is dropped.
        let a3 = group("a", "http://other.svc:8001", 100);
        m.set_groups(vec![a3.clone()], t0 + ms(40));
        assert_eq!(m.version(), version + 3);
        assert!(m.members().is_empty());
        assert_eq!(m.take_due(t0 + ms(40)), std::slice::from_ref(&a3));
        m.apply(&a2, Ok(addrs(&[v4(1)], 8000)));
        assert!(m.members().is_empty());
        m.apply(&a3, Ok(addrs(&[v4(5)], 8001)));
        assert_eq!(ids(&m.members()), ["a-10.0.0.5-8001"]);
        assert_eq!(m.members()[0].authority, "other.svc:8001");
    }

    /// Polls until `check` accepts a member set, for at most 5 s.
    fn poll_until(
        discovery: &Discovery,
        check: impl Fn(&[DiscoveredMember]) -> bool,
    ) -> Vec<DiscoveredMember> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(members) = discovery.poll() {
                if check(&members) {
                    return members;
                }
            }
            assert!(Instant::now() < deadline, "member set not reached in 5s");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn background_thread_follows_joins_leaves_and_failures() {
        let resolver = StaticResolver::new();
        resolver.set("a.svc", [v4(1), v4(2)]);
        let groups = vec![group("a", "http://a.svc:8000", 10)];
        let discovery = Discovery::start(groups, Arc::new(resolver.clone())).unwrap();
        let members = discovery.resolve_now_blocking(Duration::from_secs(5));
        assert_eq!(ids(&members), ["a-10.0.0.1-8000", "a-10.0.0.2-8000"]);
        // The initial set counts as polled.
        assert_eq!(discovery.poll(), None);

        resolver.set("a.svc", [v4(1), v4(2), v4(3)]);
        let members = poll_until(&discovery, |m| m.len() == 3);
        assert_eq!(ids(&members)[2], "a-10.0.0.3-8000");

        resolver.set("a.svc", [v4(3)]);
        let members = poll_until(&discovery, |m| m.len() == 1);
        assert_eq!(ids(&members), ["a-10.0.0.3-8000"]);

        // Failing lookups keep the set: after several more lookups, nothing changed.
        resolver.fail("a.svc");
        let lookups = resolver.lookups();
        let deadline = Instant::now() + Duration::from_secs(5);
        while resolver.lookups() < lookups + 3 {
            assert!(Instant::now() < deadline, "no lookups in 5s");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(discovery.poll(), None);
        assert_eq!(
            ids(&discovery.resolve_now_blocking(Duration::from_secs(5))),
            ["a-10.0.0.3-8000"]
        );
    }

    #[test]
    fn set_groups_adds_and_removes_groups_live() {
        let resolver = StaticResolver::new();
        resolver.set("a.svc", [v4(1)]);
        resolver.set("b.svc", [v4(2)]);
        let a = group("a", "http://a.svc:8000", 3_600_000);
        let b = group("b", "http://b.svc:9000", 3_600_000);
        let discovery = Discovery::start(vec![a.clone()], Arc::new(resolver)).unwrap();
        assert_eq!(
            ids(&discovery.resolve_now_blocking(Duration::from_secs(5))),
            ["a-10.0.0.1-8000"]
        );
        // A new group is looked up at once, not after an hour.
        discovery.set_groups(vec![a.clone(), b.clone()]);
        let members = poll_until(&discovery, |m| m.len() == 2);
        assert_eq!(ids(&members), ["a-10.0.0.1-8000", "b-10.0.0.2-9000"]);
        discovery.set_groups(vec![b]);
        assert_eq!(ids(&discovery.poll().unwrap()), ["b-10.0.0.2-9000"]);
        discovery.set_groups(Vec::new());
        assert_eq!(discovery.poll(), Some(Vec::new()));
        assert!(discovery
            .resolve_now_blocking(Duration::from_secs(5))
            .is_empty());
    }

    #[test]
    fn the_thread_stops_when_discovery_drops() {
        let resolver = StaticResolver::new();
        resolver.set("a.svc", [v4(1)]);
        let groups = vec![group("a", "http://a.svc:8000", 1)];
        let discovery = Discovery::start(groups, Arc::new(resolver.clone())).unwrap();
        assert_eq!(
            discovery.resolve_now_blocking(Duration::from_secs(5)).len(),
            1
        );
        drop(discovery);
        let lookups = resolver.lookups();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(resolver.lookups(), lookups);
    }

    #[test]
    fn a_blocked_lookup_blocks_neither_poll_nor_the_bounded_wait() {
        /// Blocks every lookup until the test drops its sender.
        struct Gate {
            entered: Mutex<mpsc::Sender<()>>,
            release: Mutex<mpsc::Receiver<()>>,
        }
        impl Resolver for Gate {
            fn resolve(&self, _: &str, _: u16) -> std::io::Result<Vec<SocketAddr>> {
                let _ = self.entered.lock().unwrap().send(());
                let _ = self.release.lock().unwrap().recv();
                Ok(Vec::new())
            }
        }
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let gate = Gate {
            entered: Mutex::new(entered_tx),
            release: Mutex::new(release_rx),
        };
        let groups = vec![group("a", "http://a.svc:8000", 3_600_000)];
        let discovery = Discovery::start(groups, Arc::new(gate)).unwrap();
        entered_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        // The lookup is stuck in the resolver: both calls still return.
        assert_eq!(discovery.poll(), None);
        assert!(discovery
            .resolve_now_blocking(Duration::from_millis(10))
            .is_empty());
        drop(release_tx);
        drop(discovery);
    }

    #[test]
    fn system_resolver_reads_ip_literals() {
        let found = super::SystemResolver.resolve("127.0.0.1", 8000).unwrap();
        assert_eq!(
            found,
            [SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8000)]
        );
        let found = super::SystemResolver.resolve("::1", 8000).unwrap();
        assert_eq!(
            found,
            [SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 8000)]
        );
    }
}
