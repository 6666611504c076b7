//! The admin port: its listener and routes ([`listener`]), the JSON views of the fleet and the
//! live-config endpoints ([`api`]), `/admin/explain` ([`explain`]) and the control thread's own
//! metric families ([`metrics`]).

pub mod api;
pub mod explain;
pub mod listener;
pub mod metrics;
pub mod response;
