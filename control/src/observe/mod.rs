//! What the gateway writes down about its decisions: the sampled decision log
//! ([`decision_log`]), shadow policies evaluated beside the real one ([`shadow`]), their
//! replay ([`replay`]) and the JSON-lines writer both logs share ([`jsonl`]).

pub mod decision_log;
pub mod inputs;
pub(crate) mod jsonl;
pub mod replay;
pub mod shadow;
