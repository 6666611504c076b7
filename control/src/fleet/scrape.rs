//! Scraping an engine's `/metrics` page into a load report, and logging answer transitions.
//!
//! [`scrape`] fetches the page with [`crate::fleet::probe::http_get`] (bounded in time and size) and
//! parses it with [`crate::fleet::engine_load::parse`]; every result is one [`ScrapeOutcome`].
//! [`AnswerLog`] is the pure tracker that makes a replica which stops answering produce one log
//! line at the transition, not one per failed attempt.

use crate::fleet::engine_load::{self, EngineLoad};
use crate::fleet::probe::{http_get_reusing, ProbeError};
use monoio::net::TcpStream;
use std::net::SocketAddr;
use std::time::Duration;

/// Largest `/metrics` page accepted, in bytes (a real vLLM page is about 60 KiB).
pub const PAGE_CAP: usize = 4 * 1024 * 1024;

/// What one scrape produced.
#[derive(Debug, Clone, PartialEq)]
pub enum ScrapeOutcome {
    /// The page answered 200 and parsed into a load report.
    Report(EngineLoad),
    /// The engine answered, but not with a usable page: a status other than 200, or a page
    /// without the required families (the text names them) or of no known engine.
    Unreadable(String),
    /// No complete answer: connect failure, timeout, oversized page, protocol error, close.
    Failed(ProbeError),
}

impl ScrapeOutcome {
    /// True for [`ScrapeOutcome::Report`].
    pub fn is_report(&self) -> bool {
        matches!(self, ScrapeOutcome::Report(_))
    }

    /// A short description for logs: "report", the unreadable reason, or the failure.
    pub fn describe(&self) -> String {
        match self {
            ScrapeOutcome::Report(_) => "report".to_string(),
            ScrapeOutcome::Unreadable(why) => why.clone(),
            ScrapeOutcome::Failed(err) => err.to_string(),
        }
    }
}

/// GETs `/metrics` from `addr` (with `Host: authority`) within `timeout`, keeping at most `cap`
/// bytes, and parses it. `conn` is the scrape loop's kept connection (see
/// [`http_get_reusing`]): reused when the engine keeps it open, replaced when it does not.
/// Never panics; every failure is an outcome.
pub async fn scrape(
    conn: &mut Option<TcpStream>,
    addr: SocketAddr,
    authority: &str,
    timeout: Duration,
    cap: usize,
) -> ScrapeOutcome {
    match http_get_reusing(conn, addr, authority, "/metrics", timeout, cap).await {
        Err(err) => ScrapeOutcome::Failed(err),
        Ok(fetched) if fetched.status != 200 => {
            ScrapeOutcome::Unreadable(format!("/metrics answered status {}", fetched.status))
        }
        Ok(fetched) => match engine_load::parse(&fetched.body) {
            Ok(load) => ScrapeOutcome::Report(load),
            Err(err) => ScrapeOutcome::Unreadable(err.to_string()),
        },
    }
}

/// Per-replica, per-endpoint tracker of whether the replica answers, so that logging happens
/// once per transition.
///
/// Starts in the answering state: the first failure logs, repeated failures do not, the first
/// success after a failure logs the recovery, repeated successes do not.
#[derive(Debug, Clone)]
pub struct AnswerLog {
    replica: String,
    endpoint: String,
    answering: bool,
}

impl AnswerLog {
    /// A tracker for `replica`'s `endpoint` (e.g. "/metrics"), in the answering state.
    pub fn new(replica: &str, endpoint: &str) -> AnswerLog {
        AnswerLog {
            replica: replica.to_string(),
            endpoint: endpoint.to_string(),
            answering: true,
        }
    }

    /// Whether the last observation was an answer (true before any observation).
    pub fn answering(&self) -> bool {
        self.answering
    }

    /// Records one attempt; returns the line to log when the state changed, else `None`.
    /// `what` is the failure reason, used only on the answering-to-not transition.
    pub fn observe(&mut self, answered: bool, what: &str) -> Option<String> {
        if answered == self.answering {
            return None;
        }
        self.answering = answered;
        Some(if answered {
            format!(
                "inferrail: replica {} answers {} again",
                self.replica, self.endpoint
            )
        } else {
            format!(
                "inferrail: replica {} stopped answering {}: {what}",
                self.replica, self.endpoint
            )
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fleet::engine_load::EngineKind;
    use crate::fleet::probe::tests::{read_request, run, TestEngine};
    use std::io::Write;

    /// Lines 55-114 and 552-554 of a vLLM 0.32 `/metrics` page captured from a live engine
    /// (/work/shared/fixtures/vllm/metrics/60_metrics_after.body). The engine was idle, so the
    /// tests substitute running/waiting values where they need non-zero ones.
    const VLLM_PAGE: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
# HELP vllm:num_requests_waiting_by_reason Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="capacity"} 0.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="deferred"} 0.0
# HELP vllm:engine_sleep_state Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.
# TYPE vllm:engine_sleep_state gauge
vllm:engine_sleep_state{engine="0",model_name="tiny",sleep_state="awake"} 1.0
vllm:engine_sleep_state{engine="0",model_name="tiny",sleep_state="weights_offloaded"} 0.0
vllm:engine_sleep_state{engine="0",model_name="tiny",sleep_state="discard_all"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 6937.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="tiny"} 1.796014363261936e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 832.0
# HELP vllm:prefix_cache_hits_created Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_created gauge
vllm:prefix_cache_hits_created{engine="0",model_name="tiny"} 1.7960143632619493e+09
# HELP vllm:external_prefix_cache_queries_total External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.
# TYPE vllm:external_prefix_cache_queries_total counter
vllm:external_prefix_cache_queries_total{engine="0",model_name="tiny"} 0.0
# HELP vllm:external_prefix_cache_queries_created External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.
# TYPE vllm:external_prefix_cache_queries_created gauge
vllm:external_prefix_cache_queries_created{engine="0",model_name="tiny"} 1.7960143632619636e+09
# HELP vllm:external_prefix_cache_hits_total External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.
# TYPE vllm:external_prefix_cache_hits_total counter
vllm:external_prefix_cache_hits_total{engine="0",model_name="tiny"} 0.0
# HELP vllm:external_prefix_cache_hits_created External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.
# TYPE vllm:external_prefix_cache_hits_created gauge
vllm:external_prefix_cache_hits_created{engine="0",model_name="tiny"} 1.7960143632619767e+09
# HELP vllm:mm_cache_queries_total Multi-modal cache queries, in terms of number of queried items.
# TYPE vllm:mm_cache_queries_total counter
vllm:mm_cache_queries_total{engine="0",model_name="tiny"} 0.0
# HELP vllm:mm_cache_queries_created Multi-modal cache queries, in terms of number of queried items.
# TYPE vllm:mm_cache_queries_created gauge
vllm:mm_cache_queries_created{engine="0",model_name="tiny"} 1.7960143632619884e+09
# HELP vllm:mm_cache_hits_total Multi-modal cache hits, in terms of number of cached items.
# TYPE vllm:mm_cache_hits_total counter
vllm:mm_cache_hits_total{engine="0",model_name="tiny"} 0.0
# HELP vllm:mm_cache_hits_created Multi-modal cache hits, in terms of number of cached items.
# TYPE vllm:mm_cache_hits_created gauge
vllm:mm_cache_hits_created{engine="0",model_name="tiny"} 1.7960143632662234e+09
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 0.0
# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_created gauge
vllm:num_preemptions_created{engine="0",model_name="tiny"} 1.7960143632662709e+09
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{_block_size_resolved="True",block_size="32",cache_dtype="auto",cache_hit_alignment_tokens="None",effective_attention_block_size="32",enable_mamba_shared_prefix_checkpoint="False",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.92",hash_block_size="None",is_attention_free="False",kv_cache_dtype_skip_layers="[]",kv_cache_layout="None",kv_cache_max_concurrency="2.0",kv_cache_memory_bytes="1073741824",kv_cache_size_tokens="4096",kv_offloading_backend="native",kv_offloading_size="None",kv_sharing_fast_prefill="False",mamba_block_size="None",mamba_cache_dtype="auto",mamba_cache_mode="none",mamba_page_size_padded="None",mamba_ssm_cache_dtype="float32",num_cpu_blocks="None",num_gpu_blocks="128",num_gpu_blocks_override="128",prefix_cache_retention_interval="0",prefix_caching_hash_algo="sha256",prefix_match_unit="None",replayssm_buffer_len="16",skip_page_size_padded="None",sliding_window="None",swa_bounded_replay="True",use_kda_recoverssm="False",use_replayssm="False",user_specified_block_size="True"} 1.0
"#;

    /// The captured page with 3 running and 2 waiting requests.
    pub(crate) fn busy_page() -> String {
        VLLM_PAGE
            .replace(
                "vllm:num_requests_running{engine=\"0\",model_name=\"tiny\"} 0.0",
                "vllm:num_requests_running{engine=\"0\",model_name=\"tiny\"} 3.0",
            )
            .replace(
                "vllm:num_requests_waiting{engine=\"0\",model_name=\"tiny\"} 0.0",
                "vllm:num_requests_waiting{engine=\"0\",model_name=\"tiny\"} 2.0",
            )
    }

    /// An engine answering every request with `status` and `page` (content-length framed).
    fn serving(status: u16, page: String) -> TestEngine {
        TestEngine::start(move |mut s| {
            read_request(&mut s);
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{page}",
                page.len()
            );
        })
    }

    fn scrape_once(engine: &TestEngine) -> ScrapeOutcome {
        run(scrape(
            &mut None,
            engine.addr,
            "engine-1:8000",
            Duration::from_secs(5),
            PAGE_CAP,
        ))
    }

    #[test]
    fn vllm_page_gives_a_report() {
        let engine = serving(200, busy_page());
        match scrape_once(&engine) {
            ScrapeOutcome::Report(load) => {
                assert_eq!(load.engine, EngineKind::Vllm);
                assert_eq!(load.running, 3.0);
                assert_eq!(load.waiting, 2.0);
                assert_eq!(load.prefix_cache_queries, 6937.0);
                assert_eq!(load.prefix_cache_hits, 832.0);
                assert_eq!(load.kv_capacity_blocks, Some(128));
            }
            other => panic!("expected a report, got {other:?}"),
        }
    }

    #[test]
    fn page_missing_a_family_is_unreadable_and_names_it() {
        let page: String = busy_page()
            .lines()
            .filter(|l| !l.starts_with("vllm:num_requests_waiting{"))
            .map(|l| format!("{l}\n"))
            .collect();
        let engine = serving(200, page);
        match scrape_once(&engine) {
            ScrapeOutcome::Unreadable(why) => {
                assert!(why.contains("vllm:num_requests_waiting"), "{why}");
                assert!(!why.contains("vllm:num_requests_running"), "{why}");
            }
            other => panic!("expected unreadable, got {other:?}"),
        }
    }

    #[test]
    fn non_200_is_unreadable() {
        let engine = serving(503, busy_page());
        match scrape_once(&engine) {
            ScrapeOutcome::Unreadable(why) => assert!(why.contains("503"), "{why}"),
            other => panic!("expected unreadable, got {other:?}"),
        }
    }

    #[test]
    fn oversized_page_fails() {
        let engine = TestEngine::start(|mut s| {
            read_request(&mut s);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
                PAGE_CAP + 1
            );
        });
        assert_eq!(
            scrape_once(&engine),
            ScrapeOutcome::Failed(ProbeError::TooLarge { cap: PAGE_CAP })
        );
    }

    #[test]
    fn answer_log_logs_once_per_transition() {
        let mut log = AnswerLog::new("engine-1", "/metrics");
        assert!(log.answering());
        assert_eq!(log.observe(true, "report"), None);
        assert_eq!(
            log.observe(false, "timeout").as_deref(),
            Some("inferrail: replica engine-1 stopped answering /metrics: timeout")
        );
        assert!(!log.answering());
        assert_eq!(log.observe(false, "timeout"), None);
        assert_eq!(log.observe(false, "connect failed: refused"), None);
        assert_eq!(
            log.observe(true, "report").as_deref(),
            Some("inferrail: replica engine-1 answers /metrics again")
        );
        assert_eq!(log.observe(true, "report"), None);
        assert!(log.observe(false, "closed").is_some());
    }

    #[test]
    fn answer_log_first_failure_logs() {
        let mut log = AnswerLog::new("engine-2", "/health");
        assert_eq!(
            log.observe(false, "status 503").as_deref(),
            Some("inferrail: replica engine-2 stopped answering /health: status 503")
        );
    }
}
