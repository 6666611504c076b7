//! Why a call into the index shards did not happen.

/// An index call that was not carried out. Every variant means "route without a cache
/// prediction" to a data core; none of them is retried by the index itself.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The shard's bounded queue was full: the shard is behind and the call was dropped rather
    /// than wait.
    #[error("index shard {shard} is busy: its queue is full")]
    Full {
        /// The shard that was full.
        shard: usize,
    },
    /// The shard's thread is gone (it panicked, or the index is shutting down).
    #[error("index shard {shard} has stopped")]
    Stopped {
        /// The shard that stopped.
        shard: usize,
    },
    /// A shard dropped a request without answering it (its thread ended with the request
    /// still queued).
    #[error("an index shard stopped before answering")]
    Lost,
    /// A shard thread could not be started.
    #[error("could not start index shard thread {shard}")]
    Spawn {
        /// The shard whose thread failed to start.
        shard: usize,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
}
