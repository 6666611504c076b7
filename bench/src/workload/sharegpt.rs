//! W2 from recorded chats: a loader for ShareGPT-format JSON and its turn-by-turn replay.
//!
//! The format is a list of `{"conversations": [{"from": "human", "value": "..."},
//! {"from": "gpt", "value": "..."}, ...]}` (other keys are ignored). `human`/`user` become user
//! messages, `gpt`/`chatgpt`/`bard`/`assistant` assistant messages and `system` system
//! messages. The replay sends one request per user message, carrying everything before it.

use std::ops::RangeInclusive;
use std::time::Duration;

use serde::Deserialize;

use super::text::sub_seed;
use super::{chat_body, message, think, Options, Position, Request, CHAT_PATH};
use crate::schedule::SplitMix64;

/// One chat message of a recorded conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// `system`, `user` or `assistant`.
    pub role: &'static str,
    /// The text.
    pub content: String,
}

/// A file that is not ShareGPT JSON.
#[derive(Debug, thiserror::Error)]
pub enum ShareGptError {
    /// Not JSON of the expected shape.
    #[error("not ShareGPT JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A message whose `from` is none of the known roles.
    #[error("conversation {conversation}, message {message}: unknown role {from:?}")]
    Role {
        /// Index of the conversation.
        conversation: usize,
        /// Index of the message within it.
        message: usize,
        /// The `from` value.
        from: String,
    },
}

#[derive(Deserialize)]
struct Entry {
    conversations: Vec<Message>,
}

#[derive(Deserialize)]
struct Message {
    from: String,
    value: String,
}

/// Parses a ShareGPT-format file into conversations of [`Turn`]s.
pub fn parse(json: &[u8]) -> Result<Vec<Vec<Turn>>, ShareGptError> {
    let entries: Vec<Entry> = serde_json::from_slice(json)?;
    entries
        .into_iter()
        .enumerate()
        .map(|(conversation, entry)| {
            entry
                .conversations
                .into_iter()
                .enumerate()
                .map(|(i, m)| {
                    let role = match m.from.as_str() {
                        "human" | "user" => "user",
                        "gpt" | "chatgpt" | "bard" | "assistant" => "assistant",
                        "system" => "system",
                        _ => {
                            return Err(ShareGptError::Role {
                                conversation,
                                message: i,
                                from: m.from,
                            })
                        }
                    };
                    Ok(Turn {
                        role,
                        content: m.value,
                    })
                })
                .collect()
        })
        .collect()
}

/// The replay of `conversations`: for every user message, one request with all the messages up
/// to and including it, under the session id `sharegpt-<seed>-<conversation>`. Turns after the
/// first wait a think time drawn from `think_time` (seeded by `seed`). Conversations without a
/// user message send nothing.
pub fn replay(
    conversations: &[Vec<Turn>],
    think_time: RangeInclusive<Duration>,
    seed: u64,
    options: &Options,
) -> Vec<Request> {
    let mut rng = SplitMix64::new(sub_seed(seed, 0x5347));
    let mut out = Vec::new();
    for (conversation, turns) in conversations.iter().enumerate() {
        let session = format!("sharegpt-{seed:016x}-{conversation}");
        let mut turn = 0;
        for (i, t) in turns.iter().enumerate() {
            if t.role != "user" {
                continue;
            }
            let messages = turns[..=i]
                .iter()
                .map(|t| message(t.role, t.content.as_str()))
                .collect();
            out.push(Request {
                path: CHAT_PATH,
                body: chat_body(options, messages, None),
                session_id: Some(session.clone()),
                position: Some(Position { conversation, turn }),
                think_time: match turn {
                    0 => Duration::ZERO,
                    _ => think(&mut rng, *think_time.start(), *think_time.end()),
                },
            });
            turn += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::tests::{body, contents};

    const FIXTURE: &[u8] = include_bytes!("../../testdata/sharegpt_tiny.json");

    fn think_range() -> RangeInclusive<Duration> {
        Duration::from_secs(10)..=Duration::from_secs(20)
    }

    #[test]
    fn fixture_parses() {
        let c = parse(FIXTURE).expect("fixture");
        assert_eq!(c.len(), 3);
        assert_eq!(c[0][0].role, "user");
        assert_eq!(c[0][1].role, "assistant");
        assert_eq!(c[2][0].role, "system");
        assert_eq!(c.iter().map(Vec::len).collect::<Vec<_>>(), [4, 2, 5]);
    }

    #[test]
    fn replay_sends_each_user_turn_with_its_history() {
        let c = parse(FIXTURE).expect("fixture");
        let reqs = replay(&c, think_range(), 1, &Options::default());
        // 2 + 1 + 2 user messages.
        assert_eq!(reqs.len(), 5);
        let first = contents(&body(&reqs[0]));
        assert_eq!(first, [("user".to_string(), c[0][0].content.clone())]);
        let second = contents(&body(&reqs[1]));
        assert_eq!(second.len(), 3);
        assert_eq!(second[..1], first[..]);
        assert_eq!(second[2].1, c[0][2].content);
        assert_eq!(reqs[0].session_id, reqs[1].session_id);
        assert_ne!(reqs[1].session_id, reqs[2].session_id);
        assert_eq!(
            reqs[1].position,
            Some(Position {
                conversation: 0,
                turn: 1
            })
        );
        assert!(think_range().contains(&reqs[1].think_time));
        assert_eq!(reqs[2].think_time, Duration::ZERO);
        // The system message leads the third conversation's requests.
        let last = contents(&body(&reqs[4]));
        assert_eq!(last[0].0, "system");
        assert_eq!(last.len(), 4);
        assert_eq!(reqs, replay(&c, think_range(), 1, &Options::default()));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(matches!(parse(b"{}"), Err(ShareGptError::Json(_))));
        let bad =
            br#"[{"conversations":[{"from":"human","value":"hi "},{"from":"robot","value":"x"}]}]"#;
        assert!(matches!(
            parse(bad),
            Err(ShareGptError::Role {
                conversation: 0,
                message: 1,
                ..
            })
        ));
    }
}
