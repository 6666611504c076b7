//! The benchmark harness of Inferrail.
//!
//! This crate owns the open-loop load generator (`load`, driven by `perf/overhead`), the
//! concurrent-streams client (`streams`, driven by `perf/sim-capacity`), the seeded workloads and
//! their runner (`run`), fair comparisons on fresh fleets with peers (`compare`, `sweep`) and the
//! report built from their result files (`report`). The generator schedules requests at fixed times and
//! sends each at its time whatever earlier ones are doing, so queueing in the target cannot hide;
//! latency counts from the scheduled time and the generator's own lateness is reported as send lag.
//! It must never link the gateway's crates (dataplane, control) into the measured path: it talks
//! to its target over sockets only, like any client.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

pub mod args;
pub mod arrivals;
mod conn;
pub mod harness;
mod pacer;
mod pool;
pub mod progress;
pub mod report;
pub mod report_md;
pub mod run;
pub mod schedule;
mod sse;
pub mod streams;
pub mod workload;
pub mod workload_run;

pub use args::{parse_load_args, ArgsError, LoadArgs, LoadConfig, Target, LOAD_USAGE};
pub use report::Report;
pub use run::{run, LoadError};
pub use schedule::{Arrivals, Schedule};
pub use sse::SseSummary;
pub use streams::{
    parse_streams_args, run_streams, StreamsArgs, StreamsConfig, StreamsError, StreamsReport,
    STREAMS_USAGE,
};
pub use workload_run::{parse_run_args, run_workload, RunArgs, RunConfig, RunReport, RUN_USAGE};
