//! HTTP/1.1 wire pieces shared by the gateway, the simulator and the load generator.
//!
//! This crate owns the byte-level formats: request and response heads (parsed with `httparse`),
//! body framing (content-length, chunked, close-delimited) as incremental state machines, the
//! OpenAI-shaped error bodies vLLM sends, hop-by-hop header rules, and the one JSON field the
//! gateway reads from a request body (`model`). It does no I/O and reads no clock, so every piece is
//! driven by tests byte by byte. It must never allocate per byte or depend on a runtime.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

pub mod chunked;
pub mod error_body;
pub mod head;
pub mod headers;
pub mod json_field;
pub mod model_field;
pub mod response;

pub use chunked::{encode_chunk, ChunkedDecoder, ChunkedError, Progress, LAST_CHUNK};
pub use error_body::{openai_error, ErrorKind};
pub use head::{BodyFraming, HeadBufs, HeadError, Method, RequestHead, ResponseHead, MAX_HEADERS};
pub use model_field::{find_model, push_json_string, splice_model, ModelField, ModelFieldError};
pub use response::{full_response, push_decimal, push_header, push_kept_headers};
