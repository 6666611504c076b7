//! W5: few-shot evaluation. A fixed instruction and `shots` worked examples, shared by every
//! request, then each request's own question.

use std::ops::RangeInclusive;

use serde_json::Value;

use super::text::{self, sub_seed};
use super::{message, Options, Request};
use crate::schedule::SplitMix64;

/// W5's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct FewShot {
    /// Worked examples (a user question and an assistant answer each).
    pub shots: usize,
    /// Size of the instruction (the system message), in tokens.
    pub instruction_tokens: usize,
    /// Size of a question, the examples' and the requests' own, in tokens (uniform).
    pub question_tokens: RangeInclusive<usize>,
    /// Size of an example's answer, in tokens (uniform).
    pub answer_tokens: RangeInclusive<usize>,
}

impl Default for FewShot {
    /// 5 shots, a 100-token instruction, 50–150-token questions, 5–30-token answers.
    fn default() -> FewShot {
        FewShot {
            shots: 5,
            instruction_tokens: 100,
            question_tokens: 50..=150,
            answer_tokens: 5..=30,
        }
    }
}

impl FewShot {
    /// The messages every request of a run seeded with `seed` starts with: the instruction,
    /// then the examples.
    pub fn prefix(&self, seed: u64) -> Vec<Value> {
        let mut rng = SplitMix64::new(sub_seed(seed, 0x4653));
        let mut out = vec![message(
            "system",
            text::words(&mut rng, self.instruction_tokens),
        )];
        for _ in 0..self.shots {
            let q = rng.between(*self.question_tokens.start(), *self.question_tokens.end());
            out.push(message("user", text::words(&mut rng, q)));
            let a = rng.between(*self.answer_tokens.start(), *self.answer_tokens.end());
            out.push(message("assistant", text::words(&mut rng, a)));
        }
        out
    }

    /// `n` requests drawn from `seed`.
    pub fn requests(&self, n: usize, seed: u64, options: &Options) -> Vec<Request> {
        let prefix = self.prefix(seed);
        let mut rng = SplitMix64::new(sub_seed(seed, 0x5155));
        (0..n)
            .map(|_| {
                let q = rng.between(*self.question_tokens.start(), *self.question_tokens.end());
                let mut messages = prefix.clone();
                messages.push(message("user", text::words(&mut rng, q)));
                Request::single(options, messages)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::tests::{body, contents};
    use crate::workload::text::count_tokens;
    use std::collections::HashSet;

    #[test]
    fn examples_are_shared_and_questions_unique() {
        let w = FewShot::default();
        let prefix = w.prefix(4);
        assert_eq!(prefix.len(), 11);
        let reqs = w.requests(500, 4, &Options::default());
        let mut questions = HashSet::new();
        for r in &reqs {
            let b = body(r);
            let m = b["messages"].as_array().cloned().unwrap_or_default();
            assert_eq!(m.len(), 12);
            assert_eq!(m[..11], prefix[..]);
            let c = contents(&b);
            assert_eq!(c[11].0, "user");
            assert!((50..=150).contains(&count_tokens(&c[11].1)));
            assert!(questions.insert(c[11].1.clone()), "unique question");
        }
    }
}
