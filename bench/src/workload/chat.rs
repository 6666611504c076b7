//! W2: multi-turn chats. Every turn resends the whole conversation so far, after a think time,
//! under the conversation's own session id.

use std::ops::RangeInclusive;
use std::time::Duration;

use serde_json::Value;

use super::text::{self, sub_seed};
use super::{chat_body, message, think, Options, Position, Request, CHAT_PATH};
use crate::schedule::SplitMix64;

/// W2's shape. Assistant replies are generated too: the replay resends the same text whatever
/// the target answered, so a turn's history is known before the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Chat {
    /// Turns per conversation (uniform).
    pub turns: RangeInclusive<usize>,
    /// User message size, in tokens (uniform).
    pub user_tokens: RangeInclusive<usize>,
    /// Assistant reply size, in tokens (uniform).
    pub reply_tokens: RangeInclusive<usize>,
    /// Think time before every turn but the first (uniform, millisecond resolution).
    pub think_time: RangeInclusive<Duration>,
}

impl Default for Chat {
    /// 2–8 turns, 20–200-token user messages, 50–300-token replies, 10–20 s think time.
    fn default() -> Chat {
        Chat {
            turns: 2..=8,
            user_tokens: 20..=200,
            reply_tokens: 50..=300,
            think_time: Duration::from_secs(10)..=Duration::from_secs(20),
        }
    }
}

impl Chat {
    /// `n` requests drawn from `seed`: whole conversations, the last one cut at `n`.
    pub fn requests(&self, n: usize, seed: u64, options: &Options) -> Vec<Request> {
        let mut rng = SplitMix64::new(sub_seed(seed, 0x5732));
        let mut out = Vec::with_capacity(n);
        let mut conversation = 0;
        while out.len() < n {
            let session = format!("w2-{seed:016x}-{conversation}");
            let turns = rng.between(*self.turns.start(), *self.turns.end()).max(1);
            let mut history: Vec<Value> = Vec::new();
            for turn in 0..turns.min(n - out.len()) {
                let size = rng.between(*self.user_tokens.start(), *self.user_tokens.end());
                history.push(message("user", text::words(&mut rng, size)));
                let think_time = match turn {
                    0 => Duration::ZERO,
                    _ => think(&mut rng, *self.think_time.start(), *self.think_time.end()),
                };
                out.push(Request {
                    path: CHAT_PATH,
                    body: chat_body(options, history.clone(), None),
                    session_id: Some(session.clone()),
                    position: Some(Position { conversation, turn }),
                    think_time,
                });
                let size = rng.between(*self.reply_tokens.start(), *self.reply_tokens.end());
                history.push(message("assistant", text::words(&mut rng, size)));
            }
            conversation += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::tests::{body, contents};

    #[test]
    fn turns_resend_a_growing_history_under_one_session() {
        let reqs = Chat::default().requests(500, 4, &Options::default());
        assert_eq!(reqs.len(), 500);
        let mut conversations = 0;
        for pair in reqs.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let (pa, pb) = (a.position.expect("position"), b.position.expect("position"));
            if pb.conversation != pa.conversation {
                assert_eq!(pb.conversation, pa.conversation + 1);
                assert_eq!(pb.turn, 0);
                assert_eq!(b.think_time, Duration::ZERO);
                assert_ne!(a.session_id, b.session_id);
                conversations += 1;
                continue;
            }
            assert_eq!(pb.turn, pa.turn + 1);
            assert_eq!(a.session_id, b.session_id);
            assert!(
                (Duration::from_secs(10)..=Duration::from_secs(20)).contains(&b.think_time),
                "{:?}",
                b.think_time
            );
            // The next turn resends this one, its reply and one new user message.
            let (ca, cb) = (contents(&body(a)), contents(&body(b)));
            assert_eq!(cb.len(), ca.len() + 2);
            assert_eq!(cb[..ca.len()], ca[..]);
            assert_eq!(cb[ca.len()].0, "assistant");
            assert_eq!(cb[ca.len() + 1].0, "user");
            assert!(b.body.len() > a.body.len());
        }
        // 2..=8 turns, 5 on average: about 100 conversations.
        assert!((60..140).contains(&conversations), "{conversations}");
        assert!(reqs.iter().all(|r| r.session_id.is_some()));
    }
}
