//! Parity of `inferrail_sim::prom` with a real vLLM 0.32 engine's `/metrics` pages
//! (`tests/fixtures/vllm_metrics_*.body`, copied from `/work/shared/fixtures/vllm/metrics/`).

use inferrail_sim::prom::parse::{self, Family};
use inferrail_sim::prom::{
    build_1_2_5_buckets, AdmissionRejection, CacheConfigInfo, FinishReason, FinishedRequest,
    HttpMetrics, HttpRequest, ProcessStats, SleepState, VllmMetrics, CONTENT_TYPE,
};

const BEFORE: &str = include_str!("fixtures/vllm_metrics_00_before.body");
const AFTER: &str = include_str!("fixtures/vllm_metrics_60_after.body");

/// The `vllm:` part of a fixture page: from the first `vllm:` HELP through `cache_config_info`.
fn vllm_section(page: &str) -> String {
    let start = page.find("# HELP vllm:").expect("page has vllm families");
    let info = page[start..]
        .find("\nvllm:cache_config_info{")
        .expect("cache_config_info")
        + start;
    let end = page[info + 1..].find('\n').unwrap() + info + 2;
    page[start..end].to_string()
}

/// The `process_*` part of a fixture page.
fn process_section(page: &str) -> String {
    let start = page.find("# HELP process_").unwrap();
    let end = page.find("# HELP vllm:").unwrap();
    page[start..end].to_string()
}

fn reference_metrics(created: f64) -> VllmMetrics {
    VllmMetrics::new("tiny", 0, CacheConfigInfo::new(32, 128, 2048), created)
}

/// True for a `*_created` sample line (its value is a wall-clock time that differs every run).
fn is_created_sample(line: &str) -> bool {
    !line.starts_with('#')
        && line
            .split(['{', ' '])
            .next()
            .is_some_and(|n| n.ends_with("_created"))
}

/// Compares two pages line by line, byte for byte, except the values of `_created` samples.
fn assert_same_page(got: &str, want: &str) {
    let g: Vec<&str> = got.lines().collect();
    let w: Vec<&str> = want.lines().collect();
    for (i, (gl, wl)) in g.iter().zip(&w).enumerate() {
        if is_created_sample(wl) {
            let key = |l: &str| l[..l.rfind(' ').unwrap()].to_string();
            assert_eq!(key(gl), key(wl), "line {}: _created series differs", i + 1);
        } else {
            assert_eq!(gl, wl, "line {} differs", i + 1);
        }
    }
    assert_eq!(g.len(), w.len(), "line counts differ");
    assert!(got.ends_with('\n'));
}

/// Observations that land in the fixture's buckets and add up, in order, to exactly its sum.
fn observations_for(family: &Family) -> Vec<f64> {
    let bounds: Vec<f64> = family
        .bucket_bounds()
        .iter()
        .map(|b| parse::parse_value(b).unwrap())
        .collect();
    let bucket = format!("{}_bucket", family.name);
    let cumulative: Vec<u64> = family
        .samples
        .iter()
        .filter(|s| s.name == bucket)
        .map(|s| parse::parse_value(&s.value).unwrap() as u64)
        .collect();
    let sum_name = format!("{}_sum", family.name);
    let target = family
        .samples
        .iter()
        .find(|s| s.name == sum_name)
        .map(|s| parse::parse_value(&s.value).unwrap())
        .unwrap();
    // Bucket i holds values in (lo, hi]; the first includes 0, +Inf is treated as (lo, 2 lo].
    let mut spans = Vec::new();
    let mut prev = 0;
    for (i, c) in cumulative.iter().enumerate() {
        let lo = if i == 0 { 0.0 } else { bounds[i - 1] };
        let hi = if bounds[i].is_finite() {
            bounds[i]
        } else {
            lo * 2.0
        };
        spans.push((lo, hi, c - prev));
        prev = *c;
    }
    let base: f64 = spans.iter().map(|(lo, _, n)| lo * *n as f64).sum();
    let width: f64 = spans.iter().map(|(lo, hi, n)| (hi - lo) * *n as f64).sum();
    let t = if width > 0.0 {
        ((target - base) / width).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let mut values: Vec<f64> = spans
        .iter()
        .flat_map(|(lo, hi, n)| std::iter::repeat_n(lo + t * (hi - lo), *n as usize))
        .collect();
    let Some(last) = values.pop() else {
        return values;
    };
    let partial = values.iter().fold(0.0, |acc, v| acc + v);
    let mut fix = target - partial;
    let mut tries = 0;
    while partial + fix != target {
        fix = if partial + fix < target {
            fix.next_up()
        } else {
            fix.next_down()
        };
        tries += 1;
        assert!(tries < 1000, "{}: cannot hit the sum exactly", family.name);
    }
    let bucket_of = |v: f64| bounds.iter().position(|b| v <= *b).unwrap();
    assert_eq!(
        bucket_of(fix),
        bucket_of(last),
        "{}: fix-up left its bucket",
        family.name
    );
    values.push(fix);
    values
}

/// The engine-side updates that reproduce the final fixture page's values.
fn replay_after_page(m: &mut VllmMetrics) {
    m.inc_prefix_cache(6937, 832);
    m.inc_prompt_tokens_local(6111, 832);
    m.inc_generation_tokens(128);
    for _ in 0..32 {
        m.inc_request_success(FinishReason::Length);
    }
    let fixture = parse::parse(&vllm_section(AFTER)).unwrap();
    for family in fixture.iter().filter(|f| f.kind == "histogram") {
        let h = m
            .histogram_mut(&family.name)
            .expect("every fixture histogram is modelled");
        for v in observations_for(family) {
            h.observe(v);
        }
    }
}

#[test]
fn prom_fresh_page_matches_vllm_before_traffic() {
    let m = reference_metrics(1.796014363261697e9);
    assert_same_page(&m.render(), &vllm_section(BEFORE));
}

#[test]
fn prom_page_after_traffic_matches_vllm_byte_for_byte() {
    let mut m = reference_metrics(1.796014363261697e9);
    replay_after_page(&mut m);
    assert_same_page(&m.render(), &vllm_section(AFTER));
}

#[test]
fn prom_family_parity_names_help_types_labels_buckets_and_order() {
    let got = parse::validate(&reference_metrics(0.0).render()).unwrap();
    let want = parse::validate(&vllm_section(AFTER)).unwrap();
    let names = |fs: &[Family]| fs.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&got), names(&want), "same families in the same order");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((&g.help, &g.kind), (&w.help, &w.kind), "{}", w.name);
        assert_eq!(g.bucket_bounds(), w.bucket_bounds(), "{} buckets", w.name);
        let series = |f: &Family| {
            f.samples
                .iter()
                .map(|s| {
                    (
                        s.name.clone(),
                        s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect(),
                    )
                })
                .collect::<Vec<(String, Vec<String>)>>()
        };
        assert_eq!(series(g), series(w), "{} series and label order", w.name);
    }
    // Every counter and histogram is followed by its `_created` gauge family.
    for (i, f) in got.iter().enumerate() {
        if f.kind == "counter" || f.kind == "histogram" {
            let base = f
                .name
                .strip_suffix("_total")
                .filter(|_| f.kind == "counter");
            let created = format!("{}_created", base.unwrap_or(&f.name));
            assert_eq!(got[i + 1].name, created);
            assert_eq!(got[i + 1].kind, "gauge");
            assert_eq!(got[i + 1].help, f.help);
        }
    }
}

#[test]
fn prom_render_is_valid_prometheus_text_under_load() {
    let mut m = VllmMetrics::new("m", 3, CacheConfigInfo::new(16, 1000, 8192), 1.7e9);
    m.set_running(7);
    m.set_waiting_by_reason(4, 1);
    m.set_kv_cache_usage(0.4375);
    m.inc_preemptions(2);
    m.inc_admission_rejection(AdmissionRejection::MaxNumQueuedTokens);
    for i in 0..500u64 {
        let x = i as f64;
        m.observe_ttft(x * 0.013);
        m.observe_inter_token_latency(x * 0.0007);
        m.observe_iteration_tokens(i * 37 % 20000);
        m.observe_parent_finished(1 + i % 3, i % 50);
        m.observe_finished(&FinishedRequest {
            finish_reason: FinishReason::ALL[i as usize % 5],
            arrival_ts: 100.0,
            finished_ts: 100.0 + x,
            queued_ts: 50.0,
            scheduled_ts: 50.0 + x * 0.1,
            first_token_ts: 50.0 + x * 0.2,
            last_token_ts: 50.0 + x * 0.9,
            num_prompt_tokens: i * 13,
            num_generation_tokens: i % 40,
            num_cached_tokens: i * 5,
            num_preemptions: i % 30,
            max_tokens_param: (i % 2 == 0).then_some(i),
        });
    }
    let page = m.render();
    let families = parse::validate(&page).unwrap();
    for f in &families {
        assert!(f.name.starts_with("vllm:"));
        for s in &f.samples {
            let want_engine = if f.name.starts_with("vllm:admission_rejections") {
                None
            } else {
                Some("3")
            };
            assert_eq!(s.label("engine"), want_engine, "{}", s.line);
            // vLLM's cache_config_info has no model_name label.
            let want_model = if f.name == "vllm:cache_config_info" {
                None
            } else {
                Some("m")
            };
            assert_eq!(s.label("model_name"), want_model, "{}", s.line);
            let names = s.label_names();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            assert_eq!(names, sorted, "labels sorted by name: {}", s.line);
        }
    }
    let get = |line_start: &str| {
        page.lines()
            .find(|l| l.starts_with(line_start))
            .unwrap_or_else(|| panic!("{line_start}"))
            .to_string()
    };
    assert_eq!(
        get("vllm:num_requests_waiting{"),
        "vllm:num_requests_waiting{engine=\"3\",model_name=\"m\"} 5.0"
    );
    assert_eq!(
        get("vllm:kv_cache_usage_perc{"),
        "vllm:kv_cache_usage_perc{engine=\"3\",model_name=\"m\"} 0.4375"
    );
    assert_eq!(
        get("vllm:e2e_request_latency_seconds_count"),
        "vllm:e2e_request_latency_seconds_count{engine=\"3\",model_name=\"m\"} 500.0"
    );
    assert_eq!(
        get("vllm:request_params_max_tokens_count"),
        "vllm:request_params_max_tokens_count{engine=\"3\",model_name=\"m\"} 250.0"
    );
    assert_eq!(
        get("vllm:request_success_total{engine=\"3\",finished_reason=\"abort\""),
        "vllm:request_success_total{engine=\"3\",finished_reason=\"abort\",model_name=\"m\"} 100.0"
    );
    // max_model_len 8192 sizes the token histograms up to 5000.
    let prompt = families
        .iter()
        .find(|f| f.name == "vllm:request_prompt_tokens")
        .unwrap();
    assert_eq!(
        prompt.bucket_bounds().iter().rev().nth(1).unwrap(),
        "5000.0"
    );
    let info = get("vllm:cache_config_info{");
    assert!(info.contains("block_size=\"16\",") && info.contains("num_gpu_blocks=\"1000\","));
    assert!(
        info.contains("kv_cache_size_tokens=\"16000\"")
            && info.contains("kv_cache_max_concurrency=\"1.953125\"")
    );
    assert!(info.contains(",engine=\"3\","));
}

#[test]
fn prom_finished_request_observes_vllm_phase_intervals() {
    let mut m = reference_metrics(0.0);
    let r = FinishedRequest {
        finish_reason: FinishReason::Stop,
        arrival_ts: 1000.0,
        finished_ts: 1002.5,
        queued_ts: 10.0,
        scheduled_ts: 10.25,
        first_token_ts: 10.75,
        last_token_ts: 12.75,
        num_prompt_tokens: 100,
        num_generation_tokens: 5,
        num_cached_tokens: 64,
        num_preemptions: 1,
        max_tokens_param: None,
    };
    m.observe_finished(&r);
    m.observe_finished(&FinishedRequest {
        num_generation_tokens: 1,
        max_tokens_param: Some(7),
        ..r
    });
    let page = m.render();
    let value = |series: &str| {
        let line = page
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("{series}"));
        line.rsplit(' ').next().unwrap().to_string()
    };
    let sum = |h: &str| value(&format!("vllm:{h}_sum{{"));
    assert_eq!(sum("e2e_request_latency_seconds"), "5.0");
    assert_eq!(sum("request_queue_time_seconds"), "0.5");
    assert_eq!(sum("request_prefill_time_seconds"), "1.0");
    assert_eq!(sum("request_decode_time_seconds"), "4.0");
    assert_eq!(sum("request_inference_time_seconds"), "5.0");
    // decode / (generation - 1) = 2.0 / 4; a one-token request observes 0.
    assert_eq!(sum("request_time_per_output_token_seconds"), "0.5");
    assert_eq!(
        value("vllm:request_time_per_output_token_seconds_count{"),
        "2.0"
    );
    assert_eq!(sum("request_prefill_kv_computed_tokens"), "72.0");
    assert_eq!(sum("request_num_preemptions"), "2.0");
    // max_tokens is observed only when the request set it.
    assert_eq!(value("vllm:request_params_max_tokens_count{"), "1.0");
    assert_eq!(sum("request_params_max_tokens"), "7.0");
    assert_eq!(
        value("vllm:request_success_total{engine=\"0\",finished_reason=\"stop\""),
        "2.0"
    );
    // Phase histograms do not touch the per-token ones.
    assert_eq!(value("vllm:time_to_first_token_seconds_count{"), "0.0");
}

#[test]
fn prom_gauges_and_sleep_state() {
    let mut m = reference_metrics(0.0);
    m.set_running(3);
    m.set_waiting(2);
    m.set_sleep_state(SleepState::WeightsOffloaded);
    let page = m.render();
    assert!(page.contains("vllm:num_requests_running{engine=\"0\",model_name=\"tiny\"} 3.0\n"));
    assert!(page.contains("vllm:num_requests_waiting{engine=\"0\",model_name=\"tiny\"} 2.0\n"));
    assert!(page.contains(
        "vllm:num_requests_waiting_by_reason{engine=\"0\",model_name=\"tiny\",reason=\"capacity\"} 2.0\n"
    ));
    assert!(page.contains(
        "vllm:engine_sleep_state{engine=\"0\",model_name=\"tiny\",sleep_state=\"awake\"} 0.0\n\
         vllm:engine_sleep_state{engine=\"0\",model_name=\"tiny\",sleep_state=\"weights_offloaded\"} 1.0\n"
    ));
}

#[test]
fn prom_process_families_render_like_prometheus_client() {
    let stats = ProcessStats {
        virtual_memory_bytes: 4848320512.0,
        resident_memory_bytes: 1022492672.0,
        start_time_seconds: 1.79601429183e9,
        cpu_seconds_total: 12.16,
        open_fds: 34.0,
        max_fds: 20000.0,
    };
    let page = reference_metrics(0.0).render_with_process(&stats);
    let want = process_section(AFTER);
    assert!(
        page.starts_with(&want),
        "process section:\n{}",
        &page[..want.len().min(page.len())]
    );
    assert_same_page(&page[want.len()..], &vllm_section(BEFORE));
}

#[test]
fn prom_token_buckets_follow_max_model_len() {
    let want: Vec<f64> = vec![
        1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0,
    ];
    assert_eq!(build_1_2_5_buckets(2048), want);
    assert_eq!(build_1_2_5_buckets(2000), want);
    assert_eq!(build_1_2_5_buckets(1999).last(), Some(&1000.0));
    assert_eq!(build_1_2_5_buckets(0), Vec::<f64>::new());
}

#[test]
fn prom_content_type_matches_vllm_response() {
    let headers = include_str!("fixtures/vllm_metrics_60_after.headers");
    let content_type = headers
        .lines()
        .find_map(|l| l.strip_prefix("content-type: "))
        .expect("the response has a content-type");
    assert_eq!(CONTENT_TYPE, content_type);
}

#[test]
fn prom_fixture_pages_are_valid_for_the_checker() {
    // The checker accepts what real vLLM writes (all families, including http_* summaries).
    parse::validate(BEFORE).unwrap();
    let after = parse::validate(AFTER).unwrap();
    assert!(after.iter().any(|f| f.kind == "summary"));
}

// ---- prometheus-fastapi-instrumentator's `http_*` families ----

/// The `http_*` part of a fixture page: from `http_requests_total` to the end.
fn http_section(page: &str) -> String {
    page[page.find("# HELP http_requests_total ").unwrap()..].to_string()
}

/// The fixture session's recorded requests in order: (route, raw path, method, status, count).
/// The unmatched ones are `GET /v1/nope` (404) and `GET /v1/chat/completions` (405).
const SESSION: &[(Option<&str>, &str, &str, u16, usize)] = &[
    (Some("/v1/models"), "/v1/models", "GET", 200, 1),
    (
        Some("/kv_event_sources"),
        "/kv_event_sources",
        "GET",
        200,
        1,
    ),
    (Some("/tokenize"), "/tokenize", "POST", 200, 29),
    (Some("/detokenize"), "/detokenize", "POST", 200, 1),
    (
        Some("/v1/chat/completions"),
        "/v1/chat/completions",
        "POST",
        200,
        14,
    ),
    (Some("/v1/completions"), "/v1/completions", "POST", 200, 15),
    (
        Some("/v1/chat/completions"),
        "/v1/chat/completions",
        "POST",
        400,
        13,
    ),
    (Some("/v1/completions"), "/v1/completions", "POST", 400, 4),
    (None, "/v1/nope", "GET", 404, 1),
    (None, "/v1/chat/completions", "GET", 405, 1),
    (
        Some("/reset_prefix_cache"),
        "/reset_prefix_cache",
        "POST",
        200,
        1,
    ),
];

/// Per handler, the fixture's request and response byte sums.
const SIZES: &[(&str, u64, u64)] = &[
    ("/v1/models", 0, 461),
    ("/kv_event_sources", 0, 203),
    ("/tokenize", 21163, 28899),
    ("/detokenize", 45, 41),
    ("/v1/chat/completions", 23632, 10280),
    ("/v1/completions", 35519, 10887),
    ("none", 0, 53),
    ("/reset_prefix_cache", 0, 16),
];

/// Replays [`SESSION`] (plus excluded `/health`, `/metrics`, ... requests the page must not
/// show): sizes of a handler all on its first request; durations landing in the fixture's
/// buckets (52 within 10 ms, 21 within 25 ms, 7 within 50 ms, the first chat at 200 ms).
fn replay_http_session(m: &mut HttpMetrics) {
    let mut seen = std::collections::HashSet::new();
    let mut fast = 0;
    for &(route, path, method, status, n) in SESSION {
        for _ in 0..n {
            let handler = route.unwrap_or("none");
            let (req, resp) = if seen.insert(handler) {
                let s = SIZES.iter().find(|s| s.0 == handler).unwrap();
                (s.1, s.2)
            } else {
                (0, 0)
            };
            let duration = if handler == "/v1/chat/completions" && req > 0 {
                0.2
            } else {
                fast += 1;
                match fast {
                    1..=52 => 0.005,
                    53..=73 => 0.02,
                    _ => 0.04,
                }
            };
            assert!(m.observe(&HttpRequest {
                route,
                path,
                method,
                status,
                request_size: req,
                response_size: resp,
                duration,
                now_unix: 1.8e9,
            }));
        }
    }
    for (route, path, method) in [
        (Some("/health"), "/health", "GET"),
        (Some("/metrics"), "/metrics", "GET"),
        (Some("/version"), "/version", "GET"),
        (Some("/ping"), "/ping", "POST"),
        (Some("/load"), "/load", "GET"),
        (None, "/server_info", "GET"),
        (None, "/metrics", "POST"),
    ] {
        let r = HttpRequest {
            route,
            path,
            method,
            status: 200,
            request_size: 0,
            response_size: 0,
            duration: 0.001,
            now_unix: 1.8e9,
        };
        assert!(!m.observe(&r), "{path} is excluded");
    }
}

/// The page with the values of the latency `_sum` samples blanked (float sums of real timings).
fn blank_duration_sums(page: &str) -> String {
    page.lines()
        .map(|l| {
            let name = l.split(['{', ' ']).next().unwrap();
            if name.starts_with("http_request_duration") && name.ends_with("_sum") {
                format!("{} X\n", &l[..l.rfind(' ').unwrap()])
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

#[test]
fn prom_http_fresh_families_match_vllm_before_traffic() {
    let m = HttpMetrics::new(1.7960143645207067e9);
    assert_same_page(&m.render(), &http_section(BEFORE));
}

#[test]
fn prom_http_families_after_traffic_match_vllm() {
    let mut m = HttpMetrics::new(1.7960143645207067e9);
    replay_http_session(&mut m);
    assert_eq!(m.count(), 81);
    assert_same_page(
        &blank_duration_sums(&m.render()),
        &blank_duration_sums(&http_section(AFTER)),
    );
}

#[test]
fn prom_http_family_parity_names_help_types_labels_buckets_and_order() {
    let mut m = HttpMetrics::new(0.0);
    replay_http_session(&mut m);
    let got = parse::validate(&m.render()).unwrap();
    let want = parse::validate(&http_section(AFTER)).unwrap();
    let names = |fs: &[Family]| fs.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&got), names(&want));
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((&g.help, &g.kind), (&w.help, &w.kind), "{}", w.name);
        assert_eq!(g.bucket_bounds(), w.bucket_bounds(), "{} buckets", w.name);
        let series = |f: &Family| {
            f.samples
                .iter()
                .map(|s| (s.name.clone(), s.labels.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(series(g), series(w), "{} series and label order", w.name);
    }
}

/// The whole page's family order: `process_*`, `vllm:*`, then `http_*` (python_* aside).
#[test]
fn prom_http_families_close_the_page_as_in_vllm() {
    let process = ProcessStats {
        virtual_memory_bytes: 1.0,
        resident_memory_bytes: 1.0,
        start_time_seconds: 1.0,
        cpu_seconds_total: 1.0,
        open_fds: 1.0,
        max_fds: 1.0,
    };
    let mut http = HttpMetrics::new(0.0);
    replay_http_session(&mut http);
    let mut page = reference_metrics(0.0).render_with_process(&process);
    http.render_into(&mut page);
    let got: Vec<String> = parse::validate(&page)
        .unwrap()
        .into_iter()
        .map(|f| f.name)
        .collect();
    let want: Vec<String> = parse::validate(AFTER)
        .unwrap()
        .into_iter()
        .map(|f| f.name)
        .filter(|n| !n.starts_with("python_"))
        .collect();
    assert_eq!(got, want);
}
