//! [`HeldBlocks`]: the index's answer for one replica, the leading blocks of a prompt it holds
//! split by the tier the engine would get each from.

use super::mirror::MirrorMatch;

/// How many leading blocks of a prompt a replica holds, by where its engine gets each from:
/// `gpu` blocks in its own cache, then `cpu` and `storage` blocks it loads from an offload tier
/// instead of recomputing them. `total()` is the leading run the engine does not compute. A
/// replica without KV events (the approximate index) reports everything as `gpu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeldBlocks {
    /// Leading blocks in the engine's own (GPU) cache.
    pub gpu: u32,
    /// Past `gpu`, blocks loaded from host memory.
    pub cpu: u32,
    /// Past `gpu`, blocks loaded from a slower tier.
    pub storage: u32,
    /// The replica's pool as the index saw it at the lookup (`None` when not looked up).
    pub room: Option<PoolRoom>,
}

/// A replica's KV pool as the index sees it: how much a new prompt can take before blocks are
/// evicted, and how much its cached blocks have been reused lately. Routing prices the eviction
/// a placement causes from these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolRoom {
    /// Blocks the pool can fill without evicting a cached one.
    pub free_blocks: u32,
    /// How likely the replica's next evicted blocks are to be asked for again, in thousandths
    /// (0..=1000): the share of the blocks routed to it that it already held, each weighted by
    /// how near eviction it was ([`ReplicaBlocks::reuse`](super::ReplicaBlocks::reuse)). 1000
    /// before anything was routed (an unmeasured cache is assumed to be worth keeping).
    pub reuse_permille: u16,
}

impl HeldBlocks {
    /// `blocks` leading blocks, all in the GPU cache (saturating at `u32::MAX`).
    pub fn on_gpu(blocks: usize) -> HeldBlocks {
        HeldBlocks {
            gpu: saturate(blocks),
            ..HeldBlocks::default()
        }
    }

    /// Every held block, whatever its tier (the sum cannot overflow: at most three `u32`s).
    pub fn total(&self) -> usize {
        self.gpu as usize + self.cpu as usize + self.storage as usize
    }
}

impl From<MirrorMatch> for HeldBlocks {
    /// The mirror's answer, each count saturating at `u32::MAX`.
    fn from(m: MirrorMatch) -> HeldBlocks {
        HeldBlocks {
            gpu: saturate(m.gpu),
            cpu: saturate(m.cpu),
            storage: saturate(m.storage),
            room: None,
        }
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_convert_and_saturate() {
        let m = MirrorMatch {
            gpu: 3,
            cpu: 2,
            storage: usize::MAX,
        };
        let h = HeldBlocks::from(m);
        assert_eq!((h.gpu, h.cpu, h.storage), (3, 2, u32::MAX));
        assert_eq!(h.total(), 5 + u32::MAX as usize);
        assert_eq!(
            HeldBlocks::on_gpu(7),
            HeldBlocks {
                gpu: 7,
                cpu: 0,
                storage: 0,
                room: None,
            }
        );
        assert_eq!(HeldBlocks::on_gpu(usize::MAX).gpu, u32::MAX);
    }
}
