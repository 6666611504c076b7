//! A/B traffic split between routing policies: every conversation is assigned to one arm by a
//! stable hash of its key, so all requests of a conversation see the same policy and the arms
//! receive traffic in proportion to their weights.

use inferrail_config::PolicyKind;

/// Salt for [`Arms::choose`]; other users of [`stable_hash64`] pass their own so their decisions
/// are independent of the arm a key lands in.
pub const SPLIT_SALT: u64 = 0;

/// Why a list of weights is not a valid split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// No arm at all.
    #[error("a split needs at least one arm")]
    Empty,
    /// Several arms whose weights do not add up to 100.
    #[error("split weights must sum to 100 percent, got {0}")]
    BadSum(u64),
}

/// The arms of a split: policies with their share of conversations in percent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arms {
    /// The policy of each arm, in the order given.
    kinds: Vec<PolicyKind>,
    /// Cumulative weights: arm `i` owns the buckets `cumulative[i-1]..cumulative[i]` of 100.
    cumulative: Vec<u32>,
}

impl Arms {
    /// Builds the arms from `(policy, percent)` pairs. Several arms must sum to exactly 100; a
    /// single arm is no split and takes every key whatever its weight.
    pub fn new(weights: &[(PolicyKind, u32)]) -> Result<Arms, SplitError> {
        match weights {
            [] => Err(SplitError::Empty),
            [(kind, _)] => Ok(Arms {
                kinds: vec![*kind],
                cumulative: vec![100],
            }),
            _ => {
                let sum: u64 = weights.iter().map(|(_, w)| u64::from(*w)).sum();
                if sum != 100 {
                    return Err(SplitError::BadSum(sum));
                }
                let mut acc = 0u32;
                let cumulative = weights
                    .iter()
                    .map(|(_, w)| {
                        acc += w;
                        acc
                    })
                    .collect();
                Ok(Arms {
                    kinds: weights.iter().map(|(k, _)| *k).collect(),
                    cumulative,
                })
            }
        }
    }

    /// Number of arms (at least one).
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Always false: a valid split has at least one arm (here for API symmetry with `len`).
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// Whether there is more than one arm (a single arm is no split).
    pub fn is_split(&self) -> bool {
        self.kinds.len() > 1
    }

    /// The policy of arm `arm`, or `None` when out of range.
    pub fn kind(&self, arm: usize) -> Option<PolicyKind> {
        self.kinds.get(arm).copied()
    }

    /// The arm for `key`: the same key always gets the same arm (across processes and releases,
    /// the hash being fixed), keys spread over arms in proportion to their weights, and an arm
    /// of weight 0 is never returned.
    pub fn choose(&self, key: &[u8]) -> usize {
        if self.kinds.len() <= 1 {
            return 0;
        }
        let h = stable_hash64(SPLIT_SALT, key);
        // Multiply-shift maps the hash uniformly onto 0..100.
        let bucket = ((u128::from(h) * 100) >> 64) as u32;
        self.cumulative
            .iter()
            .position(|c| bucket < *c)
            .unwrap_or(self.kinds.len() - 1)
    }
}

/// The key a conversation is split (and sampled) on: the `x-session-id` header when present and
/// non-empty, else the body's `user`, else the request id (so requests without a conversation
/// are spread one by one).
pub fn conversation_key<'a>(
    session_header: Option<&'a [u8]>,
    user: Option<&'a str>,
    request_id: &'a str,
) -> &'a [u8] {
    named_conversation(session_header, user).unwrap_or(request_id.as_bytes())
}

/// The conversation a request names, if any: the `x-session-id` header when present and
/// non-empty, else the body's non-empty `user` (what session affinity follows).
pub fn named_conversation<'a>(
    session_header: Option<&'a [u8]>,
    user: Option<&'a str>,
) -> Option<&'a [u8]> {
    match (session_header, user) {
        (Some(s), _) if !s.is_empty() => Some(s),
        (_, Some(u)) if !u.is_empty() => Some(u.as_bytes()),
        _ => None,
    }
}

/// Salt of a conversation's hash in the session table.
const SESSION_SALT: u64 = 0x5345_5353_494f_4e01;

/// The session-table hash of a conversation key (see [`conversation_key`]).
pub fn session_hash(key: &[u8]) -> u64 {
    stable_hash64(SESSION_SALT, key)
}

/// A stable 64-bit hash of `bytes` (FNV-1a 64 over `salt` then the bytes, finished with the
/// murmur3 avalanche so every output bit depends on every input bit). It never changes between
/// releases or machines: split arms, sampling and shadow seeds recorded in logs depend on it.
pub fn stable_hash64(salt: u64, bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for b in salt.to_le_bytes().iter().chain(bytes) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(PRIME);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn random_key(rng: &mut Rng) -> Vec<u8> {
        let len = 4 + rng.below(28);
        (0..len).map(|_| rng.next_u64() as u8).collect()
    }

    #[test]
    fn same_key_same_arm() {
        let arms = Arms::new(&[
            (PolicyKind::P2c, 30),
            (PolicyKind::RoundRobin, 30),
            (PolicyKind::Random, 40),
        ])
        .unwrap();
        let mut rng = Rng::new(5);
        for _ in 0..1000 {
            let key = random_key(&mut rng);
            let again = key.clone();
            assert_eq!(arms.choose(&key), arms.choose(&again));
            assert!(arms.choose(&key) < 3);
        }
        // Pinned values: the hash must not change between releases.
        assert_eq!(stable_hash64(0, b""), 0x7bd3_144f_29c0_cc9e);
        assert_eq!(stable_hash64(0, b"a"), 0x6df9_901e_e878_b6be);
        assert_eq!(stable_hash64(1, b"a"), 0xdea1_3a43_1626_96b9);
        assert_eq!(stable_hash64(0, b"session-1"), 0x06b9_752c_4732_a3d8);
    }

    #[test]
    fn spreads_by_weight() {
        let arms = Arms::new(&[(PolicyKind::P2c, 75), (PolicyKind::LeastRequest, 25)]).unwrap();
        let mut rng = Rng::new(11);
        let n = 20_000;
        let first = (0..n)
            .filter(|_| arms.choose(&random_key(&mut rng)) == 0)
            .count();
        let pct = first as f64 * 100.0 / n as f64;
        assert!((73.0..=77.0).contains(&pct), "{pct}");
    }

    #[test]
    fn zero_weight_never_chosen() {
        let arms = Arms::new(&[
            (PolicyKind::Random, 0),
            (PolicyKind::P2c, 100),
            (PolicyKind::RoundRobin, 0),
        ])
        .unwrap();
        let mut rng = Rng::new(3);
        for _ in 0..5000 {
            assert_eq!(arms.choose(&random_key(&mut rng)), 1);
        }
        assert_eq!(arms.kind(1), Some(PolicyKind::P2c));
    }

    #[test]
    fn validation_and_single_arm() {
        assert_eq!(Arms::new(&[]), Err(SplitError::Empty));
        assert_eq!(
            Arms::new(&[(PolicyKind::P2c, 50), (PolicyKind::Random, 40)]),
            Err(SplitError::BadSum(90))
        );
        let one = Arms::new(&[(PolicyKind::Random, 7)]).unwrap();
        assert!(!one.is_split() && !one.is_empty() && one.len() == 1);
        assert_eq!(one.choose(b"anything"), 0);
    }

    #[test]
    fn conversation_key_precedence() {
        assert_eq!(
            conversation_key(Some(b"s1"), Some("u"), "req"),
            b"s1".as_slice()
        );
        assert_eq!(conversation_key(None, Some("u"), "req"), b"u".as_slice());
        assert_eq!(
            conversation_key(Some(b""), Some(""), "req"),
            b"req".as_slice()
        );
        assert_eq!(conversation_key(None, None, "req"), b"req".as_slice());
    }
}
