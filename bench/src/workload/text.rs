//! Synthetic text whose token count is known exactly, and the Zipf sampler the workloads share.
//!
//! Every word of [`WORDS`] followed by one space is exactly one token of the simulator's builtin
//! tokenizer (`tokenizer: builtin:sim`): the list is the lower-case part of that tokenizer's
//! English word list (`shards/src/builtin/vocab.rs`, `ENGLISH`), copied so that the bench crate
//! does not depend on the tokenizer crate. A test checks that the two lists still agree.

use crate::schedule::SplitMix64;

/// Words that are one builtin-tokenizer token each when followed by a space.
pub const WORDS: [&str; 226] = [
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on",
    "are", "with", "as", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had",
    "by", "not", "word", "but", "what", "some", "we", "can", "out", "other", "were", "all",
    "there", "when", "up", "use", "your", "how", "said", "an", "each", "she", "which", "do",
    "their", "time", "if", "will", "way", "about", "many", "then", "them", "write", "would",
    "like", "so", "these", "her", "long", "make", "thing", "see", "him", "two", "has", "look",
    "more", "day", "could", "go", "come", "did", "number", "sound", "no", "most", "people", "my",
    "over", "know", "water", "than", "call", "first", "who", "may", "down", "side", "been", "now",
    "find", "any", "new", "work", "part", "take", "get", "place", "made", "live", "where", "after",
    "back", "little", "only", "round", "man", "year", "came", "show", "every", "good", "me",
    "give", "our", "under", "name", "very", "through", "just", "form", "great", "think", "say",
    "help", "low", "line", "turn", "cause", "much", "mean", "before", "move", "right", "old",
    "too", "same", "tell", "does", "set", "three", "want", "well", "also", "play", "small", "end",
    "put", "home", "read", "hand", "large", "add", "even", "land", "here", "must", "big", "high",
    "such", "why", "ask", "change", "went", "light", "kind", "off", "need", "house", "try", "us",
    "again", "point", "world", "near", "build", "should", "found", "answer", "school", "grow",
    "still", "learn", "food", "four", "between", "state", "keep", "never", "last", "let",
    "thought", "city", "tree", "start", "might", "story", "far", "left", "run", "while", "close",
    "night", "real", "life", "few", "model", "token", "request", "server", "user", "system",
    "data", "cache", "prompt", "hello", "please", "thanks",
];

/// `n` words drawn uniformly from [`WORDS`], each followed by a space: exactly `n` tokens.
pub(crate) fn words(rng: &mut SplitMix64, n: usize) -> String {
    let mut s = String::with_capacity(n * 6);
    for _ in 0..n {
        s.push_str(WORDS[rng.below(WORDS.len())]);
        s.push(' ');
    }
    s
}

/// Tokens in text made of [`WORDS`] (one per whitespace-separated word).
pub fn count_tokens(text: &str) -> usize {
    text.split_whitespace().count()
}

/// A seed for an independent stream `stream` of a run seeded with `seed`.
pub(crate) fn sub_seed(seed: u64, stream: u64) -> u64 {
    let mut rng = SplitMix64::new(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
    rng.next_u64()
}

/// Zipf-distributed ranks: rank `r` (from 0) has probability proportional to `1 / (r + 1)^s`.
#[derive(Debug, Clone)]
pub(crate) struct Zipf {
    /// Cumulative probabilities, the last one 1.
    cdf: Vec<f64>,
}

impl Zipf {
    /// Over `n` ranks (at least one) with exponent `s` (not a number counts as 0: uniform).
    pub(crate) fn new(n: usize, s: f64) -> Zipf {
        let s = if s.is_nan() { 0.0 } else { s };
        let weights: Vec<f64> = (1..=n.max(1)).map(|r| (r as f64).powf(-s)).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        Zipf { cdf }
    }

    /// The probability of rank `r`.
    #[cfg(test)]
    pub(crate) fn probability(&self, r: usize) -> f64 {
        match r {
            0 => self.cdf.first().copied().unwrap_or(0.0),
            _ if r < self.cdf.len() => self.cdf[r] - self.cdf[r - 1],
            _ => 0.0,
        }
    }

    /// One rank.
    pub(crate) fn sample(&self, rng: &mut SplitMix64) -> usize {
        let u = rng.next_unit();
        self.cdf
            .partition_point(|c| *c <= u)
            .min(self.cdf.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_the_builtin_tokenizers_english_words() {
        let vocab = include_str!("../../../shards/src/builtin/vocab.rs");
        let start = vocab.find("const ENGLISH").expect("ENGLISH list");
        let end = start + vocab[start..].find("];").expect("end of list");
        let english: Vec<&str> = vocab[start..end].split('"').skip(1).step_by(2).collect();
        for w in WORDS {
            assert!(english.contains(&w), "{w} is not in ENGLISH");
            // A word piece is 2..=8 bytes with its space, and only the space terminates it.
            assert!((1..=7).contains(&w.len()), "{w}");
            assert!(w.chars().all(|c| c.is_ascii_lowercase()), "{w}");
        }
        let mut sorted = WORDS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), WORDS.len(), "no duplicates");
    }

    #[test]
    fn words_have_the_asked_token_count() {
        let mut rng = SplitMix64::new(1);
        for n in [0, 1, 50, 2000] {
            let s = words(&mut rng, n);
            assert_eq!(count_tokens(&s), n);
            assert!(n == 0 || s.ends_with(' '));
        }
    }

    #[test]
    fn zipf_matches_its_probabilities() {
        let z = Zipf::new(4, 1.1);
        let h: f64 = (1..=4).map(|r| (r as f64).powf(-1.1)).sum();
        assert!((z.probability(0) - 1.0 / h).abs() < 1e-12);
        let total: f64 = (0..4).map(|r| z.probability(r)).sum();
        assert!((total - 1.0).abs() < 1e-12);
        let mut rng = SplitMix64::new(3);
        let mut counts = [0usize; 4];
        for _ in 0..100_000 {
            counts[z.sample(&mut rng)] += 1;
        }
        for (r, c) in counts.iter().enumerate() {
            let share = *c as f64 / 100_000.0;
            assert!((share - z.probability(r)).abs() < 0.01, "rank {r}: {share}");
        }
        assert_eq!(Zipf::new(0, 1.0).sample(&mut rng), 0);
    }

    #[test]
    fn sub_seeds_differ_by_stream_and_seed() {
        assert_ne!(sub_seed(1, 1), sub_seed(1, 2));
        assert_ne!(sub_seed(1, 1), sub_seed(2, 1));
        assert_eq!(sub_seed(5, 9), sub_seed(5, 9));
    }
}
