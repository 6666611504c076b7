//! What a shadow decision reads besides the candidates, shared by the shadow worker, the log
//! format and the replay.

use inferrail_dataplane::predict::PromptFacts;
use inferrail_routing::BrainParams;

/// What a shadow decision reads besides the candidates.
#[derive(Debug, Clone, Default)]
pub struct ShadowInputs {
    /// The tokenized prompt, when a prediction was made.
    pub prompt: Option<PromptFacts>,
    /// The rough prompt length used without one.
    pub approx_tokens: u32,
    /// The model's routing settings.
    pub params: BrainParams,
}
