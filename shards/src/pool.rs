//! The tokenizer pool: `tokenizer.workers` threads running jobs from one bounded queue, off the
//! data cores. A full queue refuses the job at once (the caller routes without a prediction)
//! instead of making a data core wait.

use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::thread::JoinHandle;

/// One unit of work: tokenize a body, hash its blocks, and answer through its own reply.
pub type Job = Box<dyn FnOnce() + Send>;

/// Worker threads behind a bounded queue. Dropping the pool closes the queue; workers finish the
/// jobs already queued and exit.
pub struct WorkerPool {
    tx: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("workers", &self.threads.len())
            .finish_non_exhaustive()
    }
}

impl WorkerPool {
    /// Starts `workers` threads named `<name>-N` sharing a queue of `capacity` jobs. Worker `i` is
    /// pinned to `pin[i % pin.len()]` when `pin` is not empty.
    pub fn start(
        name: &str,
        workers: usize,
        capacity: usize,
        pin: &[core_affinity::CoreId],
    ) -> std::io::Result<WorkerPool> {
        let (tx, rx): (Sender<Job>, Receiver<Job>) = crossbeam_channel::bounded(capacity.max(1));
        let mut threads = Vec::with_capacity(workers.max(1));
        for i in 0..workers.max(1) {
            let rx = rx.clone();
            let cpu = (!pin.is_empty()).then(|| pin[i % pin.len()]);
            let handle = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        core_affinity::set_for_current(cpu);
                    }
                    for job in rx.iter() {
                        job();
                    }
                })?;
            threads.push(handle);
        }
        Ok(WorkerPool {
            tx: Some(tx),
            threads,
        })
    }

    /// Queues `job`, or hands it back at once when the queue is full. Never blocks.
    pub fn try_submit(&self, job: Job) -> Result<(), Job> {
        match &self.tx {
            Some(tx) => match tx.try_send(job) {
                Ok(()) => Ok(()),
                Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => Err(job),
            },
            None => Err(job),
        }
    }

    /// Jobs waiting in the queue.
    pub fn queued(&self) -> usize {
        self.tx.as_ref().map_or(0, Sender::len)
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.threads.len()
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        drop(self.tx.take());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    #[test]
    fn runs_every_job_and_refuses_when_full() {
        let done = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Barrier::new(2));
        let pool = WorkerPool::start("t", 1, 2, &[]).unwrap();
        // The one worker blocks on the gate, so the queue fills.
        let g = gate.clone();
        pool.try_submit(Box::new(move || {
            g.wait();
        }))
        .map_err(|_| ())
        .unwrap();
        // Wait (bounded) until the worker has taken the blocking job off the queue.
        let start = std::time::Instant::now();
        while pool.queued() > 0 && start.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::yield_now();
        }
        let mut accepted = 0;
        let mut refused = 0;
        for _ in 0..10 {
            let d = done.clone();
            match pool.try_submit(Box::new(move || {
                d.fetch_add(1, Ordering::SeqCst);
            })) {
                Ok(()) => accepted += 1,
                Err(_) => refused += 1,
            }
        }
        assert_eq!((accepted, refused), (2, 8));
        gate.wait();
        drop(pool);
        assert_eq!(done.load(Ordering::SeqCst), accepted);
    }
}
