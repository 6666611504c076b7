//! Request results from the data cores to the control thread, for passive ejection.
//!
//! A core pushes without blocking (a bounded lock-free channel; a full queue drops the report and
//! counts it) and rings the control thread's doorbell (loom-checked, `inferrail_sync::Doorbell`). Cores only report failures and the success
//! that ends a failure streak, so healthy traffic costs nothing here.

use inferrail_sync::Doorbell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// One finished attempt on a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaReport {
    /// Registry key of the replica.
    pub key: u64,
    /// Whether the attempt succeeded (the engine answered with a status other than 502-504).
    pub ok: bool,
    /// When it finished.
    pub at: Instant,
}

/// Reports from every core to the one control-thread reader.
#[derive(Debug)]
pub struct ReportQueue {
    tx: crossbeam_channel::Sender<ReplicaReport>,
    rx: crossbeam_channel::Receiver<ReplicaReport>,
    bell: Doorbell,
    dropped: AtomicU64,
}

impl ReportQueue {
    /// A queue holding up to `capacity` unread reports.
    pub fn new(capacity: usize) -> ReportQueue {
        let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
        ReportQueue {
            tx,
            rx,
            bell: Doorbell::new(),
            dropped: AtomicU64::new(0),
        }
    }

    /// Queues a report and wakes the reader. Never blocks: a full queue drops the report.
    pub fn push(&self, report: ReplicaReport) {
        if self.tx.try_send(report).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.bell.ring();
    }

    /// Reports dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits until at least one report is queued, then returns every queued report. One reader.
    pub async fn next_batch(&self) -> Vec<ReplicaReport> {
        loop {
            let batch: Vec<ReplicaReport> = self.rx.try_iter().collect();
            if !batch.is_empty() {
                return batch;
            }
            // A push after the drain above rings the bell, so this wait cannot miss it.
            self.bell.rung().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn reports_from_other_threads_reach_the_reader_in_order() {
        let q = Arc::new(ReportQueue::new(1024));
        let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        let got = rt.block_on({
            let q = q.clone();
            async move {
                let writer = {
                    let q = q.clone();
                    std::thread::spawn(move || {
                        for key in 0..100 {
                            if key % 10 == 0 {
                                std::thread::sleep(Duration::from_millis(2));
                            }
                            q.push(ReplicaReport {
                                key,
                                ok: false,
                                at: Instant::now(),
                            });
                        }
                    })
                };
                let mut got = Vec::new();
                while got.len() < 100 {
                    monoio::select! {
                        b = q.next_batch() => got.extend(b.into_iter().map(|r| r.key)),
                        _ = monoio::time::sleep(Duration::from_secs(10)) => break,
                    }
                }
                writer.join().unwrap();
                got
            }
        });
        assert_eq!(got, (0..100).collect::<Vec<u64>>());
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let q = ReportQueue::new(2);
        for key in 0..5 {
            q.push(ReplicaReport {
                key,
                ok: true,
                at: Instant::now(),
            });
        }
        assert_eq!(q.dropped(), 3);
    }
}
