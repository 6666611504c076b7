//! Integration tests: real gateways and in-process engines on 127.0.0.1.

mod bodies;
mod brain_fleet;
mod brain_routing;
mod breakers;
mod calibrate;
mod cli;
mod disconnect;
mod errors;
mod exchange;
mod fleet;
mod kv_events;
mod kv_tiers;
mod lifecycle;
mod live;
mod module_graph;
mod observability;
mod prediction;
mod retries;
mod routing;
mod streaming;
mod tokenization;
