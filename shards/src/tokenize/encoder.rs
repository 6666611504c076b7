//! Text to token ids, through the segment cache.
//!
//! HF tokenizers first cut the text at added / special tokens and encode every piece between
//! them on its own (normalizer, pre-tokenizer, model). [`HfEncoder`] makes the same cut with
//! the tokenizer's own added vocabulary and looks each piece up in a segment cache (shared or per thread), so the
//! ids are exactly the library's. Tokenizers whose pre-tokenizer treats the first piece
//! differently (`Metaspace` with `prepend_scheme: first`) are encoded whole, uncached.
//! The builtin tokenizer is cut after every newline, always a piece boundary for it.
//!
//! Segments of byte-level BPE tokenizers are encoded by [`FastBpe`] (same ids, several times
//! faster) when the segments are exactly what HF would encode on its own: cut at raw added
//! tokens by `fast_split`, or the whole text when there are no added tokens. Otherwise, and
//! for whole-text encodes, the library itself ([`HfEncoder::encode_uncached`]) is used.

use aho_corasick::{AhoCorasick, MatchKind};
use tokenizers::{OffsetReferential, OffsetType, Tokenizer};

use super::cache::Segments;
use super::fast_bpe::FastBpe;
use crate::builtin::BuiltinTokenizer;

/// A Hugging Face `tokenizer.json` tokenizer with the segment cache.
pub struct HfEncoder {
    tokenizer: Tokenizer,
    /// The added tokens as one leftmost-longest automaton over the raw text, with their ids, when
    /// every added token is matched on raw text with no whitespace or word-boundary rules (then
    /// this cut is exactly the library's, without normalizing the whole text first).
    fast_split: Option<(AhoCorasick, Vec<u32>)>,
    /// Whether encoding segments separately is exact (see the module docs).
    segmentable: bool,
    /// The ids the post-processor puts before and after a single sequence when special
    /// tokens are added, when it is that simple.
    wrap: Option<(Vec<u32>, Vec<u32>)>,
    /// The fast encoder for segments, when the tokenizer is in its family and segments are
    /// never re-cut by the library (see the module docs).
    fast: Option<FastBpe>,
}

impl std::fmt::Debug for HfEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfEncoder")
            .field("segmentable", &self.segmentable)
            .field("wrap", &self.wrap)
            .field("fast", &self.fast)
            .finish()
    }
}

fn find_sub(hay: &[u32], needle: &[u32]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

impl HfEncoder {
    /// Wraps `tokenizer`; `segmentable` says whether segments may be encoded separately;
    /// `fast` is [`FastBpe::from_tokenizer_json`] of the same `tokenizer.json` (kept only
    /// where its segments are the library's, so the ids never change).
    pub fn new(tokenizer: Tokenizer, segmentable: bool, fast: Option<FastBpe>) -> HfEncoder {
        let ids = |add: bool| {
            tokenizer
                .encode_fast("a", add)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_default()
        };
        let (with, without) = (ids(true), ids(false));
        let wrap = find_sub(&with, &without)
            .map(|pos| (with[..pos].to_vec(), with[pos + without.len()..].to_vec()));
        let fast_split = raw_added_token_matcher(&tokenizer);
        // With added tokens that the raw cut cannot handle, the library re-cuts each
        // segment after normalizing: only its own pipeline is exact there.
        let fast = fast
            .filter(|_| fast_split.is_some() || tokenizer.get_added_tokens_decoder().is_empty());
        HfEncoder {
            tokenizer,
            fast_split,
            segmentable,
            wrap,
            fast,
        }
    }

    /// Whether segments are encoded by [`FastBpe`] rather than the library.
    #[cfg(test)]
    pub fn uses_fast_bpe(&self) -> bool {
        self.fast.is_some()
    }

    /// `encode_uncached(segment, false)`'s ids for text containing no added token: from
    /// [`FastBpe`] when present, else from the library.
    fn encode_segment(&self, segment: &str) -> Vec<u32> {
        self.fast
            .as_ref()
            .and_then(|f| f.encode(segment))
            .unwrap_or_else(|| self.encode_uncached(segment, false))
    }

    /// `tokenizer.encode(text, add_special_tokens)` ids, without the cache. Empty if the
    /// library reports an error (it does not for valid UTF-8 input).
    pub fn encode_uncached(&self, text: &str, add_special_tokens: bool) -> Vec<u32> {
        self.tokenizer
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .unwrap_or_default()
    }

    /// The same ids as [`encode_uncached`](Self::encode_uncached), with the text between
    /// added tokens looked up in `cache`.
    pub fn encode(&self, text: &str, add_special_tokens: bool, cache: &impl Segments) -> Vec<u32> {
        let wrap = match (&self.wrap, add_special_tokens) {
            (_, false) => None,
            (Some(w), true) => Some(w),
            (None, true) => return self.encode_uncached(text, true),
        };
        if !self.segmentable {
            return self.encode_uncached(text, add_special_tokens);
        }
        let mut out = Vec::with_capacity(text.len() / 3 + 4);
        if let Some((pre, _)) = wrap {
            out.extend_from_slice(pre);
        }
        if let Some((matcher, ids)) = &self.fast_split {
            let mut at = 0;
            for m in matcher.find_iter(text) {
                let seg = &text[at..m.start()];
                if !seg.is_empty() {
                    cache.extend_with(seg, &mut out, |s| self.encode_segment(s));
                }
                out.push(ids[m.pattern().as_usize()]);
                at = m.end();
            }
            let seg = &text[at..];
            if !seg.is_empty() {
                cache.extend_with(seg, &mut out, |s| self.encode_segment(s));
            }
            if let Some((_, post)) = wrap {
                out.extend_from_slice(post);
            }
            return out;
        }
        let split = self
            .tokenizer
            .get_added_vocabulary()
            .extract_and_normalize(self.tokenizer.get_normalizer(), text);
        for (_, (start, end), tokens) in
            split.get_splits(OffsetReferential::Original, OffsetType::Byte)
        {
            match tokens {
                Some(toks) => out.extend(toks.iter().map(|t| t.id)),
                None => {
                    let Some(seg) = text.get(start..end) else {
                        return self.encode_uncached(text, add_special_tokens);
                    };
                    if !seg.is_empty() {
                        cache.extend_with(seg, &mut out, |s| self.encode_segment(s));
                    }
                }
            }
        }
        if let Some((_, post)) = wrap {
            out.extend_from_slice(post);
        }
        out
    }
}

/// An automaton matching every added token on raw text, leftmost-longest as the library matches
/// them, or `None` when some added token is normalized first or has `lstrip`, `rstrip` or
/// `single_word` set (then only the library's own split is exact).
fn raw_added_token_matcher(tokenizer: &Tokenizer) -> Option<(AhoCorasick, Vec<u32>)> {
    let decoder = tokenizer.get_added_tokens_decoder();
    if decoder.is_empty() {
        return None;
    }
    let mut tokens: Vec<(u32, String)> = Vec::with_capacity(decoder.len());
    for (id, t) in &decoder {
        if t.normalized || t.lstrip || t.rstrip || t.single_word || t.content.is_empty() {
            return None;
        }
        tokens.push((*id, t.content.clone()));
    }
    tokens.sort();
    let matcher = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(tokens.iter().map(|(_, c)| c.as_str()))
        .ok()?;
    Some((matcher, tokens.into_iter().map(|(id, _)| id).collect()))
}

/// The builtin tokenizer's ids for `text` (with BOS first when `add_bos`), each line looked up
/// in `cache`. Equal to `BuiltinTokenizer::encode_with_special(text, add_bos)`.
pub fn builtin_encode(text: &str, add_bos: bool, cache: &impl Segments) -> Vec<u32> {
    let tok = BuiltinTokenizer::new();
    let mut out = Vec::with_capacity(text.len() / 4 + 2);
    if add_bos {
        out.push(crate::builtin::BOS_ID);
    }
    for line in text.split_inclusive('\n') {
        cache.extend_with(line, &mut out, |s| tok.encode(s));
    }
    out
}
