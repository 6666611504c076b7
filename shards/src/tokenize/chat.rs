//! vLLM's preparation of a `/v1/chat/completions` body for the chat template
//! (`parse_chat_messages`, `_postprocess_messages`, `build_chat_params` and
//! `preprocess_chat` in vLLM 0.32), as a pure function from the parsed body to the template's
//! inputs. Each rule below names the vLLM behaviour it reproduces.
//!
//! - **Content.** `null` or missing content is an empty list of parts; a string is one text
//!   part. In `string` format the text parts are joined with `\n` (so `null` becomes `""`);
//!   in `openai` format the template gets `[{"type": "text", "text": ...}]`. Text parts are
//!   `text`, `input_text`, `output_text` (their `text`), `thinking` (`thinking`) and
//!   `refusal` (`refusal`); a `text` or `refusal` part without its text is skipped. Any other
//!   part (images, audio, video, embeddings, files) makes the request [`Unpredictable::Images`].
//! - **Message keys.** Each message is rebuilt as `{role, content}` plus, for assistants,
//!   `tool_calls` (when not null) and `reasoning` / `reasoning_content` (from `reasoning`, else
//!   the deprecated `reasoning_content`); for tools `tool_call_id` (and content parts joined
//!   with `\n`); `name` and `task` when strings; `tools` for developers. Nothing else the
//!   client sent reaches the template.
//! - **Tool calls** are validated as OpenAI's typed dicts (keys `id`, `function`, `type`; the
//!   function's `arguments`, `name`, in that order); `arguments` JSON strings are parsed into
//!   objects (invalid JSON, non-objects and empty values become `{}`); an empty `tool_calls`
//!   list is dropped.
//! - **Developer role.** When the template never mentions `"developer"`, developer messages
//!   become system messages and all system messages are merged into one at the front.
//! - **Tools** are `ChatCompletionToolsParam.model_dump()`: `{"type", "function": {"name",
//!   "description", "parameters"[, "strict"][, "defer_loading"]}[, "defer_loading"]}`.
//! - **Template variables.** The tokenizer's special tokens (`bos_token`, ...), then the
//!   config's `chat_template_kwargs` and `tools`, overridden by the request's
//!   `chat_template_kwargs` and its `add_generation_prompt` (default true),
//!   `continue_final_message`, `documents`, `reasoning_effort` (and `enable_thinking` derived
//!   from it) where those are not `null` or `"auto"`. `continue_final_message` is not a
//!   template variable: it leaves the final message open (see [`super::template`]).
//! - **Refused here** (the engine refuses them or the router cannot know the result): a
//!   `chat_template` in the request or in its kwargs, both `continue_final_message` and
//!   `add_generation_prompt`, `tokenize` or `return_assistant_tokens_mask` in the kwargs.

use minijinja::value::Value;

use super::content_format::ContentFormat;
use super::error::Unpredictable;
use super::json::J;

/// What the chat template is rendered with, and how its output is encoded.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The conversation as vLLM hands it to the template.
    pub messages: Vec<J>,
    /// Every other template variable, in the order Python's `**kwargs` would set them.
    pub context: Vec<(String, J)>,
    /// Leave the final message open.
    pub continue_final_message: bool,
    /// Encode the rendered prompt with the tokenizer's special tokens (request
    /// `add_special_tokens`, default false).
    pub add_special_tokens: bool,
}

impl Prepared {
    /// The context as template values.
    pub fn context_values(&self) -> Vec<(String, Value)> {
        self.context
            .iter()
            .map(|(k, v)| (k.clone(), v.to_value()))
            .collect()
    }
}

fn invalid(why: &str) -> Unpredictable {
    Unpredictable::InvalidRequest(why.to_owned())
}

/// A pydantic-lax boolean: `true`/`false`, or the integers 0 and 1.
fn lax_bool(v: Option<&J>, default: bool, field: &str) -> Result<bool, Unpredictable> {
    match v {
        None | Some(J::Null) => Ok(default),
        Some(J::Bool(b)) => Ok(*b),
        Some(J::Int(0)) => Ok(false),
        Some(J::Int(1)) => Ok(true),
        Some(_) => Err(invalid(&format!("{field} is not a boolean"))),
    }
}

/// Prepares a chat body (already parsed) as vLLM does.
///
/// `format` is the template's content format; `mentions_developer` whether the template
/// names the `developer` role; `special_tokens` the tokenizer's named special tokens;
/// `config_kwargs` the model's `chat_template_kwargs` from config.
pub fn prepare(
    body: &J,
    format: ContentFormat,
    mentions_developer: bool,
    special_tokens: &[(String, String)],
    config_kwargs: &serde_json::Map<String, serde_json::Value>,
) -> Result<Prepared, Unpredictable> {
    if !matches!(body, J::Obj(_)) {
        return Err(Unpredictable::NotAnObject);
    }
    if body.get("chat_template").is_some_and(|t| !t.is_null()) {
        return Err(Unpredictable::TemplateInRequest);
    }
    let user_kwargs: Vec<(String, J)> = match body.get("chat_template_kwargs") {
        None | Some(J::Null) => Vec::new(),
        Some(J::Obj(m)) => m.clone(),
        Some(_) => return Err(invalid("chat_template_kwargs is not an object")),
    };
    if user_kwargs
        .iter()
        .any(|(k, v)| k == "chat_template" && !v.is_null())
    {
        return Err(Unpredictable::TemplateInRequest);
    }
    let add_generation_prompt = lax_bool(
        body.get("add_generation_prompt"),
        true,
        "add_generation_prompt",
    )?;
    let continue_final_message = lax_bool(
        body.get("continue_final_message"),
        false,
        "continue_final_message",
    )?;
    if add_generation_prompt && continue_final_message {
        return Err(invalid(
            "cannot set both continue_final_message and add_generation_prompt",
        ));
    }
    let add_special_tokens = lax_bool(body.get("add_special_tokens"), false, "add_special_tokens")?;

    let raw_messages = match body.get("messages") {
        Some(J::Arr(m)) if !m.is_empty() => m,
        _ => return Err(invalid("messages must be a non-empty list")),
    };
    let mut messages = Vec::with_capacity(raw_messages.len());
    for m in raw_messages {
        messages.push(parse_message(m, format)?);
    }
    postprocess_tool_calls(&mut messages)?;
    if !mentions_developer
        && messages
            .iter()
            .any(|m| m.get("role").and_then(J::as_str) == Some("developer"))
    {
        messages = consolidate_system(developer_to_system(messages));
    }

    let tools = match body.get("tools") {
        None | Some(J::Null) => None,
        Some(J::Arr(ts)) => Some(J::Arr(
            ts.iter().map(tool_dict).collect::<Result<Vec<_>, _>>()?,
        )),
        Some(_) => return Err(invalid("tools is not a list")),
    };

    // build_chat_params: the request's kwargs, overridden by its own fields where set.
    let mut request_kwargs = user_kwargs.clone();
    let mut extras: Vec<(String, J)> = vec![
        (
            "add_generation_prompt".into(),
            J::Bool(add_generation_prompt),
        ),
        (
            "continue_final_message".into(),
            J::Bool(continue_final_message),
        ),
    ];
    match body.get("documents") {
        None | Some(J::Null) => {}
        Some(J::Arr(docs)) if docs.iter().all(|d| matches!(d, J::Obj(_))) => {
            extras.push(("documents".into(), J::Arr(docs.clone())))
        }
        Some(_) => return Err(invalid("documents must be a list of objects")),
    }
    match body.get("reasoning_effort") {
        None | Some(J::Null) => {}
        Some(J::Str(e))
            if ["none", "minimal", "low", "medium", "high", "xhigh", "max"]
                .contains(&e.as_str()) =>
        {
            extras.push(("reasoning_effort".into(), J::Str(e.clone())));
            if !user_kwargs.iter().any(|(k, _)| k == "enable_thinking") {
                extras.push(("enable_thinking".into(), J::Bool(e != "none")));
            }
        }
        Some(_) => return Err(invalid("reasoning_effort is not valid")),
    }
    for (k, v) in extras {
        if !unset(&v) {
            J::set(&mut request_kwargs, &k, v);
        }
    }
    // preprocess_chat: defaults are the config's kwargs plus tools and tokenize=False.
    let mut kwargs: Vec<(String, J)> = config_kwargs
        .iter()
        .map(|(k, v)| (k.clone(), J::from_serde(v)))
        .collect();
    if let Some(t) = &tools {
        J::set(&mut kwargs, "tools", t.clone());
    }
    J::set(&mut kwargs, "tokenize", J::Bool(false));
    for (k, v) in request_kwargs {
        if !unset(&v) {
            J::set(&mut kwargs, &k, v);
        }
    }

    // apply_chat_template: named parameters are taken out; the rest are template variables.
    let mut tools_var = J::Null;
    let mut documents_var = J::Null;
    let mut add_gen_var = J::Bool(false);
    let mut template_kwargs: Vec<(String, J)> = Vec::new();
    for (k, v) in kwargs {
        match k.as_str() {
            "tools" => tools_var = v,
            "documents" => documents_var = v,
            "add_generation_prompt" => add_gen_var = v,
            "tokenize" | "return_assistant_tokens_mask" if v.truthy() => {
                return Err(Unpredictable::TemplateKwargs(k))
            }
            "conversation" | "messages" => return Err(Unpredictable::TemplateKwargs(k)),
            "continue_final_message"
            | "chat_template"
            | "tokenize"
            | "padding"
            | "truncation"
            | "max_length"
            | "return_tensors"
            | "return_dict"
            | "return_assistant_tokens_mask"
            | "tokenizer_kwargs" => {}
            _ => J::set(&mut template_kwargs, &k, v),
        }
    }
    let mut context: Vec<(String, J)> = special_tokens
        .iter()
        .map(|(k, v)| (k.clone(), J::Str(v.clone())))
        .collect();
    for (k, v) in template_kwargs {
        J::set(&mut context, &k, v);
    }
    J::set(&mut context, "tools", tools_var);
    J::set(&mut context, "documents", documents_var);
    J::set(&mut context, "add_generation_prompt", add_gen_var);
    Ok(Prepared {
        messages,
        context,
        continue_final_message,
        add_special_tokens,
    })
}

/// `merge_kwargs`' unset values: `None` and `"auto"`.
fn unset(v: &J) -> bool {
    matches!(v, J::Null) || v.as_str() == Some("auto")
}

const KNOWN_PART_FIELDS: &[&str] = &[
    "type",
    "text",
    "image_url",
    "input_audio",
    "file",
    "refusal",
    "audio_url",
    "video_url",
    "image_embeds",
    "audio_embeds",
    "video_embeds",
    "data",
    "image_pil",
    "thinking",
    "closed",
    "uuid",
    "name",
    "detail",
    "input_image",
    "file_id",
    "file_data",
    "filename",
    "tool_reference",
    "prompt_embeds",
];

const MEDIA_KEYS: &[&str] = &[
    "image_url",
    "image_pil",
    "image_embeds",
    "audio_embeds",
    "video_embeds",
    "prompt_embeds",
    "audio_url",
    "input_audio",
    "video_url",
    "input_image",
];

/// One parsed content part.
enum Part {
    Text(String, Vec<(String, J)>),
    ToolReference(String),
}

fn parse_part(part: &J) -> Result<Option<Part>, Unpredictable> {
    let fields = match part {
        J::Str(s) => return Ok(Some(Part::Text(s.clone(), Vec::new()))),
        J::Obj(f) => f,
        _ => return Err(invalid("content part is not an object")),
    };
    let ptype = part.get("type");
    let uuid = part.get("uuid").is_some_and(|u| !u.is_null());
    if MEDIA_KEYS.iter().any(|k| part.get(k).is_some()) {
        return Err(Unpredictable::Images);
    }
    let ptype = match ptype {
        Some(J::Str(t)) if !uuid => t.as_str(),
        None | Some(J::Null) | Some(J::Str(_)) => {
            if part.get("tool_reference").is_some() {
                let name = part.get("name").and_then(J::as_str).unwrap_or("");
                return Ok(Some(Part::ToolReference(name.to_owned())));
            }
            return Err(invalid("content part without a type"));
        }
        Some(_) => return Err(invalid("content part type is not a string")),
    };
    let text_key = match ptype {
        "text" | "input_text" | "output_text" => "text",
        "thinking" => "thinking",
        "refusal" => "refusal",
        "tool_reference" => {
            let name = part.get("name").and_then(J::as_str).unwrap_or("");
            return Ok(Some(Part::ToolReference(name.to_owned())));
        }
        "image_url" | "input_image" | "image_embeds" | "audio_embeds" | "video_embeds"
        | "prompt_embeds" | "image_pil" | "audio_url" | "input_audio" | "video_url" => {
            return Err(Unpredictable::Images)
        }
        _ => return Err(invalid("unsupported content part type")),
    };
    match part.get(text_key) {
        Some(J::Str(t)) => {
            let extra = fields
                .iter()
                .filter(|(k, _)| !KNOWN_PART_FIELDS.contains(&k.as_str()))
                .cloned()
                .collect();
            Ok(Some(Part::Text(t.clone(), extra)))
        }
        None | Some(J::Null) if matches!(ptype, "text" | "refusal") => Ok(None),
        _ => Err(invalid("text part without text")),
    }
}

/// Drops Claude Code's per-request billing header line from system text parts.
fn strip_billing_header(parts: Vec<J>) -> Vec<J> {
    const HEADER: &str = "x-anthropic-billing-header";
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        let text = match &part {
            J::Str(s) => Some(s.as_str()),
            J::Obj(_) if part.get("type").and_then(J::as_str) == Some("text") => {
                part.get("text").and_then(J::as_str)
            }
            _ => None,
        };
        let Some(text) = text.filter(|t| t.starts_with(HEADER)) else {
            out.push(part);
            continue;
        };
        let rest = text
            .split_once('\n')
            .map(|(_, r)| r)
            .unwrap_or("")
            .to_owned();
        if rest.is_empty() {
            continue;
        }
        match part {
            J::Str(_) => out.push(J::Str(rest)),
            J::Obj(mut f) => {
                J::set(&mut f, "text", J::Str(rest));
                out.push(J::Obj(f));
            }
            other => out.push(other),
        }
    }
    out
}

fn parse_message(m: &J, format: ContentFormat) -> Result<J, Unpredictable> {
    if !matches!(m, J::Obj(_)) {
        return Err(invalid("message is not an object"));
    }
    let role = m
        .get("role")
        .and_then(J::as_str)
        .ok_or_else(|| invalid("message without a role"))?
        .to_owned();
    let mut parts = match m.get("content") {
        None | Some(J::Null) => Vec::new(),
        Some(J::Str(s)) => vec![J::Obj(vec![
            ("type".into(), J::Str("text".into())),
            ("text".into(), J::Str(s.clone())),
        ])],
        Some(J::Arr(a)) => a.clone(),
        Some(_) => return Err(invalid("content is not a string or a list")),
    };
    if role == "system" {
        parts = strip_billing_header(parts);
    }
    let mut parsed = Vec::with_capacity(parts.len());
    for p in &parts {
        if let Some(part) = parse_part(p)? {
            parsed.push(part);
        }
    }
    let content = match format {
        ContentFormat::String => J::Str(
            parsed
                .iter()
                .map(|p| match p {
                    Part::Text(t, _) | Part::ToolReference(t) => t.as_str(),
                })
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        ContentFormat::OpenAi => J::Arr(
            parsed
                .into_iter()
                .map(|p| match p {
                    Part::Text(t, extra) => {
                        let mut d = vec![
                            ("type".to_owned(), J::Str("text".into())),
                            ("text".to_owned(), J::Str(t)),
                        ];
                        for (k, v) in extra {
                            J::set(&mut d, &k, v);
                        }
                        J::Obj(d)
                    }
                    Part::ToolReference(name) => J::Obj(vec![
                        ("type".to_owned(), J::Str("tool_reference".into())),
                        ("name".to_owned(), J::Str(name)),
                    ]),
                })
                .collect(),
        ),
    };
    let mut out: Vec<(String, J)> = vec![
        ("role".into(), J::Str(role.clone())),
        ("content".into(), content),
    ];
    match role.as_str() {
        "assistant" => {
            match m.get("tool_calls") {
                None | Some(J::Null) => {}
                Some(J::Arr(calls)) => J::set(
                    &mut out,
                    "tool_calls",
                    J::Arr(calls.iter().map(validated_tool_call).collect()),
                ),
                Some(_) => return Err(invalid("tool_calls is not a list")),
            }
            let reasoning = match m.get("reasoning") {
                Some(r) if !r.is_null() => Some(r),
                _ => m.get("reasoning_content").filter(|r| !r.is_null()),
            };
            if let Some(r) = reasoning {
                J::set(&mut out, "reasoning", r.clone());
                J::set(&mut out, "reasoning_content", r.clone());
            }
        }
        "tool" => {
            if let Some(id) = m.get("tool_call_id") {
                J::set(&mut out, "tool_call_id", id.clone());
            }
            if let Some((_, J::Arr(items))) = out.iter().find(|(k, _)| k == "content") {
                let has_non_text = items.iter().any(|i| {
                    matches!(i, J::Obj(_)) && i.get("type").and_then(J::as_str) != Some("text")
                });
                if !has_non_text {
                    let texts: Vec<&str> = items
                        .iter()
                        .filter_map(|i| i.get("text").and_then(J::as_str))
                        .collect();
                    let joined = J::Str(texts.join("\n"));
                    J::set(&mut out, "content", joined);
                }
            }
        }
        _ => {}
    }
    if let Some(J::Str(name)) = m.get("name") {
        J::set(&mut out, "name", J::Str(name.clone()));
    }
    if let Some(J::Str(task)) = m.get("task") {
        J::set(&mut out, "task", J::Str(task.clone()));
    }
    if role == "developer" {
        J::set(
            &mut out,
            "tools",
            m.get("tools").cloned().unwrap_or(J::Null),
        );
    }
    Ok(J::Obj(out))
}

/// A tool call as pydantic validates OpenAI's typed dict: known keys only, in schema order.
fn validated_tool_call(call: &J) -> J {
    let J::Obj(_) = call else {
        return call.clone();
    };
    let mut out = Vec::new();
    for key in ["id", "function", "type"] {
        if let Some(v) = call.get(key) {
            let v = if key == "function" {
                match v {
                    J::Obj(_) => J::Obj(
                        ["arguments", "name"]
                            .iter()
                            .filter_map(|k| v.get(k).map(|x| ((*k).to_owned(), x.clone())))
                            .collect(),
                    ),
                    other => other.clone(),
                }
            } else {
                v.clone()
            };
            out.push((key.to_owned(), v));
        }
    }
    J::Obj(out)
}

/// `_postprocess_messages`: tool-call arguments become objects; empty lists are dropped.
fn postprocess_tool_calls(messages: &mut [J]) -> Result<(), Unpredictable> {
    for m in messages.iter_mut() {
        let J::Obj(fields) = m else { continue };
        let is_assistant = fields
            .iter()
            .any(|(k, v)| k == "role" && v.as_str() == Some("assistant"));
        if !is_assistant {
            continue;
        }
        let Some(pos) = fields.iter().position(|(k, _)| k == "tool_calls") else {
            continue;
        };
        let J::Arr(calls) = &mut fields[pos].1 else {
            continue;
        };
        if calls.is_empty() {
            fields.remove(pos);
            continue;
        }
        for call in calls.iter_mut() {
            let J::Obj(c) = call else {
                return Err(invalid("tool_calls entries must be objects"));
            };
            let ctype = c.iter().find(|(k, _)| k == "type").map(|(_, v)| v.clone());
            if ctype
                .as_ref()
                .is_some_and(|t| t.as_str() != Some("function"))
            {
                return Err(invalid("only function tool calls are supported"));
            }
            let Some((_, J::Obj(function))) = c.iter_mut().find(|(k, _)| k == "function") else {
                return Err(invalid("only function tool calls are supported"));
            };
            let args = function
                .iter()
                .find(|(k, _)| k == "arguments")
                .map(|(_, v)| v.clone())
                .unwrap_or(J::Null);
            let parsed = if !args.truthy() {
                J::Obj(Vec::new())
            } else {
                match args {
                    J::Obj(_) => args,
                    J::Str(s) => match J::parse(s.as_bytes()) {
                        Some(obj @ J::Obj(_)) => obj,
                        _ => J::Obj(Vec::new()),
                    },
                    _ => J::Obj(Vec::new()),
                }
            };
            J::set(function, "arguments", parsed);
        }
    }
    Ok(())
}

fn developer_to_system(messages: Vec<J>) -> Vec<J> {
    messages
        .into_iter()
        .map(|m| match m {
            J::Obj(mut f)
                if f.iter()
                    .any(|(k, v)| k == "role" && v.as_str() == Some("developer")) =>
            {
                J::set(&mut f, "role", J::Str("system".into()));
                f.retain(|(k, _)| k != "tools");
                J::Obj(f)
            }
            other => other,
        })
        .collect()
}

fn consolidate_system(messages: Vec<J>) -> Vec<J> {
    let mut system = Vec::new();
    let mut rest = Vec::new();
    let mut needs = false;
    for (i, m) in messages.iter().enumerate() {
        if m.get("role").and_then(J::as_str) == Some("system") {
            if i > 0 || !system.is_empty() {
                needs = true;
            }
            let content = match m.get("content") {
                Some(J::Str(s)) => s.clone(),
                Some(J::Arr(parts)) => parts
                    .iter()
                    .filter_map(|p| match p {
                        J::Str(s) => Some(s.as_str()),
                        _ => p.get("text").and_then(J::as_str),
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
            if !content.is_empty() {
                system.push(content);
            }
        } else {
            rest.push(m.clone());
        }
    }
    if !needs {
        return messages;
    }
    let mut out = vec![J::Obj(vec![
        ("role".into(), J::Str("system".into())),
        ("content".into(), J::Str(system.join("\n\n"))),
    ])];
    out.extend(rest);
    out
}

/// `ChatCompletionToolsParam.model_dump()`.
fn tool_dict(tool: &J) -> Result<J, Unpredictable> {
    if !matches!(tool, J::Obj(_)) {
        return Err(invalid("tool is not an object"));
    }
    if tool
        .get("type")
        .is_some_and(|t| t.as_str() != Some("function"))
    {
        return Err(invalid("tool type must be function"));
    }
    let f = tool
        .get("function")
        .filter(|f| matches!(f, J::Obj(_)))
        .ok_or_else(|| invalid("tool without a function"))?;
    let name = f
        .get("name")
        .and_then(J::as_str)
        .ok_or_else(|| invalid("tool function without a name"))?;
    let opt = |k: &str| f.get(k).cloned().unwrap_or(J::Null);
    let description = opt("description");
    if !matches!(description, J::Null | J::Str(_)) {
        return Err(invalid("tool description is not a string"));
    }
    let parameters = opt("parameters");
    if !matches!(parameters, J::Null | J::Obj(_)) {
        return Err(invalid("tool parameters is not an object"));
    }
    let tool_defer = tool.get("defer_loading").cloned().unwrap_or(J::Null);
    let mut func = vec![
        ("name".to_owned(), J::Str(name.to_owned())),
        ("description".to_owned(), description),
        ("parameters".to_owned(), parameters),
    ];
    let strict = opt("strict");
    if !strict.is_null() {
        func.push(("strict".into(), strict));
    }
    let defer = match opt("defer_loading") {
        J::Null => tool_defer.clone(),
        d => d,
    };
    if !defer.is_null() {
        func.push(("defer_loading".into(), defer));
    }
    let mut out = vec![
        ("type".to_owned(), J::Str("function".into())),
        ("function".to_owned(), J::Obj(func)),
    ];
    if !tool_defer.is_null() {
        out.push(("defer_loading".into(), tool_defer));
    }
    Ok(J::Obj(out))
}

#[cfg(test)]
mod tests;
