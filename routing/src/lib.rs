//! Inferrail's routing brain as a pure library: the policies, pricing and guards, sessions and
//! hot prefixes, candidates, split arms and the seeded RNG, over the fleet facts a decision reads.
//!
//! It owns what a decision is: [`offer::candidate`] builds the candidates, [`brain::decide`]
//! chooses among them, [`brain::commit`] records what the choice changes in the [`FleetFacts`].
//! The data plane, the control thread's explain/shadow/replay and the fleet simulation all call
//! these same functions. It must never do I/O, open a socket, spawn or block a thread, or read
//! a clock: a decision's time is an argument (`RouteInput::now_micros`), so the same inputs and
//! seed always decide the same. Unchecked (non-borrow-checked) code is forbidden outright by the
//! crate's lint table in routing/Cargo.toml.
//!
//! Modules import one way: plain data ([`candidate`], [`cost`], [`decision`], [`input`],
//! [`fleet`], [`rng`]) <- [`rendezvous`] and the [`policy`] contract <- [`policies`] <- the
//! [`brain`] (whose tests use everything).
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

pub mod brain;
pub mod candidate;
pub mod cost;
pub mod decision;
pub mod fleet;
pub mod input;
pub mod offer;
pub mod policies;
pub mod policy;
pub mod rendezvous;
pub mod rng;
pub mod split;

pub use candidate::{Candidate, EngineView, PoolRoom};
pub use cost::Estimate;
pub use decision::{Decision, Guard, HotRoot, Pick, Row, Steering, Term};
pub use fleet::FleetFacts;
pub use inferrail_config::CostModelParams;
pub use inferrail_sync::BlockHash;
pub use input::{BrainParams, PromptView, RouteInput};
pub use policy::RoutingPolicy;
pub use rng::Rng;
