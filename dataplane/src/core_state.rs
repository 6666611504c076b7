//! The state one data core owns: its current snapshot, per-replica load and breaker counts,
//! routing policy objects, idle upstream connections, random numbers and request ids.
//!
//! Everything here is `Rc`/`Cell`/`RefCell`: it is only ever touched by its own core's thread,
//! and no `RefCell` borrow is held across an `.await`.

use crate::metrics::{CoreRecorder, MetricsLayout};
use crate::policy::{self, Candidate, RoutingPolicy};
use crate::pool::IdlePool;
use crate::rng::Rng;
use crate::shutdown::ShutdownSignal;
use crate::snapshot::{core_share, Snapshot};
use inferrail_sync::Mailbox;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::Arc;

/// One replica as seen by one core.
#[derive(Debug)]
pub struct ReplicaState {
    /// Replica id (matches the snapshot entry).
    pub id: String,
    /// Requests this core has in flight to the replica.
    pub in_flight: Cell<u32>,
    /// Requests this core has waiting for the replica's response head.
    pub pending: Cell<u32>,
    /// This core's share of the replica's `max_concurrency`.
    pub cap_in_flight: Cell<u32>,
    /// This core's share of the replica's `max_pending`.
    pub cap_pending: Cell<u32>,
    /// Idle keep-alive connections to the replica.
    pub pool: IdlePool,
    /// Index of the replica in the metrics layout, if it has one.
    pub metrics_slot: Option<usize>,
}

impl ReplicaState {
    /// True when one more request fits under both of this core's caps.
    pub fn has_room(&self) -> bool {
        self.in_flight.get() < self.cap_in_flight.get()
            && self.pending.get() < self.cap_pending.get()
    }
}

/// Holds one request's slot on a replica: counted in flight (and pending until the response head
/// arrives). Dropping it releases whatever it still holds.
pub struct ReplicaSlot {
    replica: Rc<ReplicaState>,
    recorder: Arc<CoreRecorder>,
    pending: bool,
}

impl ReplicaSlot {
    /// The response head arrived: the request no longer counts as pending.
    pub fn head_received(&mut self) {
        if self.pending {
            self.pending = false;
            self.replica.pending.set(self.replica.pending.get() - 1);
        }
    }

    /// The replica this slot is on.
    pub fn replica(&self) -> &Rc<ReplicaState> {
        &self.replica
    }
}

impl Drop for ReplicaSlot {
    fn drop(&mut self) {
        self.head_received();
        self.replica.in_flight.set(self.replica.in_flight.get() - 1);
        if let Some(slot) = self.replica.metrics_slot {
            self.recorder.in_flight(slot, -1);
        }
    }
}

/// Everything one core owns. Shared by the core's connection tasks through `Rc`.
pub struct CoreContext {
    /// This core's index, `0..cores`.
    pub index: usize,
    /// Number of data cores.
    pub cores: usize,
    snapshot: RefCell<Arc<Snapshot>>,
    mailbox: Arc<Mailbox<Snapshot>>,
    replicas: RefCell<Vec<Rc<ReplicaState>>>,
    policies: RefCell<Vec<Box<dyn RoutingPolicy>>>,
    rng: RefCell<Rng>,
    /// This core's metrics recorder.
    pub recorder: Arc<CoreRecorder>,
    layout: Arc<MetricsLayout>,
    /// Fired when the gateway shuts down.
    pub shutdown: Arc<ShutdownSignal>,
    /// Requests being handled on this core now.
    pub active_requests: Cell<usize>,
    ids: RefCell<Rng>,
    /// Open client connections: socket and whether a request is in progress on it.
    connections: RefCell<HashMap<u64, (RawFd, bool)>>,
    next_connection: Cell<u64>,
}

/// Keeps a client connection registered with its core while it lives.
pub struct ConnectionEntry {
    ctx: Rc<CoreContext>,
    id: u64,
}

impl ConnectionEntry {
    /// Marks whether a request is in progress (busy connections are left to finish at shutdown).
    pub fn set_busy(&self, busy: bool) {
        if let Some(entry) = self.ctx.connections.borrow_mut().get_mut(&self.id) {
            entry.1 = busy;
        }
        let active = &self.ctx.active_requests;
        active.set(if busy {
            active.get() + 1
        } else {
            active.get() - 1
        });
    }
}

impl Drop for ConnectionEntry {
    fn drop(&mut self) {
        self.ctx.connections.borrow_mut().remove(&self.id);
    }
}

impl CoreContext {
    /// A core context starting from `snapshot`, taking later ones from `mailbox`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: usize,
        cores: usize,
        snapshot: Arc<Snapshot>,
        mailbox: Arc<Mailbox<Snapshot>>,
        recorder: Arc<CoreRecorder>,
        layout: Arc<MetricsLayout>,
        shutdown: Arc<ShutdownSignal>,
        seed: u64,
        id_seed: u64,
    ) -> CoreContext {
        let ctx = CoreContext {
            index,
            cores,
            snapshot: RefCell::new(snapshot.clone()),
            mailbox,
            replicas: RefCell::new(Vec::new()),
            policies: RefCell::new(Vec::new()),
            rng: RefCell::new(Rng::new(seed ^ (index as u64).wrapping_mul(0x9E37_79B9))),
            recorder,
            layout,
            shutdown,
            active_requests: Cell::new(0),
            ids: RefCell::new(Rng::new(id_seed)),
            connections: RefCell::new(HashMap::new()),
            next_connection: Cell::new(0),
        };
        ctx.adopt(snapshot);
        ctx
    }

    /// The snapshot to use for a new request: the latest one the control thread published.
    /// Costs one atomic load when nothing new arrived.
    pub fn current(&self) -> Arc<Snapshot> {
        if let Some(newer) = self.mailbox.take() {
            self.adopt(newer);
        }
        self.snapshot.borrow().clone()
    }

    /// Rebuilds per-replica state for `snap`, keeping the counts and pools of replicas that stay.
    fn adopt(&self, snap: Arc<Snapshot>) {
        let old: Vec<Rc<ReplicaState>> = std::mem::take(&mut *self.replicas.borrow_mut());
        let replicas = snap
            .replicas
            .iter()
            .map(|r| {
                let state = old
                    .iter()
                    .find(|o| o.id == r.id)
                    .cloned()
                    .unwrap_or_else(|| {
                        Rc::new(ReplicaState {
                            id: r.id.clone(),
                            in_flight: Cell::new(0),
                            pending: Cell::new(0),
                            cap_in_flight: Cell::new(0),
                            cap_pending: Cell::new(0),
                            pool: IdlePool::default(),
                            metrics_slot: self.layout.replicas.iter().position(|id| *id == r.id),
                        })
                    });
                state
                    .cap_in_flight
                    .set(core_share(r.max_concurrency, self.cores, self.index));
                state
                    .cap_pending
                    .set(core_share(r.max_pending, self.cores, self.index));
                state
            })
            .collect();
        *self.replicas.borrow_mut() = replicas;
        let policies = snap
            .models
            .iter()
            .map(|m| policy::build(m.policy).unwrap_or_else(|| Box::new(policy::LeastRequest)))
            .collect();
        *self.policies.borrow_mut() = policies;
        *self.snapshot.borrow_mut() = snap;
    }

    /// The state of replica `index` in the current snapshot.
    pub fn replica(&self, index: usize) -> Option<Rc<ReplicaState>> {
        self.replicas.borrow().get(index).cloned()
    }

    /// Replicas serving `model` that have room on this core, skipping `tried` unless every
    /// replica with room was tried already.
    pub fn candidates(&self, snap: &Snapshot, model: usize, tried: &[usize]) -> Vec<Candidate> {
        let replicas = self.replicas.borrow();
        let mut candidates: Vec<Candidate> = snap.models[model]
            .replicas
            .iter()
            .filter_map(|&i| {
                let r = replicas.get(i)?;
                r.has_room().then(|| Candidate {
                    replica: i,
                    in_flight: r.in_flight.get(),
                    pending: r.pending.get(),
                })
            })
            .collect();
        if candidates.iter().any(|c| !tried.contains(&c.replica)) {
            candidates.retain(|c| !tried.contains(&c.replica));
        }
        candidates
    }

    /// Asks `model`'s policy to choose among `candidates` (non-empty); returns the replica index.
    pub fn choose(&self, model: usize, candidates: &[Candidate]) -> usize {
        let mut policies = self.policies.borrow_mut();
        let mut rng = self.rng.borrow_mut();
        let i = match policies.get_mut(model) {
            Some(p) => {
                let i = p.pick(candidates, &mut rng);
                self.recorder.decision(model, p.kind());
                i
            }
            None => 0,
        };
        candidates[i.min(candidates.len() - 1)].replica
    }

    /// Takes a slot on replica `index` (in flight and pending). The caller checked `has_room`.
    pub fn acquire(&self, index: usize) -> Option<ReplicaSlot> {
        let replica = self.replica(index)?;
        replica.in_flight.set(replica.in_flight.get() + 1);
        replica.pending.set(replica.pending.get() + 1);
        if let Some(slot) = replica.metrics_slot {
            self.recorder.in_flight(slot, 1);
        }
        Some(ReplicaSlot {
            replica,
            recorder: self.recorder.clone(),
            pending: true,
        })
    }

    /// Registers a client connection's socket until the returned entry is dropped.
    pub fn register_connection(self: &Rc<Self>, fd: RawFd) -> ConnectionEntry {
        let id = self.next_connection.get();
        self.next_connection.set(id + 1);
        self.connections.borrow_mut().insert(id, (fd, false));
        ConnectionEntry {
            ctx: self.clone(),
            id,
        }
    }

    /// Open client connections on this core.
    pub fn connection_count(&self) -> usize {
        self.connections.borrow().len()
    }

    /// Shuts down the sockets of open client connections (only idle ones unless `busy_too`), so
    /// their tasks wake up, finish and close them.
    pub fn close_connections(&self, busy_too: bool) {
        for (fd, busy) in self.connections.borrow().values() {
            if busy_too || !busy {
                crate::sockets::shutdown_socket(*fd);
            }
        }
    }

    /// A fresh request id: 32 lowercase hex digits, like vLLM's.
    pub fn new_request_id(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut ids = self.ids.borrow_mut();
        let mut id = String::with_capacity(32);
        for word in [ids.next_u64(), ids.next_u64()] {
            for shift in (0..16).rev() {
                id.push(char::from(HEX[((word >> (shift * 4)) & 0xf) as usize]));
            }
        }
        id
    }
}
