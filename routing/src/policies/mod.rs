//! Every routing policy and [`build`], which makes the one a config names: the load-based
//! [`baselines`] and the [`cache_aware`] ones (which read the brain's priced rows).

pub mod baselines;
pub mod cache_aware;
#[cfg(test)]
mod tests;

pub use baselines::{LeastRequest, PowerOfTwo, Random, RoundRobin};
pub use cache_aware::{CostModel, KvAware, PrefixHash};

use crate::policy::RoutingPolicy;
use inferrail_config::PolicyKind;

/// The policy object for `kind`.
pub fn build(kind: PolicyKind) -> Box<dyn RoutingPolicy> {
    match kind {
        PolicyKind::RoundRobin => Box::new(RoundRobin::default()),
        PolicyKind::Random => Box::new(Random),
        PolicyKind::LeastRequest => Box::new(LeastRequest),
        PolicyKind::P2c => Box::new(PowerOfTwo),
        PolicyKind::PrefixHash => Box::new(PrefixHash),
        PolicyKind::KvAware => Box::new(KvAware),
        PolicyKind::CostModel => Box::new(CostModel),
    }
}
