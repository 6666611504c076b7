//! `inferrail-bench run`: a named workload sent open loop, measured the way a streaming client
//! experiences it.
//!
//! Every request streams (`"stream": true` and `stream_options.include_usage`). Its times count
//! from its *scheduled* send time, so a generator or a target that falls behind shows up in the
//! figures instead of hiding (coordinated omission): TTFT (to the first SSE event carrying a
//! token), end-to-end latency, the gaps between content events (ITL), TPOT from the usage
//! chunk's `completion_tokens`, and send lag (actual minus scheduled send). The pacer and the
//! connection pool are `load`'s.
//!
//! Multi-turn workloads (W2, W3): each conversation's first turn follows the arrival schedule;
//! each later turn is scheduled `think_time` after the previous turn's response completed (closed
//! loop within a conversation). A failed turn ends its conversation, and a turn that would be
//! scheduled after the end of the run is not sent; both are counted as `turns_skipped`.

mod args;
mod drive;
mod observe;
mod summary;

pub use args::{parse_arrival_kind, parse_run_args, RunArgs, RunConfig, Slo, RUN_USAGE};
pub use drive::run_workload;
pub use observe::{
    classify_event, tpot, Failure, Sample, TokenUsage, CACHED_TOKENS_HEADER, PROMPT_TOKENS_HEADER,
    REPLICA_HEADER,
};
pub use summary::{
    classify, Accuracy, Dist, Goodput, Prediction, Recorder, Replicas, RunErrors, RunFacts,
    RunReport, Samples, Throughput, UsageTotals, WarmupCounts,
};
