//! W3: agent loops. Every step resends the episode's whole context (shared tool definitions,
//! a shared system prompt, the task, then each earlier step's tool call and tool result), so the
//! context grows with every step over a prefix every episode shares.

use std::ops::RangeInclusive;
use std::time::Duration;

use serde_json::{json, Value};

use super::text::{self, sub_seed};
use super::{chat_body, message, think, Options, Position, Request, CHAT_PATH};
use crate::schedule::SplitMix64;

/// The tools every episode offers: name and the name of its one string parameter.
const TOOLS: [(&str, &str); 6] = [
    ("search", "query"),
    ("read_file", "path"),
    ("write_file", "path"),
    ("run_code", "code"),
    ("list_dir", "path"),
    ("fetch_url", "url"),
];

/// How tool definitions and calls are written into the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolStyle {
    /// OpenAI style: a `tools` array in the body, assistant messages with `tool_calls`, results
    /// as `tool` messages. For real engines with a tool parser; `inferrail-sim`, like vLLM
    /// without one, refuses `tools` unless `tool_choice` is "none", and refuses `tool_calls`.
    Native,
    /// Everything as plain text, which any chat endpoint accepts: the tool definitions (as
    /// JSON) follow the system prompt in the system message, a call is an assistant message
    /// holding the call as JSON, a result is a `user` message.
    Inline,
}

/// W3's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    /// How tools appear in the body.
    pub style: ToolStyle,
    /// Size of the shared system prompt, in tokens.
    pub system_tokens: usize,
    /// Requests (steps) per episode (uniform).
    pub steps: RangeInclusive<usize>,
    /// Size of the task, the episode's first user message, in tokens (uniform).
    pub task_tokens: RangeInclusive<usize>,
    /// Size of a call's argument, in tokens (uniform).
    pub argument_tokens: RangeInclusive<usize>,
    /// Size of a tool result, in tokens (uniform).
    pub result_tokens: RangeInclusive<usize>,
    /// Time the tool takes before the next step (uniform, millisecond resolution).
    pub tool_time: RangeInclusive<Duration>,
}

impl Default for Agent {
    /// Native tools, a 1,500-token system prompt, 3–10 steps, 50–200-token tasks, 3–10-token
    /// arguments, 100–800-token results, 0.2–2 s per tool.
    fn default() -> Agent {
        Agent {
            style: ToolStyle::Native,
            system_tokens: 1500,
            steps: 3..=10,
            task_tokens: 50..=200,
            argument_tokens: 3..=10,
            result_tokens: 100..=800,
            tool_time: Duration::from_millis(200)..=Duration::from_secs(2),
        }
    }
}

impl Agent {
    /// The shared tool definitions (OpenAI `tools` array) of a run seeded with `seed`.
    pub fn tools(&self, seed: u64) -> Value {
        let mut rng = SplitMix64::new(sub_seed(seed, 0x544f));
        let tools: Vec<Value> = TOOLS
            .iter()
            .map(|(name, param)| {
                json!({"type": "function", "function": {
                    "name": name,
                    "description": text::words(&mut rng, 40),
                    "parameters": {
                        "type": "object",
                        "properties": {*param: {"type": "string", "description": text::words(&mut rng, 12)}},
                        "required": [param],
                    },
                }})
            })
            .collect();
        Value::Array(tools)
    }

    /// The system message every request starts with.
    fn system(&self, seed: u64, tools: &Value) -> Value {
        let mut rng = SplitMix64::new(sub_seed(seed, 0x4153));
        let prompt = text::words(&mut rng, self.system_tokens);
        match self.style {
            ToolStyle::Native => message("system", prompt),
            ToolStyle::Inline => message("system", format!("{prompt}\n{tools}\n")),
        }
    }

    /// The two messages one step appends: the call and its result.
    fn step(&self, rng: &mut SplitMix64, episode: usize, step: usize) -> [Value; 2] {
        let (name, param) = TOOLS[rng.below(TOOLS.len())];
        let size = rng.between(*self.argument_tokens.start(), *self.argument_tokens.end());
        let arguments = json!({param: text::words(rng, size)}).to_string();
        let size = rng.between(*self.result_tokens.start(), *self.result_tokens.end());
        let result = text::words(rng, size);
        let id = format!("call_{episode}_{step}");
        match self.style {
            ToolStyle::Native => [
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}},
                ]}),
                json!({"role": "tool", "tool_call_id": id, "content": result}),
            ],
            ToolStyle::Inline => [
                message(
                    "assistant",
                    json!({"name": name, "arguments": arguments}).to_string(),
                ),
                message("user", result),
            ],
        }
    }

    /// `n` requests drawn from `seed`: whole episodes, the last one cut at `n`.
    pub fn requests(&self, n: usize, seed: u64, options: &Options) -> Vec<Request> {
        let tools = self.tools(seed);
        let system = self.system(seed, &tools);
        let body_tools = match self.style {
            ToolStyle::Native => Some(&tools),
            ToolStyle::Inline => None,
        };
        let mut rng = SplitMix64::new(sub_seed(seed, 0x5733));
        let mut out = Vec::with_capacity(n);
        let mut episode = 0;
        while out.len() < n {
            let session = format!("w3-{seed:016x}-{episode}");
            let steps = rng.between(*self.steps.start(), *self.steps.end()).max(1);
            let size = rng.between(*self.task_tokens.start(), *self.task_tokens.end());
            let mut context = vec![system.clone(), message("user", text::words(&mut rng, size))];
            for step in 0..steps.min(n - out.len()) {
                let think_time = match step {
                    0 => Duration::ZERO,
                    _ => {
                        context.extend(self.step(&mut rng, episode, step));
                        think(&mut rng, *self.tool_time.start(), *self.tool_time.end())
                    }
                };
                out.push(Request {
                    path: CHAT_PATH,
                    body: chat_body(options, context.clone(), body_tools),
                    session_id: Some(session.clone()),
                    position: Some(Position {
                        conversation: episode,
                        turn: step,
                    }),
                    think_time,
                });
            }
            episode += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::tests::body;

    fn messages(v: &Value) -> Vec<Value> {
        v["messages"].as_array().cloned().unwrap_or_default()
    }

    #[test]
    fn context_grows_over_the_same_tools_and_system_prompt() {
        for style in [ToolStyle::Native, ToolStyle::Inline] {
            let agent = Agent {
                style,
                ..Agent::default()
            };
            let reqs = agent.requests(300, 8, &Options::default());
            assert_eq!(reqs.len(), 300);
            let first = body(&reqs[0]);
            let system = messages(&first)[0].clone();
            assert_eq!(system["role"], "system");
            for r in &reqs {
                let b = body(r);
                assert_eq!(messages(&b)[0], system, "same system prompt first");
                match style {
                    ToolStyle::Native => assert_eq!(b["tools"], agent.tools(8)),
                    ToolStyle::Inline => assert!(b.get("tools").is_none()),
                }
            }
            for pair in reqs.windows(2) {
                let (a, b) = (&pair[0], &pair[1]);
                let (pa, pb) = (a.position.expect("position"), b.position.expect("position"));
                if pb.conversation != pa.conversation {
                    assert_eq!(pb.turn, 0);
                    assert_ne!(a.session_id, b.session_id);
                    continue;
                }
                assert_eq!(pb.turn, pa.turn + 1);
                assert_eq!(a.session_id, b.session_id);
                assert!(agent.tool_time.contains(&b.think_time));
                let (ma, mb) = (messages(&body(a)), messages(&body(b)));
                assert_eq!(mb.len(), ma.len() + 2, "a call and its result");
                assert_eq!(mb[..ma.len()], ma[..], "the earlier context is resent");
                assert!(b.body.len() > a.body.len());
                assert_eq!(mb[ma.len()]["role"], "assistant");
                if style == ToolStyle::Native {
                    let call = &mb[ma.len()]["tool_calls"][0];
                    assert_eq!(mb[ma.len() + 1]["tool_call_id"], call["id"]);
                    let args = call["function"]["arguments"].as_str().unwrap_or("");
                    assert!(serde_json::from_str::<Value>(args).is_ok(), "{args}");
                }
            }
        }
    }
}
