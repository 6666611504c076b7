//! The fleets the index benchmarks ask (included with `#[path]` by the shards benches): how much
//! of one asked prompt each of 64 replicas holds, per scenario.

use super::timing::Rng;

/// Replicas in a benchmark fleet.
pub const REPLICAS: usize = 64;
/// Blocks of the asked prompt.
pub const PROMPT_BLOCKS: usize = 512;

/// How many leading blocks of the asked prompt each replica holds, per scenario.
pub fn held_prefixes(scenario: &str, rng: &mut Rng) -> Vec<usize> {
    (0..REPLICAS)
        .map(|r| match scenario {
            "cold" => 0,
            "all" => PROMPT_BLOCKS,
            // A realistic fleet: a quarter cold, a quarter with the 32-block system prompt, a
            // quarter somewhere in the conversation, a quarter holding all of it.
            _ => match r % 4 {
                0 => 0,
                1 => 32,
                2 => (rng.next() % PROMPT_BLOCKS as u64) as usize,
                _ => PROMPT_BLOCKS,
            },
        })
        .collect()
}
