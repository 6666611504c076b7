//! Replays a shadow log: rebuilds the shadow policies exactly as the worker did, re-runs every
//! logged shadow pick from the logged inputs, and reports the first pick that does not reproduce.

use crate::observe::jsonl;
use crate::observe::shadow::{ShadowEngine, ShadowInputs};
use inferrail_config::PolicyKind;
use inferrail_routing::Candidate;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

/// Why a log could not be replayed at all.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The log.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A line is not a valid shadow-log line.
    #[error("line {line}: {reason}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// The first shadow pick that did not reproduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// 1-based line number of the `shadow` line.
    pub line: usize,
    /// What differed (request, policy, replayed pick, logged pick).
    pub detail: String,
}

/// The outcome of a replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Lines read (up to the mismatch, when there is one).
    pub lines: usize,
    /// `shadow` lines replayed.
    pub jobs: usize,
    /// Shadow picks compared (one per policy per job).
    pub decisions_checked: usize,
    /// The first pick that differed; `None` when every pick reproduced. Replay stops there,
    /// since policy state after it can no longer be trusted.
    pub mismatch: Option<Mismatch>,
}

/// Replays the shadow log at `path` (see [`crate::observe::shadow::spawn_shadow`] for its lines).
/// `start` lines reset all policy state (a new worker run); `config` lines enter a generation;
/// each `shadow` line's picks are re-run in the engine. Malformed lines are errors naming the
/// line; a pick that differs ends the replay with [`ReplayReport::mismatch`] set.
pub fn replay_shadow(path: &Path) -> Result<ReplayReport, ReplayError> {
    let io_err = |source| ReplayError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io_err)?;
    let mut replay = Replay::default();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io_err)?;
        let number = i + 1;
        replay.report.lines = number;
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |reason: String| ReplayError::Malformed {
            line: number,
            reason,
        };
        if let Some(detail) = replay.line(&line).map_err(malformed)? {
            replay.report.mismatch = Some(Mismatch {
                line: number,
                detail,
            });
            break;
        }
    }
    Ok(replay.report)
}

/// Replay state between lines.
#[derive(Default)]
struct Replay {
    engine: Option<ShadowEngine>,
    /// Per configured generation: model name -> shadow list, from its `config` line.
    generations: HashMap<u64, HashMap<String, Vec<PolicyKind>>>,
    report: ReplayReport,
}

impl Replay {
    /// Handles one line: `Err` when malformed, `Ok(Some(detail))` on a mismatch.
    fn line(&mut self, text: &str) -> Result<Option<String>, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        match str_field(&v, "type")? {
            "start" => {
                self.engine = Some(ShadowEngine::new(u64_field(&v, "seed")?));
                self.generations.clear();
                Ok(None)
            }
            "config" => self.config(&v).map(|()| None),
            "shadow" => self.shadow(&v),
            other => Err(format!("unknown line type `{other}`")),
        }
    }

    fn config(&mut self, v: &Value) -> Result<(), String> {
        let generation = u64_field(v, "generation")?;
        let seed = u64_field(v, "seed")?;
        let engine = self.engine.get_or_insert_with(|| ShadowEngine::new(seed));
        if engine.seed() != seed {
            return Err(format!(
                "seed {seed} differs from the run's seed {}",
                engine.seed()
            ));
        }
        let mut models = HashMap::new();
        for m in array_field(v, "models")? {
            let name = str_field(m, "name")?.to_string();
            let policy = str_field(m, "policy")?;
            kind(policy)?;
            let shadow = array_field(m, "shadow")?
                .iter()
                .map(|k| {
                    k.as_str()
                        .ok_or("shadow policy is not a string".to_string())
                })
                .map(|k| k.and_then(kind))
                .collect::<Result<Vec<_>, _>>()?;
            models.insert(name, shadow);
        }
        let first = engine.enter_generation(generation, |name, k| {
            models.get(name).is_some_and(|s| s.contains(&k))
        });
        if !first {
            return Err(format!("generation {generation} configured twice"));
        }
        self.generations.insert(generation, models);
        Ok(())
    }

    fn shadow(&mut self, v: &Value) -> Result<Option<String>, String> {
        let generation = u64_field(v, "generation")?;
        let engine = self
            .engine
            .as_mut()
            .ok_or("shadow line before any start or config line")?;
        if !self.generations.contains_key(&generation) {
            return Err(format!("no config line for generation {generation}"));
        }
        let request_id = str_field(v, "request_id")?;
        let model = str_field(v, "model")?;
        kind(str_field(v, "policy")?)?;
        let mut candidates: Vec<Candidate> = Vec::new();
        let mut ids: Vec<String> = Vec::new();
        for (i, c) in array_field(v, "candidates")?.iter().enumerate() {
            let (cand, id) =
                jsonl::candidate_from_json(c).ok_or(format!("candidate {i} is malformed"))?;
            candidates.push(cand);
            ids.push(id);
        }
        let inputs = match v.get("inputs") {
            None => ShadowInputs::default(),
            Some(i) => jsonl::inputs_from_json(i).ok_or("the inputs are malformed")?,
        };
        let picks = v
            .get("picks")
            .and_then(Value::as_object)
            .ok_or("missing object `picks`")?;
        self.report.jobs += 1;
        for (name, logged) in picks {
            let k = kind(name)?;
            let logged = match logged {
                Value::Null => None,
                Value::String(s) => Some(s.as_str()),
                _ => return Err(format!("pick of {name} is neither a replica id nor null")),
            };
            let replayed = engine
                .pick(model, k, request_id, &inputs, &candidates)
                .map(|i| ids[i].as_str());
            self.report.decisions_checked += 1;
            if replayed != logged {
                return Ok(Some(format!(
                    "request {request_id}: shadow policy {name} picks {} on replay, the log says {}",
                    replayed.unwrap_or("nothing"),
                    logged.unwrap_or("nothing"),
                )));
            }
        }
        Ok(None)
    }
}

fn kind(name: &str) -> Result<PolicyKind, String> {
    PolicyKind::from_name(name).ok_or(format!("unknown policy `{name}`"))
}

fn str_field<'a>(v: &'a Value, name: &str) -> Result<&'a str, String> {
    v.get(name)
        .and_then(Value::as_str)
        .ok_or(format!("missing string `{name}`"))
}

fn u64_field(v: &Value, name: &str) -> Result<u64, String> {
    v.get(name)
        .and_then(Value::as_u64)
        .ok_or(format!("missing unsigned integer `{name}`"))
}

fn array_field<'a>(v: &'a Value, name: &str) -> Result<&'a Vec<Value>, String> {
    v.get(name)
        .and_then(Value::as_array)
        .ok_or(format!("missing array `{name}`"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::jsonl::test_support::{snapshot, temp_path};
    use crate::observe::shadow::{decision_rng, spawn_shadow};
    use inferrail_dataplane::observe::ShadowJob;
    use inferrail_dataplane::Snapshot;
    use inferrail_routing::Rng;
    use std::sync::Arc;

    use crate::observe::jsonl::test_support::cand;

    const SHADOW: [PolicyKind; 7] = [
        PolicyKind::RoundRobin,
        PolicyKind::Random,
        PolicyKind::P2c,
        PolicyKind::LeastRequest,
        PolicyKind::PrefixHash,
        PolicyKind::KvAware,
        PolicyKind::CostModel,
    ];
    const SEED: u64 = 0xfeed;

    /// Writes a log from `n` jobs over two models and three generations (the last one without
    /// round_robin, so its state is rebuilt), with varied candidate sets.
    fn write_log(name: &str, n: usize) -> PathBuf {
        let path = temp_path(name);
        let (tx, rx) = crossbeam_channel::bounded(n + 1);
        let h = spawn_shadow(rx, SEED, Some(path.clone())).unwrap();
        let snaps: Vec<Arc<Snapshot>> = (1..=3).map(|g| Arc::new(snapshot(g))).collect();
        let all: Arc<[PolicyKind]> = SHADOW.as_slice().into();
        let no_rr: Arc<[PolicyKind]> = SHADOW[1..].into();
        let mut rng = Rng::new(77);
        for i in 0..n {
            let g = (i * 3 / n).min(2);
            let count = 1 + rng.below(4);
            let mut candidates: Vec<Candidate> = (0..4)
                .map(|r| Candidate {
                    cached_tokens: (i % 3 == 0).then(|| 16 * rng.below(4) as u32),
                    queued_prefill_secs: rng.below(100) as f64 / 1000.0,
                    ..cand(r, rng.below(5) as u32, rng.below(2) as u32)
                })
                .collect();
            candidates.retain(|c| c.replica < count || rng.below(2) == 0);
            if candidates.is_empty() {
                candidates.push(cand(3, 0, 0));
            }
            let chosen = candidates[rng.below(candidates.len())].replica;
            let job = ShadowJob {
                snapshot: Arc::clone(&snaps[g]),
                model: i % 2,
                shadow: if g == 2 {
                    Arc::clone(&no_rr)
                } else {
                    Arc::clone(&all)
                },
                policy: PolicyKind::LeastRequest,
                request_id: format!("req-{i}"),
                chosen,
                candidates,
                // Every third request carries a prompt, so cache-aware shadows read hashes and
                // cached tokens that the log must carry for the replay.
                prompt: (i % 3 == 0).then(|| inferrail_dataplane::predict::PromptFacts {
                    tokens: 40 + (i as u32 % 90),
                    hashes: (0..(i % 7))
                        .map(|k| {
                            inferrail_routing::BlockHash(u128::from(rng.next_u64() ^ k as u64))
                        })
                        .collect::<Vec<_>>()
                        .into(),
                    block_size: 16,
                }),
                approx_tokens: i as u32,
            };
            tx.send(job).unwrap();
        }
        drop(tx);
        h.stop().unwrap();
        path
    }

    fn edit_line(path: &Path, line: usize, f: impl FnOnce(&mut Value)) {
        let text = std::fs::read_to_string(path).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let mut v: Value = serde_json::from_str(&lines[line - 1]).unwrap();
        f(&mut v);
        lines[line - 1] = v.to_string();
        std::fs::write(path, lines.join("\n") + "\n").unwrap();
    }

    /// A `shadow` line (1-based) in the middle of the log with at least three candidates.
    fn pick_line(path: &Path) -> (usize, Value) {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines()
            .enumerate()
            .skip(100)
            .map(|(i, l)| (i + 1, serde_json::from_str::<Value>(l).unwrap()))
            .find(|(_, v)| v["type"] == "shadow" && v["candidates"].as_array().unwrap().len() >= 3)
            .unwrap()
    }

    #[test]
    fn worker_log_replays() {
        let path = write_log("replay-ok", 300);
        let report = replay_shadow(&path).unwrap();
        assert_eq!(report.mismatch, None);
        assert_eq!(report.jobs, 300);
        // Two generations with 4 shadow policies, one with 3.
        assert!(report.decisions_checked >= 300 * 3, "{report:?}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn changed_pick_is_found() {
        let path = write_log("replay-pick", 300);
        let (line, v) = pick_line(&path);
        let other = if v["picks"]["random"] == "r0" {
            "r1"
        } else {
            "r0"
        };
        edit_line(&path, line, |v| v["picks"]["random"] = other.into());
        let m = replay_shadow(&path).unwrap().mismatch.unwrap();
        assert_eq!(m.line, line);
        assert!(m.detail.contains("random"), "{}", m.detail);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn changed_in_flight_is_found() {
        let path = write_log("replay-load", 300);
        let (line, v) = pick_line(&path);
        // Overload the replica least_request picked: it must now pick another.
        let picked = v["picks"]["least_request"].clone();
        edit_line(&path, line, |v| {
            for c in v["candidates"].as_array_mut().unwrap() {
                if c["id"] == picked {
                    c["in_flight"] = 1_000_000.into();
                }
            }
        });
        let m = replay_shadow(&path).unwrap().mismatch.unwrap();
        assert_eq!(m.line, line);
        // The first load-reading policy in the line's order reports it.
        assert!(
            ["least_request", "kv_aware", "cost_model"]
                .iter()
                .any(|p| m.detail.contains(p)),
            "{}",
            m.detail
        );
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn changed_request_id_is_found() {
        let path = write_log("replay-id", 300);
        let (line, v) = pick_line(&path);
        let n = v["candidates"].as_array().unwrap().len();
        let old = v["request_id"].as_str().unwrap().to_string();
        let first = |id: &str| decision_rng(SEED, id).below(n);
        // An id whose random pick differs from the logged one.
        let new_id = (0..)
            .map(|i| format!("{old}-edited-{i}"))
            .find(|id| first(id) != first(&old))
            .unwrap();
        edit_line(&path, line, |v| v["request_id"] = new_id.clone().into());
        let m = replay_shadow(&path).unwrap().mismatch.unwrap();
        assert_eq!(m.line, line);
        assert!(m.detail.contains(&new_id), "{}", m.detail);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn malformed_lines_are_named() {
        let path = write_log("replay-bad", 20);
        edit_line(&path, 5, |v| {
            v.as_object_mut().unwrap().remove("candidates");
        });
        match replay_shadow(&path) {
            Err(ReplayError::Malformed { line, reason }) => {
                assert_eq!(line, 5);
                assert!(reason.contains("candidates"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        std::fs::write(&path, "{\"type\":\"start\",\"seed\":1}\nnot json\n").unwrap();
        assert!(matches!(
            replay_shadow(&path),
            Err(ReplayError::Malformed { line: 2, .. })
        ));
        let _ = std::fs::remove_file(&path);
        assert!(matches!(replay_shadow(&path), Err(ReplayError::Io { .. })));
    }
}
