//! The decision log writer: one JSON line per sampled routing decision, written off the data
//! cores by its own thread.

use crate::observe::jsonl::{self, LineWriter, Worker};
use crossbeam_channel::Receiver;
use inferrail_dataplane::observe::DecisionRecord;
use serde_json::{json, Value};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The running decision-log writer.
pub struct DecisionLogHandle {
    written: Arc<AtomicU64>,
    worker: Worker,
}

impl DecisionLogHandle {
    /// Records handled so far (written to the buffer; on disk within 100 ms).
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Stops the writer after the records already queued, flushes, and returns the first I/O
    /// error, if any.
    pub fn stop(self) -> io::Result<()> {
        self.worker.stop()
    }
}

/// Starts the decision-log thread appending to `path`: one JSON line per [`DecisionRecord`] with
/// `request_id`, `generation`, `model`, `policy`, `attempt`, `winner` (replica id) and every
/// candidate's state by id. `prompt` is present, as text, only when `log_prompts` is true at the
/// time the record is written; it is never written otherwise. Lines are flushed within 100 ms
/// and at stop; the thread ends when every sender is dropped or on [`DecisionLogHandle::stop`].
pub fn spawn_decision_log(
    rx: Receiver<DecisionRecord>,
    path: PathBuf,
    log_prompts: Arc<AtomicBool>,
) -> io::Result<DecisionLogHandle> {
    let writer = LineWriter::open(&path)?;
    let written = Arc::new(AtomicU64::new(0));
    let count = Arc::clone(&written);
    let worker = jsonl::spawn_worker("inferrail-decisions", rx, Some(writer), move || {
        move |rec: DecisionRecord, w: Option<&mut LineWriter>| {
            if let Some(w) = w {
                let prompts = log_prompts.load(Ordering::Relaxed);
                w.write(&record_line(&rec, prompts), Instant::now());
            }
            count.fetch_add(1, Ordering::Relaxed);
        }
    })?;
    Ok(DecisionLogHandle { written, worker })
}

/// The JSON line of one record; the prompt only when `log_prompts`.
fn record_line(rec: &DecisionRecord, log_prompts: bool) -> Value {
    let snap = &rec.snapshot;
    let candidates: Vec<Value> = rec
        .candidates
        .iter()
        .map(|c| jsonl::candidate_json(c, snap))
        .collect();
    let mut line = json!({
        "request_id": rec.request_id,
        "generation": snap.generation,
        "model": snap.models.get(rec.model).map(|m| m.name.as_str()),
        "policy": rec.policy.as_str(),
        "attempt": rec.attempt,
        "winner": snap.replicas.get(rec.winner).map(|r| r.id()),
        "candidates": candidates,
    });
    if let (true, Some(prompt), Some(obj)) = (log_prompts, &rec.prompt, line.as_object_mut()) {
        obj.insert(
            "prompt".to_string(),
            Value::String(String::from_utf8_lossy(prompt).into_owned()),
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::jsonl::test_support::{snapshot, temp_path};
    use inferrail_config::PolicyKind;

    use crate::observe::jsonl::test_support::cand;

    fn record(snap: &Arc<inferrail_dataplane::Snapshot>, i: u32) -> DecisionRecord {
        DecisionRecord {
            snapshot: Arc::clone(snap),
            model: 1,
            policy: PolicyKind::P2c,
            request_id: format!("req-{i}"),
            attempt: 1 + i % 2,
            winner: 2,
            candidates: vec![cand(0, i, 0), cand(2, 1, 1)],
            prompt: Some(format!("secret prompt {i}").into_bytes()),
        }
    }

    fn write_and_read(log_prompts: bool, name: &str) -> Vec<Value> {
        let path = temp_path(name);
        let snap = Arc::new(snapshot(4));
        let (tx, rx) = crossbeam_channel::bounded(16);
        let flag = Arc::new(AtomicBool::new(log_prompts));
        let h = spawn_decision_log(rx, path.clone(), flag).unwrap();
        for i in 0..5 {
            tx.send(record(&snap, i)).unwrap();
        }
        h.stop().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn records_are_written_and_parseable() {
        let lines = write_and_read(false, "decisions-plain");
        assert_eq!(lines.len(), 5);
        let l = &lines[3];
        assert_eq!(l["request_id"], "req-3");
        assert_eq!(l["generation"], 4);
        assert_eq!(l["model"], "m1");
        assert_eq!(l["policy"], "p2c");
        assert_eq!(l["attempt"], 2);
        assert_eq!(l["winner"], "r2");
        assert_eq!(l["candidates"][0]["id"], "r0");
        assert_eq!(l["candidates"][0]["in_flight"], 3);
        assert_eq!(l["candidates"][1]["pending"], 1);
        assert!(lines.iter().all(|l| l.get("prompt").is_none()));
    }

    #[test]
    fn prompt_only_when_flag_set() {
        let lines = write_and_read(true, "decisions-prompts");
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0]["prompt"], "secret prompt 0");
    }

    #[test]
    fn flushes_while_running() {
        let path = temp_path("decisions-flush");
        let snap = Arc::new(snapshot(1));
        let (tx, rx) = crossbeam_channel::bounded(4);
        let h = spawn_decision_log(rx, path.clone(), Arc::new(AtomicBool::new(false))).unwrap();
        tx.send(record(&snap, 0)).unwrap();
        // Generous bound: the line must reach the file long before 10 s without a stop.
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let mut seen = String::new();
        while seen.is_empty() && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            seen = std::fs::read_to_string(&path).unwrap_or_default();
        }
        assert_eq!(seen.lines().count(), 1);
        assert_eq!(h.written(), 1);
        drop(tx);
        h.stop().unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
