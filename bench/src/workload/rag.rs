//! W4: retrieval-augmented generation over a fixed corpus whose document popularity is Zipf.

use std::ops::RangeInclusive;

use super::text::{self, sub_seed, Zipf};
use super::{message, Options, Request};
use crate::schedule::SplitMix64;

/// W4's shape: each request is a shared system prompt, then one user message holding `k`
/// distinct documents (picked by Zipf over the corpus, document `d` of rank `d`) and a question.
#[derive(Debug, Clone, PartialEq)]
pub struct Rag {
    /// Documents in the corpus.
    pub documents: usize,
    /// Documents per request (at most `documents`).
    pub k: usize,
    /// Zipf exponent of document popularity.
    pub zipf: f64,
    /// Size of the shared system prompt, in tokens.
    pub system_tokens: usize,
    /// Document size, in tokens (uniform, fixed per document).
    pub document_tokens: RangeInclusive<usize>,
    /// Question size, in tokens (uniform).
    pub question_tokens: RangeInclusive<usize>,
}

impl Default for Rag {
    /// 2,000 documents of 100–400 tokens, k = 3, Zipf exponent 1, a 200-token system prompt,
    /// 20–100-token questions.
    fn default() -> Rag {
        Rag {
            documents: 2000,
            k: 3,
            zipf: 1.0,
            system_tokens: 200,
            document_tokens: 100..=400,
            question_tokens: 20..=100,
        }
    }
}

impl Rag {
    /// Document `d` of the corpus of a run seeded with `seed`.
    pub fn document(&self, seed: u64, d: usize) -> String {
        let mut rng = SplitMix64::new(sub_seed(sub_seed(seed, 0x444f), d as u64));
        let size = rng.between(*self.document_tokens.start(), *self.document_tokens.end());
        text::words(&mut rng, size)
    }

    /// The documents of each of `n` requests, in the order they appear in the prompt.
    pub fn picks(&self, n: usize, seed: u64) -> Vec<Vec<usize>> {
        let documents = self.documents.max(1);
        let k = self.k.min(documents);
        let zipf = Zipf::new(documents, self.zipf);
        let mut rng = SplitMix64::new(sub_seed(seed, 0x5049));
        (0..n)
            .map(|_| {
                let mut picked = Vec::with_capacity(k);
                while picked.len() < k {
                    let d = zipf.sample(&mut rng);
                    if !picked.contains(&d) {
                        picked.push(d);
                    }
                }
                picked
            })
            .collect()
    }

    /// `n` requests drawn from `seed`.
    pub fn requests(&self, n: usize, seed: u64, options: &Options) -> Vec<Request> {
        let mut rng = SplitMix64::new(sub_seed(seed, 0x5359));
        let system = text::words(&mut rng, self.system_tokens);
        let mut corpus: Vec<Option<String>> = vec![None; self.documents.max(1)];
        let mut rng = SplitMix64::new(sub_seed(seed, 0x5155));
        self.picks(n, seed)
            .into_iter()
            .map(|picked| {
                let mut user = String::new();
                for d in picked {
                    let doc = corpus[d].get_or_insert_with(|| self.document(seed, d));
                    user.push_str(doc);
                    user.push_str("\n\n");
                }
                let size = rng.between(*self.question_tokens.start(), *self.question_tokens.end());
                user.push_str(&text::words(&mut rng, size));
                Request::single(
                    options,
                    vec![message("system", system.as_str()), message("user", user)],
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::tests::{body, contents};

    #[test]
    fn document_popularity_is_zipf_over_the_whole_corpus() {
        let rag = Rag::default();
        let picks = rag.picks(20_000, 5);
        let mut counts = vec![0usize; 2000];
        for p in &picks {
            assert_eq!(p.len(), 3);
            assert!(
                p[0] != p[1] && p[1] != p[2] && p[0] != p[2],
                "distinct: {p:?}"
            );
            for d in p {
                counts[*d] += 1;
            }
        }
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let median = sorted[1000].max(1);
        // Rank 1 has 1000 times the weight of rank 1000; distinct picks flatten the top a bit.
        assert!(
            counts[0] > 100 * median,
            "top {} median {median}",
            counts[0]
        );
        assert!(
            counts[0] > counts[1] && counts[1] > counts[3],
            "{:?}",
            &counts[..4]
        );
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((1.5..2.5).contains(&ratio), "rank 1 / rank 2 {ratio}");
        // The tail is reached: most documents are picked at least once.
        let used = counts.iter().filter(|c| **c > 0).count();
        assert!(used > 1500, "{used} documents used");
    }

    #[test]
    fn requests_hold_their_documents_and_share_the_system_prompt() {
        let rag = Rag::default();
        let reqs = rag.requests(200, 2, &Options::default());
        let picks = rag.picks(200, 2);
        let system = contents(&body(&reqs[0]))[0].1.clone();
        for (r, p) in reqs.iter().zip(&picks) {
            let c = contents(&body(r));
            assert_eq!(c[0], ("system".to_string(), system.clone()));
            let mut parts = c[1].1.split("\n\n");
            for d in p {
                assert_eq!(parts.next(), Some(rag.document(2, *d).as_str()));
            }
            assert!(parts.next().is_some_and(|q| !q.is_empty()), "a question");
        }
    }
}
