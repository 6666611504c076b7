//! Tests of the scheduler and the latency model: vLLM V1 behaviours one by one, then property
//! tests (random schedules, chunk costs, TTFT monotonicity). Tests asserting exact step costs
//! select the linear latency model (its chunks telescope to `P(u, c)`); the latency models'
//! own tests are in `latency/tests.rs`.
use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::latency::{LatencyModel, LinearLatency};
use super::scheduler::*;

const BS: usize = 4;

fn cfg(num_gpu_blocks: usize, budget: usize, max_num_seqs: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_num_batched_tokens: budget,
        max_num_seqs,
        block_size: BS,
        num_gpu_blocks,
        enable_prefix_caching: true,
        enable_kv_events: true,
        long_prefill_token_threshold: 0,
        max_model_len: None,
    }
}

fn sched(num_gpu_blocks: usize, budget: usize, max_num_seqs: usize) -> Scheduler {
    Scheduler::new(
        cfg(num_gpu_blocks, budget, max_num_seqs),
        LatencyModel::linear(),
    )
    .unwrap()
}

fn toks(base: u32, n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| base + i).collect()
}

fn assert_drained(s: &Scheduler) {
    let p = s.pool();
    p.check_invariants().unwrap();
    assert_eq!(
        p.num_free_blocks(),
        p.num_usable_blocks(),
        "blocks still held"
    );
    assert_eq!(p.num_requests(), 0);
    assert_eq!(s.num_unfinished(), 0);
    assert!(!s.has_work());
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-300)
}

// ---------------------------------------------------------------------------------------------
// Latency model

#[test]
fn latency_defaults_and_zero() {
    let m = LatencyModel::linear();
    let LatencyModel::Linear(l) = m else {
        panic!("{m:?}")
    };
    assert_eq!(l.prefill_token_secs, 1e-4);
    assert_eq!(l.prefill_pair_secs, 3.3e-9);
    assert_eq!(l.prefill_fixed_secs, 5e-3);
    assert!((0.015..=0.025).contains(&m.decode_secs(1)));
    assert!((0.015..=0.035).contains(&m.decode_secs(64)));
    assert_eq!(m.decode_secs(0), 0.0);
    assert!(close(m.decode_secs(3), 18e-3 + 2.0 * 0.15e-3));
    // P(u, c) = a*u + b*u*(c + u/2) + d.
    let p = m.prefill_secs(1000, 500);
    assert!(close(p, 1e-4 * 1000.0 + 3.3e-9 * 1000.0 * 1000.0 + 5e-3));
    assert_eq!(m.prefill_secs(0, 10), 0.0);
    let z = LatencyModel::zero();
    assert_eq!(z.prefill_secs(5000, 100), 0.0);
    assert_eq!(z.decode_secs(256), 0.0);
    assert_eq!(
        super::latency::secs_to_duration(0.25),
        std::time::Duration::from_millis(250)
    );
    assert_eq!(
        super::latency::secs_to_duration(-1.0),
        std::time::Duration::ZERO
    );
}

proptest! {
    /// Any chunking of the uncached tokens sums to the idle P(u, c).
    #[test]
    fn prop_chunks_sum_to_idle_prefill(
        cached in 0usize..50_000,
        chunks in prop::collection::vec(1usize..4096, 1..40),
        a in 1e-6f64..1e-3, b in 1e-10f64..1e-7, d in 0.0f64..0.05,
    ) {
        let m = LinearLatency {
            prefill_token_secs: a,
            prefill_pair_secs: b,
            prefill_fixed_secs: d,
            ..LinearLatency::default()
        };
        let u: usize = chunks.iter().sum();
        let mut start = cached;
        let mut total = 0.0;
        for (i, &k) in chunks.iter().enumerate() {
            total += m.chunk_secs(start, k, i == 0);
            start += k;
        }
        let idle = m.prefill_secs(u, cached);
        prop_assert!(close(total, idle), "{total} vs {idle}");
        let step = m.step_secs(
            chunks.iter().scan(cached, |s, &k| { let c = (*s, k, *s == cached); *s += k; Some(c) }),
            0,
        );
        prop_assert!(close(step, idle));
    }
}

// ---------------------------------------------------------------------------------------------
// Config and admission checks

#[test]
fn refuses_what_vllm_refuses() {
    let l = LatencyModel::zero();
    let mut c = cfg(10, 8, 16);
    assert!(matches!(
        Scheduler::new(c.clone(), l),
        Err(SchedulerConfigError::BudgetBelowMaxNumSeqs { .. })
    ));
    c.max_num_batched_tokens = 16;
    c.max_model_len = Some(37); // 9 usable blocks * 4 = 36 tokens
    assert!(matches!(
        Scheduler::new(c.clone(), l),
        Err(SchedulerConfigError::PoolTooSmall {
            max_model_len: 37,
            capacity: 36
        })
    ));
    c.max_model_len = Some(36);
    let mut s = Scheduler::new(c.clone(), l).unwrap();
    assert_eq!(
        s.add_request(Request::new(1, vec![], 4, 0.0)),
        Err(AddRequestError::EmptyPrompt)
    );
    assert_eq!(
        s.add_request(Request::new(1, toks(0, 4), 0, 0.0)),
        Err(AddRequestError::ZeroMaxTokens)
    );
    assert!(matches!(
        s.add_request(Request::new(1, toks(0, 36), 1, 0.0)),
        Err(AddRequestError::TooLong { .. })
    ));
    s.add_request(Request::new(1, toks(0, 35), 100, 0.0))
        .unwrap();
    assert_eq!(
        s.add_request(Request::new(1, toks(0, 4), 1, 0.0)),
        Err(AddRequestError::DuplicateId(1))
    );
    // Capped by max_model_len: finishes with `length` at 36 tokens.
    let steps = s.run_until_idle(0.0);
    let f = &steps.last().unwrap().finished[0];
    assert_eq!((f.reason, f.output_tokens.len()), (FinishReason::Length, 1));
    c.max_model_len = None;
    let mut s = Scheduler::new(c, l).unwrap();
    assert_eq!(
        s.add_request(Request::new(1, toks(0, 30), 8, 0.0)),
        Err(AddRequestError::PoolTooSmall {
            needed: 10,
            usable: 9
        })
    );
    s.add_request(Request::new(1, toks(0, 30), 7, 0.0)).unwrap();
    assert!(s.run_until_idle(0.0).len() > 1);
    assert_drained(&s);
}

// ---------------------------------------------------------------------------------------------
// Scheduling behaviours

#[test]
fn chunked_prefill_then_decode() {
    let mut s = sched(2000, 2048, 256);
    s.add_request(Request::new(7, toks(100, 5000), 3, 0.0))
        .unwrap();
    let steps = s.run_until_idle(1.0);
    let chunks: Vec<(usize, usize, bool, bool)> = steps
        .iter()
        .map(|o| {
            let w = o.scheduled[0];
            (w.start, w.num_tokens, w.decode, w.first_chunk)
        })
        .collect();
    assert_eq!(
        chunks,
        vec![
            (0, 2048, false, true),
            (2048, 2048, false, false),
            (4096, 904, false, false),
            (5000, 1, true, false),
            (5001, 1, true, false),
        ]
    );
    // Tokens come out at step ends; steps are back to back.
    assert!(steps[0].tokens.is_empty() && steps[1].tokens.is_empty());
    assert_eq!(steps[2].tokens[0].index, 0);
    assert_eq!(steps[0].start, 1.0);
    for w in steps.windows(2) {
        assert_eq!(w[1].start, w[0].end);
    }
    let f = &steps[4].finished[0];
    assert_eq!(f.reason, FinishReason::Length);
    assert_eq!(f.first_token, Some(steps[2].end));
    assert_eq!(f.first_scheduled, Some(1.0));
    assert_eq!(f.finished_at, steps[4].end);
    let m = LatencyModel::linear();
    assert!(close(
        steps[..3].iter().map(|o| o.duration).sum::<f64>(),
        m.prefill_secs(5000, 0)
    ));
    assert!(close(steps[3].duration, m.decode_secs(1)));
    let st = s.stats();
    assert_eq!((st.prompt_tokens, st.generation_tokens), (5000, 3));
    assert_eq!((st.finished_length, st.num_steps), (1, 5));
    assert_drained(&s);
}

#[test]
fn long_prefill_threshold_caps_chunks() {
    let mut c = cfg(2000, 2048, 256);
    c.long_prefill_token_threshold = 1000;
    let mut s = Scheduler::new(c, LatencyModel::zero()).unwrap();
    s.add_request(Request::new(1, toks(0, 2500), 1, 0.0))
        .unwrap();
    let sizes: Vec<usize> = s
        .run_until_idle(0.0)
        .iter()
        .map(|o| o.num_scheduled_tokens())
        .collect();
    assert_eq!(sizes, vec![1000, 1000, 500]);
}

#[test]
fn prefix_hits_and_fully_cached_prompt_recomputes_last_block() {
    let mut s = sched(100, 64, 8);
    s.add_request(Request::new(1, toks(0, 16), 1, 0.0)).unwrap();
    s.run_until_idle(0.0);
    // Same prompt: hit capped at 15 tokens -> 12 (3 blocks); the last block is recomputed.
    s.add_request(Request::new(2, toks(0, 16), 1, 0.0)).unwrap();
    // A longer prompt sharing the 16 tokens: a 16-token hit.
    let mut p3 = toks(0, 16);
    p3.extend(toks(900, 6));
    s.add_request(Request::new(3, p3, 1, 0.0)).unwrap();
    let steps = s.run_until_idle(0.0);
    let w: Vec<(u64, usize, usize)> = steps[0]
        .scheduled
        .iter()
        .map(|w| (w.id, w.cached_tokens, w.num_tokens))
        .collect();
    assert_eq!(w, vec![(2, 12, 4), (3, 16, 6)]);
    let fin: HashMap<u64, usize> = steps[0]
        .finished
        .iter()
        .map(|f| (f.id, f.cached_tokens))
        .collect();
    assert_eq!(fin, HashMap::from([(2, 12), (3, 16)]));
    let pc = s.stats().prefix_cache;
    assert_eq!((pc.requests, pc.queries, pc.hits), (3, 16 + 16 + 22, 28));
    // The step's cost is the two chunks at their positions plus fixed costs.
    let m = LatencyModel::linear();
    assert!(close(
        steps[0].duration,
        m.prefill_secs(4, 12) + m.prefill_secs(6, 16)
    ));
    assert_drained(&s);
}

#[test]
fn no_prefix_caching_means_no_hits() {
    let mut c = cfg(100, 64, 8);
    c.enable_prefix_caching = false;
    let mut s = Scheduler::new(c, LatencyModel::zero()).unwrap();
    for id in 1..=2 {
        s.add_request(Request::new(id, toks(0, 16), 2, 0.0))
            .unwrap();
        let steps = s.run_until_idle(0.0);
        assert_eq!(steps[0].scheduled[0].cached_tokens, 0);
        assert!(steps.iter().all(|o| o.kv_events.is_empty()));
    }
    assert_eq!(s.stats().prefix_cache.queries, 0);
    assert_drained(&s);
}

#[test]
fn waiting_admission_is_fifo_and_blocks() {
    // 10 usable blocks. A holds 6; B needs 5 blocks and does not fit; C (1 block) waits behind.
    let mut s = Scheduler::new(cfg(11, 64, 8), LatencyModel::zero()).unwrap();
    s.add_request(Request::new(1, toks(0, 24), 2, 0.0)).unwrap();
    s.add_request(Request::new(2, toks(100, 20), 1, 0.0))
        .unwrap();
    s.add_request(Request::new(3, toks(200, 3), 1, 0.0))
        .unwrap();
    let o = s.step(0.0);
    assert_eq!(o.scheduled.len(), 1);
    assert_eq!(s.waiting().collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(s.stats().num_waiting, 2);
    let o = s.step(o.end); // A decodes its last token and leaves
    assert_eq!(o.scheduled.len(), 1);
    assert_eq!(o.finished[0].id, 1);
    let o = s.step(o.end);
    assert_eq!(
        o.scheduled.iter().map(|w| w.id).collect::<Vec<_>>(),
        vec![2, 3]
    );
    s.run_until_idle(o.end);
    assert_drained(&s);
}

#[test]
fn max_num_seqs_caps_running() {
    let mut s = Scheduler::new(cfg(200, 64, 2), LatencyModel::zero()).unwrap();
    for id in 0..5 {
        s.add_request(Request::new(id, toks(10 * id as u32, 3), 3, 0.0))
            .unwrap();
    }
    let o = s.step(0.0);
    assert_eq!(o.scheduled.len(), 2);
    assert_eq!(s.stats().num_running, 2);
    let steps = s.run_until_idle(o.end);
    assert!(steps.iter().all(|o| o.scheduled.len() <= 2));
    assert_eq!(s.stats().finished_length, 5);
    assert_drained(&s);
}

#[test]
fn future_arrivals_wait_for_their_time() {
    let mut s = sched(100, 64, 8);
    s.add_request(Request::new(2, toks(50, 4), 1, 5.0)).unwrap();
    s.add_request(Request::new(1, toks(0, 4), 1, 2.0)).unwrap();
    assert_eq!(s.next_arrival(), Some(2.0));
    assert!(s.step(1.0).is_idle());
    assert_eq!(s.stats().num_pending, 2);
    let steps = s.run_until_idle(0.0);
    assert_eq!(steps.len(), 2);
    assert_eq!((steps[0].start, steps[0].scheduled[0].id), (2.0, 1));
    assert_eq!((steps[1].start, steps[1].scheduled[0].id), (5.0, 2));
    assert_drained(&s);
}

#[test]
fn preemption_takes_the_newest_and_requeues_it_first() {
    // 6 usable blocks of 4. Three requests of 4 prompt tokens take 1 block each, then grow.
    let mut s = Scheduler::new(cfg(7, 64, 8), LatencyModel::zero()).unwrap();
    for id in 1..=3 {
        s.add_request(Request::new(id, toks(100 * id as u32, 4), 12, 0.0))
            .unwrap();
    }
    s.add_request(Request::new(4, toks(900, 4), 1, 0.0))
        .unwrap();
    let mut t = 0.0;
    let mut first_preemption = None;
    let mut total = 0;
    while s.num_unfinished() > 0 {
        let o = s.step(t);
        t = o.end;
        s.pool().check_invariants().unwrap();
        if first_preemption.is_none() && !o.preempted.is_empty() {
            first_preemption = Some((o.preempted.clone(), s.waiting().collect::<Vec<_>>()));
        }
        total += o.finished.len();
    }
    let (preempted, waiting) = first_preemption.expect("a preemption");
    // Running [1, 2, 3, 4]: 4 finished at once; then 1 needs a block: 3 (newest) is preempted
    // and heads the waiting queue.
    assert_eq!(preempted, vec![3]);
    assert_eq!(waiting[0], 3);
    assert_eq!(total, 4);
    assert!(s.stats().num_preemptions > 0);
    assert!(s.stats().prefix_cache.preempted_requests > 0);
    assert_drained(&s);
}

#[test]
fn preemption_keeps_outputs_and_tokens_are_per_request() {
    // The same requests on a roomy and a dry pool produce the same tokens.
    let run = |blocks: usize| {
        let mut s = Scheduler::new(cfg(blocks, 64, 8), LatencyModel::default()).unwrap();
        for id in 1..=4u64 {
            s.add_request(Request::new(id, toks(100 * id as u32, 6), 14, 0.0))
                .unwrap();
        }
        let mut outs = HashMap::new();
        for o in s.run_until_idle(0.0) {
            for f in o.finished {
                outs.insert(f.id, f.output_tokens);
            }
        }
        assert_drained(&s);
        (outs, s.stats().num_preemptions)
    };
    let (roomy, p0) = run(100);
    let (dry, p1) = run(9);
    assert_eq!(p0, 0);
    assert!(p1 > 0);
    assert_eq!(roomy, dry);
    assert!(roomy.values().all(|v| v.len() == 14));
}

#[test]
fn scripts_stop_tokens_and_min_tokens() {
    let mut s = sched(100, 64, 8);
    let mut r = Request::new(1, toks(0, 4), 10, 0.0);
    r.script = vec![500, 501, 2, 502, 2];
    r.stop_token_ids = vec![2];
    r.min_tokens = 4;
    s.add_request(r).unwrap();
    let steps = s.run_until_idle(0.0);
    let f = &steps.last().unwrap().finished[0];
    assert_eq!(f.output_tokens, vec![500, 501, 2, 502, 2]);
    assert_eq!((f.reason, f.stop_token), (FinishReason::Stop, Some(2)));
    assert_eq!(s.stats().finished_stop, 1);
    // Sampled tokens depend only on the seed.
    let mut r = Request::new(2, toks(0, 4), 3, 0.0);
    r.seed = 42;
    s.add_request(r).unwrap();
    let out = s.run_until_idle(10.0).pop().unwrap().finished[0]
        .output_tokens
        .clone();
    let mut st = 42u64;
    let tk = inferrail_shards::builtin::BuiltinTokenizer::new();
    let expected: Vec<u32> = (0..3).map(|_| tk.sample_token(&mut st)).collect();
    assert_eq!(out, expected);
    assert_drained(&s);
}

#[test]
fn aborts_release_blocks() {
    let mut s = sched(100, 8, 8);
    s.add_request(Request::new(1, toks(0, 20), 50, 0.0))
        .unwrap();
    s.add_request(Request::new(2, toks(100, 20), 50, 0.0))
        .unwrap();
    s.add_request(Request::new(3, toks(200, 4), 50, 9.0))
        .unwrap();
    let o = s.step(0.0); // 1 takes the whole budget; 2 waits
    assert_eq!(o.scheduled.len(), 1);
    assert!(s.pool().request_blocks(1).is_some());
    let f = s.abort(2, 0.001).unwrap(); // waiting: withdrawn at once
    assert_eq!((f.reason, f.first_scheduled), (FinishReason::Abort, None));
    let f = s.abort(1, 0.002).unwrap(); // running: leaves at this step boundary
    assert_eq!((f.reason, f.finished_at), (FinishReason::Abort, 0.002));
    assert!(s.pool().request_blocks(1).is_none());
    assert!(s.abort(3, 0.003).is_some()); // pending
    assert!(s.abort(3, 0.003).is_none());
    assert_eq!(s.stats().finished_abort, 3);
    assert_drained(&s);
    assert!(s.run_until_idle(1.0).is_empty());
}

#[test]
fn kv_events_flow_out_of_steps() {
    let mut s = sched(100, 64, 8);
    s.add_request(Request::new(1, toks(0, 9), 5, 0.0)).unwrap();
    let steps = s.run_until_idle(0.0);
    let stored: usize = steps
        .iter()
        .flat_map(|o| &o.kv_events)
        .map(|e| match e {
            super::KvCacheEvent::BlockStored { block_hashes, .. } => block_hashes.len(),
            _ => 0,
        })
        .sum();
    // 9 prompt tokens + 4 fed-back outputs = 13 tokens with slots: 3 full blocks cached.
    assert_eq!(stored, 3);
    assert!(s.reset_prefix_cache());
}

// ---------------------------------------------------------------------------------------------
// Latency under load

#[test]
fn decode_steps_stretch_with_batch_and_prefill() {
    let m = LatencyModel::linear();
    let mut last = 0.0;
    for n in 1..=8u64 {
        let mut s = sched(500, 256, 64);
        for id in 0..n {
            s.add_request(Request::new(id, toks(1000 * id as u32, 5), 4, 0.0))
                .unwrap();
        }
        let first = s.step(0.0); // all prefills
        let o = s.step(first.end); // all decoding
        assert!(o.scheduled.iter().all(|w| w.decode));
        assert!(close(o.duration, m.decode_secs(n as usize)));
        assert!(o.duration > last);
        last = o.duration;
        // A prompt joining the batch stretches the step by its chunk.
        s.add_request(Request::new(99, toks(77_000, 40), 1, 0.0))
            .unwrap();
        let o2 = s.step(o.end);
        assert_eq!(o2.scheduled.len(), n as usize + 1);
        assert!(close(
            o2.duration,
            m.decode_secs(n as usize) + m.prefill_secs(40, 0)
        ));
        assert!(o2.duration > o.duration);
    }
}

/// The probe's TTFT behind `ahead` (prompt lengths, max tokens), all arriving at 0.
fn probe_ttft(ahead: &[(usize, usize)], budget: usize, max_num_seqs: usize) -> f64 {
    let mut s = sched(4000, budget, max_num_seqs);
    for (i, &(p, m)) in ahead.iter().enumerate() {
        s.add_request(Request::new(
            i as u64,
            toks(10_000 * i as u32 + 5, p),
            m,
            0.0,
        ))
        .unwrap();
    }
    s.add_request(Request::new(999, toks(3_000_000, 100), 1, 0.0))
        .unwrap();
    let steps = s.run_until_idle(0.0);
    assert_drained(&s);
    steps
        .iter()
        .flat_map(|o| o.tokens.iter().map(move |t| (t, o.end)))
        .find(|(t, _)| t.id == 999)
        .map(|(_, end)| end)
        .unwrap()
}

#[test]
fn ttft_rises_with_queue_depth() {
    let ttfts: Vec<f64> = (0..12)
        .map(|n| probe_ttft(&vec![(300, 8); n], 512, 4))
        .collect();
    for w in ttfts.windows(2) {
        assert!(w[1] > w[0], "{ttfts:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// More work queued ahead never brings the probe's first token earlier.
    #[test]
    fn prop_ttft_never_falls_with_load(
        ahead in prop::collection::vec((1usize..700, 1usize..12), 0..10),
        budget in 64usize..1024,
        max_num_seqs in 1usize..6,
    ) {
        let budget = budget.max(max_num_seqs);
        let mut prev = 0.0;
        for k in 0..=ahead.len() {
            let t = probe_ttft(&ahead[..k], budget, max_num_seqs);
            prop_assert!(t >= prev, "k={k}: {t} < {prev}");
            prev = t;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Dry pool and random schedules

#[test]
fn dry_pool_preempts_but_finishes_everything() {
    // 12 usable blocks; each request needs up to 7.
    let mut s = Scheduler::new(cfg(13, 64, 16), LatencyModel::default()).unwrap();
    for id in 0..6u64 {
        s.add_request(Request::new(id, toks(100 * id as u32, 8), 20, 0.0))
            .unwrap();
    }
    let steps = s.run_until_idle(0.0);
    let finished: Vec<&FinishedRequest> = steps.iter().flat_map(|o| &o.finished).collect();
    assert_eq!(finished.len(), 6);
    assert!(finished
        .iter()
        .all(|f| f.reason == FinishReason::Length && f.output_tokens.len() == 20));
    let st = s.stats();
    assert!(st.num_preemptions > 0);
    assert_eq!(st.generation_tokens, 120);
    assert_eq!(st.prompt_tokens, 48);
    assert!(finished.iter().any(|f| f.num_preemptions > 0));
    assert_drained(&s);
}

#[derive(Debug, Clone)]
struct Spec {
    prefix: usize,
    prefix_len: usize,
    suffix_len: usize,
    max_tokens: usize,
    arrival_ms: u32,
    abort_after_steps: Option<usize>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        0usize..3,
        0usize..24,
        1usize..20,
        1usize..24,
        0u32..200,
        prop::option::weighted(0.2, 0usize..30),
    )
        .prop_map(
            |(prefix, prefix_len, suffix_len, max_tokens, arrival_ms, abort_after_steps)| Spec {
                prefix,
                prefix_len,
                suffix_len,
                max_tokens,
                arrival_ms,
                abort_after_steps,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random schedules keep the sequence cap, the token budget and FIFO admission, and leave
    /// no block held once drained.
    #[test]
    fn prop_random_schedules(
        specs in prop::collection::vec(spec(), 1..24),
        num_gpu_blocks in 10usize..32,
        max_num_seqs in 1usize..8,
        budget in 8usize..48,
        threshold in prop::option::of(1usize..16),
        zero in any::<bool>(),
    ) {
        let mut c = cfg(num_gpu_blocks, budget.max(max_num_seqs), max_num_seqs);
        c.long_prefill_token_threshold = threshold.unwrap_or(0);
        let lat = if zero { LatencyModel::zero() } else { LatencyModel::default() };
        let mut s = Scheduler::new(c.clone(), lat).unwrap();
        let mut order = Vec::new(); // (arrival, id) in queue order
        let mut accepted = HashSet::new();
        for (i, sp) in specs.iter().enumerate() {
            let mut p = toks(1_000 * sp.prefix as u32, sp.prefix_len);
            p.extend(toks(100_000 + 1_000 * i as u32, sp.suffix_len));
            let arrival = f64::from(sp.arrival_ms) / 1000.0;
            if s.add_request(Request::new(i as u64, p, sp.max_tokens, arrival)).is_ok() {
                accepted.insert(i as u64);
                order.push((arrival, i as u64));
            }
        }
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let rank: HashMap<u64, usize> = order.iter().enumerate().map(|(r, &(_, id))| (id, r)).collect();
        let mut started = HashSet::new();
        let mut done = HashSet::new();
        let mut t = 0.0;
        let mut steps = 0usize;
        loop {
            // Random aborts between steps.
            for (i, sp) in specs.iter().enumerate() {
                let id = i as u64;
                if sp.abort_after_steps == Some(steps) && s.contains(id) {
                    let f = s.abort(id, t).unwrap();
                    prop_assert_eq!(f.reason, FinishReason::Abort);
                    prop_assert!(s.pool().request_blocks(id).is_none());
                    done.insert(id);
                }
            }
            if !s.has_work() {
                match s.next_arrival() {
                    Some(a) => t = f64::max(t, a),
                    None => break,
                }
            }
            let o = s.step(t);
            steps += 1;
            prop_assert!(steps < 10_000, "no progress");
            s.pool().check_invariants().map_err(TestCaseError::fail)?;
            prop_assert!(s.running().len() <= c.max_num_seqs);
            prop_assert!(o.num_scheduled_tokens() <= c.max_num_batched_tokens);
            prop_assert!(o.end >= o.start);
            if threshold.is_some() {
                prop_assert!(o.scheduled.iter().all(|w| w.num_tokens <= c.long_prefill_token_threshold));
            }
            for w in &o.scheduled {
                if w.admitted && started.insert(w.id) {
                    // FIFO: nobody that arrived earlier is still waiting unstarted.
                    for id in s.waiting() {
                        prop_assert!(
                            started.contains(&id) || rank[&id] > rank[&w.id],
                            "{} started before {}", w.id, id
                        );
                    }
                }
            }
            for f in &o.finished {
                prop_assert!(done.insert(f.id));
                prop_assert!(f.reason == FinishReason::Length);
                prop_assert_eq!(f.output_tokens.len(), specs[f.id as usize].max_tokens);
            }
            t = o.end;
        }
        let st = s.stats();
        prop_assert_eq!((st.finished_length + st.finished_abort) as usize, accepted.len());
        prop_assert_eq!(done, accepted);
        prop_assert_eq!((st.num_running, st.num_waiting, st.num_pending), (0, 0, 0));
        prop_assert_eq!(st.kv_cache_usage, 0.0);
        assert_drained(&s);
    }
}

/// One schedule played to the end: arrivals at `arrival_ms` scaled by `scale`, the latency
/// model `base` scaled by `scale`. Returns every step and the final counters.
fn play_scaled(
    specs: &[Spec],
    c: &SchedulerConfig,
    base: LatencyModel,
    scale: f64,
) -> (Vec<StepOutput>, SchedulerStats) {
    let mut s = Scheduler::new(c.clone(), base.scaled(scale)).unwrap();
    for (i, sp) in specs.iter().enumerate() {
        let mut p = toks(1_000 * sp.prefix as u32, sp.prefix_len);
        p.extend(toks(100_000 + 1_000 * i as u32, sp.suffix_len));
        let arrival = f64::from(sp.arrival_ms) / 1000.0 * scale;
        let _ = s.add_request(Request::new(i as u64, p, sp.max_tokens, arrival));
    }
    let steps = s.run_until_idle(0.0);
    (steps, s.stats())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// `--time-scale`: with every arrival and every latency coefficient scaled by a power of
    /// two (exact in floating point), the engine takes the same steps, schedules the same
    /// work, hits the cache the same and produces the same tokens; only the times scale. For
    /// both latency models.
    #[test]
    fn prop_time_scale_keeps_the_schedule(
        specs in prop::collection::vec(spec(), 1..24),
        num_gpu_blocks in 10usize..32,
        max_num_seqs in 1usize..8,
        budget in 8usize..48,
        shift in 1i32..8,
        linear in any::<bool>(),
    ) {
        let c = cfg(num_gpu_blocks, budget.max(max_num_seqs), max_num_seqs);
        let base = if linear { LatencyModel::linear() } else { LatencyModel::default() };
        let scale = 2f64.powi(-shift);
        let (a, a_stats) = play_scaled(&specs, &c, base, 1.0);
        let (b, b_stats) = play_scaled(&specs, &c, base, scale);
        prop_assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            prop_assert_eq!(x.start * scale, y.start);
            prop_assert_eq!(x.duration * scale, y.duration);
            prop_assert_eq!(&x.scheduled, &y.scheduled);
            prop_assert_eq!(&x.preempted, &y.preempted);
            prop_assert_eq!(&x.tokens, &y.tokens);
            prop_assert_eq!(&x.kv_events, &y.kv_events);
            prop_assert_eq!(x.finished.len(), y.finished.len());
            for (f, g) in x.finished.iter().zip(&y.finished) {
                prop_assert_eq!((f.id, f.reason, f.cached_tokens), (g.id, g.reason, g.cached_tokens));
                prop_assert_eq!(&f.output_tokens, &g.output_tokens);
                prop_assert_eq!(f.first_token.map(|t| t * scale), g.first_token);
            }
        }
        prop_assert_eq!(a_stats, b_stats);
    }
}

#[test]
fn scaled_latency_multiplies_every_cost() {
    for d in [LatencyModel::linear(), LatencyModel::default()] {
        let h = d.scaled(0.5);
        assert!(close(
            h.prefill_secs(300, 100),
            d.prefill_secs(300, 100) / 2.0
        ));
        assert!(close(h.decode_secs(7), d.decode_secs(7) / 2.0));
        assert_eq!(d.scaled(1.0), d);
    }
    assert_eq!(LatencyModel::zero().scaled(0.1), LatencyModel::zero());
}
