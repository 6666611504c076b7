//! Typed errors at the edge of the tokenizer: why a model's tokenizer did not load, and why a
//! request's prompt cannot be predicted.

use std::path::PathBuf;

/// Why [`super::load`] failed. The model then routes without predictions.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The directory (or the resolved cache snapshot) has no `tokenizer.json`.
    #[error("no tokenizer.json in {0}")]
    MissingTokenizer(PathBuf),
    /// A hub repository is not in the local Hugging Face cache (nothing is downloaded).
    #[error("{repo} is not in the local Hugging Face cache ({cache})")]
    NotInHubCache {
        /// `org/name`.
        repo: String,
        /// The cache directory searched.
        cache: PathBuf,
    },
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `tokenizer.json` or `tokenizer_config.json` is not what the tokenizers library reads.
    #[error("parsing {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The chat template does not compile.
    #[error("chat template: {0}")]
    Template(String),
    /// A chat template was given for `builtin:sim`, whose chat format is fixed.
    #[error("builtin:sim has a fixed chat format; a chat template cannot override it (drop the chat template, or use a tokenizer directory)")]
    BuiltinTemplate,
}

/// Why a request's prompt ids cannot be predicted. The request is routed without a cache
/// prediction and counted under [`Unpredictable::label`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unpredictable {
    /// The body is not valid JSON.
    #[error("invalid JSON")]
    InvalidJson,
    /// The body is JSON but not an object.
    #[error("body is not a JSON object")]
    NotAnObject,
    /// A message has non-text content (images, audio, video, files, embeddings).
    #[error("non-text content")]
    Images,
    /// The request carries its own chat template.
    #[error("chat template in the request")]
    TemplateInRequest,
    /// A completions request with several prompts.
    #[error("batch of prompts")]
    BatchPrompt,
    /// The chat template raised or failed.
    #[error("chat template error: {0}")]
    TemplateError(String),
    /// The request is one the engine refuses (schema or semantic errors).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// `chat_template_kwargs` sets a parameter that changes more than template variables.
    #[error("unsupported chat_template_kwargs key {0}")]
    TemplateKwargs(String),
    /// Prompt embeddings, FIM suffixes or prompt truncation: ids the router does not compute.
    #[error("unsupported prompt feature: {0}")]
    Unsupported(&'static str),
    /// The model has no chat template (the engine refuses chat requests).
    #[error("the model has no chat template")]
    NoChatTemplate,
}

impl Unpredictable {
    /// A short, fixed label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Unpredictable::InvalidJson => "invalid_json",
            Unpredictable::NotAnObject => "not_an_object",
            Unpredictable::Images => "non_text_content",
            Unpredictable::TemplateInRequest => "template_in_request",
            Unpredictable::BatchPrompt => "batch_prompt",
            Unpredictable::TemplateError(_) => "template_error",
            Unpredictable::InvalidRequest(_) => "invalid_request",
            Unpredictable::TemplateKwargs(_) => "template_kwargs",
            Unpredictable::Unsupported(_) => "unsupported",
            Unpredictable::NoChatTemplate => "no_chat_template",
        }
    }
}
