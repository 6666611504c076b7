//! Tokenization exactly as vLLM 0.32 does it, for the gateway's cache predictions.
//!
//! [`load`] builds a [`ModelTokenizer`] from a `tokenizer:` setting (see [`TokenizerSource`]).
//! [`ModelTokenizer::prompt_ids`] turns a `/v1/chat/completions` or `/v1/completions` body into
//! the prompt token ids vLLM's OpenAI server computes, or says why it cannot
//! ([`Unpredictable`]):
//!
//! - **Chat**: the messages are prepared as vLLM prepares them (the `chat` module lists
//!   every rule), the chat template is rendered as transformers renders it (the
//!   `template` module), and the text is encoded *without* special tokens (unless the
//!   request sets `add_special_tokens`), so a template's own BOS is not doubled.
//! - **Completions**: a string prompt is encoded *with* special tokens (unless the request
//!   sets `add_special_tokens: false`); token-id prompts are taken as they are; a one-element
//!   list is that prompt; longer lists are batches ([`Unpredictable::BatchPrompt`]).
//!
//! The tokenizer is loaded as transformers 5 loads it: when `tokenizer_config.json` sets
//! `add_bos_token` / `add_eos_token` (or `tokenizer.json` has no post-processor) the
//! post-processor becomes `[bos] $A [eos]` per those flags; the template variables
//! `bos_token`, `eos_token`, ... come from `tokenizer_config.json` (strings or added-token
//! objects). The chat template is `chat_template.jinja` in the directory, else
//! `tokenizer_config.json`'s `chat_template` (a named list picks `default`), unless overridden.
//!
//! For `builtin:sim` the chat format is the simulator's: BOS, `"<role>: <content>\n"` per
//! message (no newline after a continued final message), then `"assistant: "` when a
//! generation prompt is asked for; messages are prepared with the same vLLM rules (content
//! parts joined with `\n`, `null` as `""`).
//!
//! Repeated text between special tokens is served from a per-model [`SegmentCache`].
//! Known gaps: `strftime_now` uses UTC; transformers' Mistral pre-tokenizer regex patch and
//! tokenizer classes that rebuild the tokenizer from vocab files are not reproduced.

mod cache;
mod chat;
mod content_format;
mod encoder;
mod error;
mod fast_bpe;
mod fixtures;
mod json;
mod source;
mod template;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use serde_json::Value;

use cache::Segments;
pub use cache::{CacheStats, LocalSegmentCache, SegmentCache};
pub use content_format::{detect as detect_content_format, ContentFormat};
pub use error::{LoadError, Unpredictable};
pub use fixtures::{fixtures_required, locked_families, real_fixture, MissingFixture};
pub use json::{dumps as py_json_dumps, DumpOptions, J};
pub use source::{hub_cache_dir, resolve_in_cache, TokenizerSource};
pub use template::{strftime, ChatTemplate, RenderError};

use encoder::HfEncoder;

/// The default segment cache budget, in tokens (`tokenizer.cache_tokens`' default).
pub const DEFAULT_CACHE_TOKENS: u64 = 1_000_000;

/// Which OpenAI endpoint a body was sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completion,
}

enum Kind {
    Builtin,
    Hf(Box<HfEncoder>),
}

/// One model's tokenizer, chat template and segment cache. `Send + Sync`: shared by every
/// tokenizer thread behind an `Arc`.
pub struct ModelTokenizer {
    kind: Kind,
    template: Option<ChatTemplate>,
    format: ContentFormat,
    mentions_developer: bool,
    special_tokens: Vec<(String, String)>,
    max_model_len: Option<usize>,
    cache: SegmentCache,
    /// Identity and liveness of this tokenizer for the per-thread inline caches.
    local_key: Arc<()>,
}

thread_local! {
    /// This thread's inline segment caches, one per live tokenizer it used (see
    /// [`ModelTokenizer::prompt_ids_inline`]). Entries of dropped tokenizers are pruned when a
    /// new tokenizer is first used on the thread.
    static INLINE_CACHES: RefCell<Vec<(Weak<()>, LocalSegmentCache)>> = const { RefCell::new(Vec::new()) };
}

impl std::fmt::Debug for ModelTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelTokenizer")
            .field("builtin", &matches!(self.kind, Kind::Builtin))
            .field("format", &self.format)
            .field("max_model_len", &self.max_model_len)
            .finish()
    }
}

/// Loads the tokenizer a `tokenizer:` setting names, with the default cache budget.
/// `chat_template` overrides the tokenizer's template: a path to a file, or the template text
/// (refused for `builtin:sim`, whose chat format is fixed).
pub fn load(spec: &str, chat_template: Option<&str>) -> Result<ModelTokenizer, LoadError> {
    load_with_cache(spec, chat_template, DEFAULT_CACHE_TOKENS)
}

/// [`load`] with a segment cache of `cache_tokens` tokens (0 disables the cache).
pub fn load_with_cache(
    spec: &str,
    chat_template: Option<&str>,
    cache_tokens: u64,
) -> Result<ModelTokenizer, LoadError> {
    match TokenizerSource::parse(spec) {
        TokenizerSource::Builtin if chat_template.is_some() => Err(LoadError::BuiltinTemplate),
        TokenizerSource::Builtin => Ok(ModelTokenizer::builtin(cache_tokens)),
        TokenizerSource::Dir(dir) => ModelTokenizer::from_dir(&dir, chat_template, cache_tokens),
        TokenizerSource::HubCache { repo, revision } => {
            let dir = resolve_in_cache(&hub_cache_dir(), &repo, revision.as_deref())?;
            ModelTokenizer::from_dir(&dir, chat_template, cache_tokens)
        }
    }
}

fn read(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })
}

fn parse_err(path: &Path, message: impl ToString) -> LoadError {
    LoadError::Parse {
        path: path.to_owned(),
        message: message.to_string(),
    }
}

/// A special token's text from `tokenizer_config.json`: a string or `{"content": ...}`.
fn token_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

const SPECIAL_TOKEN_ATTRS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// The chat template of a `tokenizer_config.json` value: a string, or a list of
/// `{"name", "template"}` of which `default` is taken.
fn config_template(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

impl ModelTokenizer {
    /// The builtin simulator tokenizer with a cache of `cache_tokens` tokens.
    pub fn builtin(cache_tokens: u64) -> ModelTokenizer {
        crate::builtin::BuiltinTokenizer::new().warm_up();
        ModelTokenizer {
            kind: Kind::Builtin,
            template: None,
            format: ContentFormat::String,
            mentions_developer: true,
            special_tokens: vec![
                ("bos_token".into(), "<s>".into()),
                ("eos_token".into(), "</s>".into()),
                ("unk_token".into(), "<unk>".into()),
            ],
            max_model_len: None,
            cache: SegmentCache::new(cache_tokens),
            local_key: Arc::new(()),
        }
    }

    /// Loads `dir/tokenizer.json` and, when present, `dir/tokenizer_config.json` and
    /// `dir/chat_template.jinja` (see the module docs).
    pub fn from_dir(
        dir: &Path,
        chat_template: Option<&str>,
        cache_tokens: u64,
    ) -> Result<ModelTokenizer, LoadError> {
        let tok_path = dir.join("tokenizer.json");
        if !tok_path.is_file() {
            return Err(LoadError::MissingTokenizer(dir.to_owned()));
        }
        let tok_text = read(&tok_path)?;
        let tok_json: Value =
            serde_json::from_str(&tok_text).map_err(|e| parse_err(&tok_path, e))?;
        let cfg_path = dir.join("tokenizer_config.json");
        let config: serde_json::Map<String, Value> = if cfg_path.is_file() {
            match serde_json::from_str(&read(&cfg_path)?).map_err(|e| parse_err(&cfg_path, e))? {
                Value::Object(m) => m,
                _ => return Err(parse_err(&cfg_path, "not a JSON object")),
            }
        } else {
            serde_json::Map::new()
        };
        let mut tokenizer = tokenizers::Tokenizer::from_bytes(tok_text.as_bytes())
            .map_err(|e| parse_err(&tok_path, e))?;

        let special_tokens: Vec<(String, String)> = SPECIAL_TOKEN_ATTRS
            .iter()
            .filter_map(|a| token_text(config.get(*a)).map(|t| ((*a).to_owned(), t)))
            .collect();
        let special = |name: &str| {
            special_tokens
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };

        // transformers 5: explicit add_bos_token / add_eos_token (or no post-processor)
        // replace the post-processor with `[bos] $A [eos]`.
        let explicit = config.contains_key("add_bos_token") || config.contains_key("add_eos_token");
        if explicit || tok_json.get("post_processor").is_none_or(Value::is_null) {
            let flag = |k: &str| config.get(k).and_then(Value::as_bool).unwrap_or(false);
            let with_id =
                |t: Option<String>| t.and_then(|t| tokenizer.token_to_id(&t).map(|id| (t, id)));
            let bos = with_id(special("bos_token")).filter(|_| flag("add_bos_token"));
            let eos = with_id(special("eos_token")).filter(|_| flag("add_eos_token"));
            let mut single = Vec::new();
            let mut specials = serde_json::Map::new();
            let sp = |t: &str| serde_json::json!({"SpecialToken": {"id": t, "type_id": 0}});
            if let Some((t, id)) = &bos {
                single.push(sp(t));
                specials.insert(
                    t.clone(),
                    serde_json::json!({"id": t, "ids": [id], "tokens": [t]}),
                );
            }
            single.push(serde_json::json!({"Sequence": {"id": "A", "type_id": 0}}));
            if let Some((t, id)) = &eos {
                single.push(sp(t));
                specials.insert(
                    t.clone(),
                    serde_json::json!({"id": t, "ids": [id], "tokens": [t]}),
                );
            }
            let mut pair = single.clone();
            pair.extend(single.iter().map(|p| {
                let mut p = p.clone();
                if let Some(seq) = p.get_mut("Sequence") {
                    seq["id"] = "B".into();
                }
                for v in p.as_object_mut().into_iter().flat_map(|o| o.values_mut()) {
                    v["type_id"] = 1.into();
                }
                p
            }));
            let pp = serde_json::json!({
                "type": "TemplateProcessing",
                "single": single,
                "pair": pair,
                "special_tokens": specials,
            });
            let pp: tokenizers::PostProcessorWrapper =
                serde_json::from_value(pp).map_err(|e| parse_err(&tok_path, e))?;
            tokenizer.with_post_processor(Some(pp));
        }

        let segmentable = !tok_text.contains("\"prepend_scheme\":\"first\"")
            && !tok_text.contains("\"prepend_scheme\": \"first\"");

        let template_text = match chat_template {
            Some(t) if Path::new(t).is_file() => Some(read(Path::new(t))?),
            Some(t) => Some(t.to_owned()),
            None => {
                let jinja = dir.join("chat_template.jinja");
                if jinja.is_file() {
                    Some(read(&jinja)?)
                } else {
                    config_template(config.get("chat_template"))
                }
            }
        };
        let template = template_text
            .as_deref()
            .map(ChatTemplate::new)
            .transpose()
            .map_err(|e| LoadError::Template(e.0))?;
        let format = template
            .as_ref()
            .map(|t| content_format::detect(t.source()))
            .unwrap_or(ContentFormat::String);
        let mentions_developer = template.as_ref().is_some_and(|t| {
            t.source().contains("\"developer\"") || t.source().contains("'developer'")
        });
        let max_model_len = config
            .get("model_max_length")
            .and_then(Value::as_u64)
            .filter(|&n| n > 0 && n <= 1 << 32)
            .and_then(|n| usize::try_from(n).ok());
        Ok(ModelTokenizer {
            kind: Kind::Hf(Box::new(HfEncoder::new(
                tokenizer,
                segmentable,
                fast_bpe::FastBpe::from_tokenizer_json(&tok_json),
            ))),
            template,
            format,
            mentions_developer,
            special_tokens,
            max_model_len,
            cache: SegmentCache::new(cache_tokens),
            local_key: Arc::new(()),
        })
    }

    /// Token ids of a `/v1/chat/completions` or `/v1/completions` body exactly as vLLM 0.32
    /// computes the prompt, or why it cannot be predicted. `config_kwargs` are the model's
    /// `chat_template_kwargs` from config (the request's own override them). Never panics.
    pub fn prompt_ids(
        &self,
        endpoint: Endpoint,
        body: &[u8],
        config_kwargs: &serde_json::Map<String, Value>,
    ) -> Result<Vec<u32>, Unpredictable> {
        self.ids_with(endpoint, body, config_kwargs, &self.cache)
    }

    /// [`prompt_ids`](Self::prompt_ids) for a data core tokenizing a body inline: the same ids,
    /// byte for byte, but segments are looked up in this thread's own [`LocalSegmentCache`] for
    /// this tokenizer (one shard's budget, `cache_tokens / 16`), never in the shared cache, so
    /// the call takes none of the shared cache's locks and cannot wait for a pool thread.
    pub fn prompt_ids_inline(
        &self,
        endpoint: Endpoint,
        body: &[u8],
        config_kwargs: &serde_json::Map<String, Value>,
    ) -> Result<Vec<u32>, Unpredictable> {
        INLINE_CACHES.with(|caches| {
            let mut caches = caches.borrow_mut();
            let key = Arc::as_ptr(&self.local_key);
            // A live Weak keeps the allocation, so a pointer match is this very tokenizer.
            let at = match caches.iter().position(|(k, _)| k.as_ptr() == key) {
                Some(at) => at,
                None => {
                    caches.retain(|(k, _)| k.strong_count() > 0);
                    caches.push((
                        Arc::downgrade(&self.local_key),
                        LocalSegmentCache::new(self.cache.shard_budget()),
                    ));
                    caches.len() - 1
                }
            };
            self.ids_with(endpoint, body, config_kwargs, &caches[at].1)
        })
    }

    /// The prompt's token ids with segments looked up in `cache` (the shared one or a thread's).
    fn ids_with(
        &self,
        endpoint: Endpoint,
        body: &[u8],
        config_kwargs: &serde_json::Map<String, Value>,
        cache: &impl Segments,
    ) -> Result<Vec<u32>, Unpredictable> {
        let body = J::parse(body).ok_or(Unpredictable::InvalidJson)?;
        if !matches!(body, J::Obj(_)) {
            return Err(Unpredictable::NotAnObject);
        }
        match endpoint {
            Endpoint::Chat => self.chat_ids(&body, config_kwargs, cache),
            Endpoint::Completion => self.completion_ids(&body, cache),
        }
    }

    /// The rendered chat prompt text of a chat body (before encoding) and whether it is
    /// encoded with special tokens.
    pub fn render_chat(
        &self,
        body: &[u8],
        config_kwargs: &serde_json::Map<String, Value>,
    ) -> Result<(String, bool), Unpredictable> {
        let body = J::parse(body).ok_or(Unpredictable::InvalidJson)?;
        self.render_parsed(&body, config_kwargs)
    }

    fn render_parsed(
        &self,
        body: &J,
        config_kwargs: &serde_json::Map<String, Value>,
    ) -> Result<(String, bool), Unpredictable> {
        if body
            .get("truncate_prompt_tokens")
            .is_some_and(|v| !v.is_null())
        {
            return Err(Unpredictable::Unsupported("truncate_prompt_tokens"));
        }
        let prepared = chat::prepare(
            body,
            self.format,
            self.mentions_developer,
            &self.special_tokens,
            config_kwargs,
        )?;
        match &self.kind {
            Kind::Builtin => Ok((builtin_render(&prepared), true)),
            Kind::Hf(_) => {
                let template = self
                    .template
                    .as_ref()
                    .ok_or(Unpredictable::NoChatTemplate)?;
                let add_special = prepared.add_special_tokens;
                let context = prepared.context_values();
                let text = template
                    .render(prepared.messages, context, prepared.continue_final_message)
                    .map_err(|e| Unpredictable::TemplateError(e.0))?;
                Ok((text, add_special))
            }
        }
    }

    fn chat_ids(
        &self,
        body: &J,
        config_kwargs: &serde_json::Map<String, Value>,
        cache: &impl Segments,
    ) -> Result<Vec<u32>, Unpredictable> {
        let (text, add_special) = self.render_parsed(body, config_kwargs)?;
        Ok(self.encode_via(&text, add_special, cache))
    }

    fn completion_ids(&self, body: &J, cache: &impl Segments) -> Result<Vec<u32>, Unpredictable> {
        for (field, what) in [
            ("prompt_embeds", "prompt_embeds"),
            ("suffix", "suffix"),
            ("truncate_prompt_tokens", "truncate_prompt_tokens"),
        ] {
            if body.get(field).is_some_and(|v| !v.is_null()) {
                return Err(Unpredictable::Unsupported(what));
            }
        }
        let add_special = match body.get("add_special_tokens") {
            None | Some(J::Null) => true,
            Some(J::Bool(b)) => *b,
            Some(_) => {
                return Err(Unpredictable::InvalidRequest(
                    "add_special_tokens is not a boolean".into(),
                ))
            }
        };
        let token_ids = |items: &[J]| -> Option<Vec<u32>> {
            items
                .iter()
                .map(|v| match v {
                    J::Int(i) => u32::try_from(*i).ok(),
                    _ => None,
                })
                .collect()
        };
        let invalid = |why: &str| Unpredictable::InvalidRequest(why.into());
        match body.get("prompt") {
            Some(J::Str(s)) => Ok(self.encode_via(s, add_special, cache)),
            Some(J::Arr(items)) if items.is_empty() => Err(invalid("prompt is empty")),
            Some(J::Arr(items)) if items.iter().all(|v| matches!(v, J::Int(_))) => {
                token_ids(items).ok_or_else(|| invalid("token id out of range"))
            }
            Some(J::Arr(items)) if items.len() == 1 => match &items[0] {
                J::Str(s) => Ok(self.encode_via(s, add_special, cache)),
                J::Arr(ids) if !ids.is_empty() => {
                    token_ids(ids).ok_or_else(|| invalid("token id out of range"))
                }
                _ => Err(invalid("prompt is not a string or token ids")),
            },
            Some(J::Arr(items))
                if items
                    .iter()
                    .all(|v| matches!(v, J::Str(_)) || matches!(v, J::Arr(_))) =>
            {
                Err(Unpredictable::BatchPrompt)
            }
            _ => Err(invalid("prompt is missing or not a string or token ids")),
        }
    }

    /// Token ids of `text`, with the tokenizer's special tokens (BOS for most) when
    /// `add_special_tokens`, as `tokenizer.encode(text, add_special_tokens=...)` computes them.
    /// Served from the segment cache where possible; the ids never depend on the cache.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Vec<u32> {
        self.encode_via(text, add_special_tokens, &self.cache)
    }

    fn encode_via(&self, text: &str, add_special_tokens: bool, cache: &impl Segments) -> Vec<u32> {
        match &self.kind {
            Kind::Builtin => encoder::builtin_encode(text, add_special_tokens, cache),
            Kind::Hf(enc) => enc.encode(text, add_special_tokens, cache),
        }
    }

    /// [`encode`](Self::encode) without the segment cache (for checks and benchmarks).
    pub fn encode_uncached(&self, text: &str, add_special_tokens: bool) -> Vec<u32> {
        match &self.kind {
            Kind::Builtin => crate::builtin::BuiltinTokenizer::new()
                .encode_with_special(text, add_special_tokens),
            Kind::Hf(enc) => enc.encode_uncached(text, add_special_tokens),
        }
    }

    /// The model's context length from `tokenizer_config.json`'s `model_max_length`, when it
    /// is a real length (transformers' "very large" placeholder is not).
    pub fn max_model_len(&self) -> Option<usize> {
        self.max_model_len
    }

    /// The segment cache's counters (hits, misses, tokens and entries held).
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// The content format the chat template expects.
    pub fn content_format(&self) -> ContentFormat {
        self.format
    }

    /// Whether a chat template is available (always for the builtin tokenizer).
    pub fn has_chat_template(&self) -> bool {
        matches!(self.kind, Kind::Builtin) || self.template.is_some()
    }

    /// Whether this is the builtin simulator tokenizer.
    pub fn is_builtin(&self) -> bool {
        matches!(self.kind, Kind::Builtin)
    }
}

/// The simulator's chat format (see the module docs) over vLLM-prepared messages.
fn builtin_render(p: &chat::Prepared) -> String {
    let mut text = String::new();
    let n = p.messages.len();
    for (i, m) in p.messages.iter().enumerate() {
        let role = m.get("role").and_then(J::as_str).unwrap_or("");
        let content = m.get("content").and_then(J::as_str).unwrap_or("");
        text.push_str(role);
        text.push_str(": ");
        text.push_str(content);
        if !(i + 1 == n && p.continue_final_message) {
            text.push('\n');
        }
    }
    let add_gen = p
        .context
        .iter()
        .find(|(k, _)| k == "add_generation_prompt")
        .is_some_and(|(_, v)| v.truthy());
    if add_gen && !p.continue_final_message {
        text.push_str("assistant: ");
    }
    text
}

/// Where test fixtures live: `$INFERRAIL_FIXTURES`, else `<workspace>/target/fixtures`.
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("INFERRAIL_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures"))
}

#[cfg(test)]
mod tests;
