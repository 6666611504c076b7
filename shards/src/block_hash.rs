//! Block hashing exactly as vLLM computes it (vLLM V1, `vllm/v1/core/kv_cache_utils.py`).
//!
//! vLLM names every full block of a sequence by a hash that chains over the whole prefix:
//!
//! ```text
//! hash(block i) = sha256(pickle.dumps((parent, tuple(tokens_of_block_i), extra_keys), protocol=5))
//! ```
//!
//! where `parent` is the full 32-byte digest of block `i - 1`, or [`NONE_HASH`] for the first
//! block, and `extra_keys` is `None` unless the request carries a LoRA adapter, multi-modal
//! inputs, a `cache_salt` (first block only) or prompt embeddings. `sha256` (over pickle, with
//! `pickle.HIGHEST_PROTOCOL`, which is 5) is vLLM's default `--prefix-caching-hash-algo`.
//!
//! The pickle bytes are encoded by hand ([`pickle_block_key`]) the way CPython's C pickler writes
//! them, so no Python is needed. KV events carry only the low 64 bits of each digest
//! ([`as_event_int`]); the chain itself always uses the full 32 bytes.

use sha2::{Digest, Sha256};

/// A vLLM block hash: the full 32-byte SHA-256 digest (`BlockHash` in vLLM).
pub type BlockHash = [u8; 32];

/// The seed vLLM derives [`NONE_HASH`] from when `PYTHONHASHSEED` is not set and the hash
/// algorithm is cryptographic (sha256): `DEFAULT_NONE_HASH_SEED` in `kv_cache_utils.py`.
pub const DEFAULT_NONE_HASH_SEED: &str = "vllm-none-hash";

/// The parent hash of the first block of every sequence: `sha256(pickle.dumps("vllm-none-hash",
/// protocol=5))`, as vLLM's `init_none_hash` computes it with sha256 and no `PYTHONHASHSEED`.
/// A deployment that sets `PYTHONHASHSEED` uses [`none_hash_from_seed`] of that value instead.
pub const NONE_HASH: BlockHash = [
    0x06, 0x6b, 0x1e, 0x89, 0x87, 0xe0, 0x27, 0x13, 0x8e, 0x98, 0x70, 0x1c, 0x46, 0x12, 0x89, 0x29,
    0x37, 0x89, 0x35, 0xf9, 0xb6, 0xcd, 0x15, 0x49, 0x10, 0x5a, 0xe6, 0xb4, 0xf0, 0xd7, 0x11, 0x98,
];

/// A Python value inside a block's extra keys, pickled as the matching Python type.
///
/// vLLM's extra keys are a tuple of tuples such as `("cache_salt", salt)`, `("lora", name,
/// path)`, `("mm", identifier, offset)` or `("prompt_embeds", digest)`; the constructors
/// [`ExtraKey::cache_salt`] and [`ExtraKey::lora`] build the common ones.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExtraKey {
    /// Python `None`.
    None,
    /// A Python `int`.
    Int(i64),
    /// A Python `str`.
    Str(String),
    /// A Python `bytes`.
    Bytes(Vec<u8>),
    /// A Python `tuple`.
    Tuple(Vec<ExtraKey>),
}

impl ExtraKey {
    /// `("cache_salt", salt)`: vLLM adds it to the extra keys of the first block (tokens
    /// `0..block_size`) of a request that has a `cache_salt`.
    pub fn cache_salt(salt: &str) -> Self {
        ExtraKey::Tuple(vec![
            ExtraKey::Str("cache_salt".into()),
            ExtraKey::Str(salt.into()),
        ])
    }

    /// `("lora", lora_name, lora_path)`: vLLM adds it to every block of a LoRA request.
    pub fn lora(name: &str, path: &str) -> Self {
        ExtraKey::Tuple(vec![
            ExtraKey::Str("lora".into()),
            ExtraKey::Str(name.into()),
            ExtraKey::Str(path.into()),
        ])
    }
}

/// `sha256(pickle.dumps(seed, protocol=5))`: the `NONE_HASH` vLLM derives from a seed string
/// (the `PYTHONHASHSEED` value when it is set, else [`DEFAULT_NONE_HASH_SEED`]).
pub fn none_hash_from_seed(seed: &str) -> BlockHash {
    let mut p = Pickler::new();
    p.save_str(seed);
    sha256(&p.finish())
}

/// The hash of one block, chained on `parent` (`None` for the first block, which chains on
/// [`NONE_HASH`]). `tokens` are the block's token ids (a full block in vLLM's use) and `extra`
/// the block's extra keys (`None` for plain text requests). Same as vLLM's `hash_block_tokens`
/// with sha256.
pub fn hash_block(
    parent: Option<&BlockHash>,
    tokens: &[u32],
    extra: Option<&[ExtraKey]>,
) -> BlockHash {
    hash_block_with_none_hash(&NONE_HASH, parent, tokens, extra)
}

/// [`hash_block`] with an explicit `NONE_HASH` (see [`none_hash_from_seed`]).
pub fn hash_block_with_none_hash(
    none_hash: &BlockHash,
    parent: Option<&BlockHash>,
    tokens: &[u32],
    extra: Option<&[ExtraKey]>,
) -> BlockHash {
    sha256(&pickle_block_key(
        parent.unwrap_or(none_hash),
        tokens,
        extra,
    ))
}

/// The exact bytes of `pickle.dumps((parent, tuple(tokens), extra), protocol=5)` as CPython's
/// C pickler writes them (`extra` pickled as a tuple, or `None`). This is what vLLM hashes.
pub fn pickle_block_key(parent: &BlockHash, tokens: &[u32], extra: Option<&[ExtraKey]>) -> Vec<u8> {
    let mut p = Pickler::new();
    // The outer 3-tuple: elements, then TUPLE3, then MEMOIZE.
    p.save_bytes(parent);
    p.save_tuple_with(tokens.len(), |p| {
        for &t in tokens {
            p.save_int(i64::from(t));
        }
    });
    match extra {
        None => p.save_none(),
        Some(keys) => p.save_tuple_of(keys),
    }
    p.write(&[TUPLE3]);
    p.memoize();
    p.opcode_boundary();
    p.finish()
}

/// The hashes of every full block of `tokens`, chained from the first block (partial trailing
/// blocks are not hashed, as in vLLM). Extra keys are `None` for every block.
pub fn prompt_block_hashes(tokens: &[u32], block_size: usize) -> Vec<BlockHash> {
    let mut hashes = Vec::new();
    extend_block_hashes(&mut hashes, tokens, block_size);
    hashes
}

/// Appends the hashes of the full blocks of `tokens` that `hashes` does not cover yet, so a
/// growing sequence (prompt then generated tokens) is hashed incrementally, like vLLM's
/// `request_block_hasher`. `hashes` must be the chained hashes of the first `hashes.len()`
/// blocks of `tokens`. A `block_size` of 0 hashes nothing.
pub fn extend_block_hashes(hashes: &mut Vec<BlockHash>, tokens: &[u32], block_size: usize) {
    if block_size == 0 {
        return;
    }
    let full = tokens.len() / block_size;
    for i in hashes.len()..full {
        let parent = hashes.last().copied();
        let block = &tokens[i * block_size..(i + 1) * block_size];
        hashes.push(hash_block(parent.as_ref(), block, None));
    }
}

/// The value a KV event carries for a block hash: the low 64 bits of the digest read as a
/// big-endian integer (`int.from_bytes(h, "big") & (2**64 - 1)`, vLLM's
/// `maybe_convert_block_hash` with the default `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`). On the
/// wire it is a msgpack uint64.
pub fn as_event_int(h: &BlockHash) -> u64 {
    let mut low = [0u8; 8];
    low.copy_from_slice(&h[24..]);
    u64::from_be_bytes(low)
}

fn sha256(bytes: &[u8]) -> BlockHash {
    Sha256::digest(bytes).into()
}

// Pickle opcodes used (protocol 5).
const PROTO: u8 = 0x80;
const FRAME: u8 = 0x95;
const STOP: u8 = b'.';
const NONE: u8 = b'N';
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const LONG1: u8 = 0x8a;
const SHORT_BINBYTES: u8 = b'C';
const BINBYTES: u8 = b'B';
const BINBYTES8: u8 = 0x8e;
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE: u8 = b'X';
const BINUNICODE8: u8 = 0x8d;
const EMPTY_TUPLE: u8 = b')';
const MARK: u8 = b'(';
const TUPLE: u8 = b't';
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;
const MEMOIZE: u8 = 0x94;
const BINGET: u8 = b'h';
const LONG_BINGET: u8 = b'j';

/// CPython's `FRAME_SIZE_TARGET` and `FRAME_SIZE_MIN`.
const FRAME_SIZE_TARGET: usize = 64 * 1024;
const FRAME_SIZE_MIN: usize = 4;
const FRAME_HEADER_SIZE: usize = 9;

/// A minimal protocol-5 pickler that reproduces CPython's C `_pickle` output for the values
/// vLLM hashes: framing (frames committed at object boundaries once they reach 64 KiB, large
/// str/bytes payloads written outside frames), MEMOIZE after every str/bytes/non-empty tuple,
/// and the smallest int opcode.
///
/// CPython memoizes by object identity. Here a `str` equal to one already pickled is written as
/// a memo reference (BINGET), which is what happens for vLLM's interned tag literals (`"mm"`
/// twice in one block) and CPython's cached one-character strings; `bytes` and tuples are never
/// shared (vLLM builds them fresh per block).
struct Pickler {
    out: Vec<u8>,
    frame_start: Option<usize>,
    framing: bool,
    memo_len: u32,
    str_memo: Vec<(String, u32)>,
}

impl Pickler {
    fn new() -> Self {
        Pickler {
            out: vec![PROTO, 5],
            frame_start: None,
            framing: true,
            memo_len: 0,
            str_memo: Vec::new(),
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.framing && self.frame_start.is_none() {
            self.frame_start = Some(self.out.len());
            self.out.extend_from_slice(&[0; FRAME_HEADER_SIZE]);
        }
        self.out.extend_from_slice(bytes);
    }

    fn commit_frame(&mut self) {
        let Some(start) = self.frame_start.take() else {
            return;
        };
        let len = self.out.len() - start - FRAME_HEADER_SIZE;
        if len >= FRAME_SIZE_MIN {
            self.out[start] = FRAME;
            self.out[start + 1..start + FRAME_HEADER_SIZE]
                .copy_from_slice(&(len as u64).to_le_bytes());
        } else {
            self.out.drain(start..start + FRAME_HEADER_SIZE);
        }
    }

    /// Called after every complete object, like the C pickler's `_Pickler_OpcodeBoundary`.
    fn opcode_boundary(&mut self) {
        if let Some(start) = self.frame_start {
            if self.out.len() - start - FRAME_HEADER_SIZE >= FRAME_SIZE_TARGET {
                self.commit_frame();
            }
        }
    }

    /// Header then payload; payloads of 64 KiB or more bypass framing (`_Pickler_write_bytes`).
    fn write_with_payload(&mut self, header: &[u8], payload: &[u8]) {
        if payload.len() >= FRAME_SIZE_TARGET {
            self.commit_frame();
            self.framing = false;
            self.write(header);
            self.write(payload);
            self.framing = true;
        } else {
            let mut both = Vec::with_capacity(header.len() + payload.len());
            both.extend_from_slice(header);
            both.extend_from_slice(payload);
            self.write(&both);
        }
    }

    fn memoize(&mut self) {
        self.write(&[MEMOIZE]);
        self.memo_len += 1;
    }

    fn finish(mut self) -> Vec<u8> {
        self.write(&[STOP]);
        self.commit_frame();
        self.out
    }

    fn save_none(&mut self) {
        self.write(&[NONE]);
        self.opcode_boundary();
    }

    fn save_int(&mut self, v: i64) {
        if (0..=0xff).contains(&v) {
            self.write(&[BININT1, v as u8]);
        } else if (0..=0xffff).contains(&v) {
            let b = (v as u16).to_le_bytes();
            self.write(&[BININT2, b[0], b[1]]);
        } else if let Ok(small) = i32::try_from(v) {
            let b = small.to_le_bytes();
            self.write(&[BININT, b[0], b[1], b[2], b[3]]);
        } else {
            // LONG1: little-endian two's complement, as short as `pickle.encode_long`.
            let mut bytes = v.to_le_bytes().to_vec();
            while bytes.len() > 1 {
                let last = bytes[bytes.len() - 1];
                let prev_sign = bytes[bytes.len() - 2] & 0x80;
                if (last == 0 && prev_sign == 0) || (last == 0xff && prev_sign != 0) {
                    bytes.pop();
                } else {
                    break;
                }
            }
            self.write(&[LONG1, bytes.len() as u8]);
            self.write(&bytes);
        }
        self.opcode_boundary();
    }

    fn save_bytes(&mut self, b: &[u8]) {
        let header = sized_header(b.len(), SHORT_BINBYTES, BINBYTES, BINBYTES8);
        self.write_with_payload(&header, b);
        self.memoize();
        self.opcode_boundary();
    }

    fn save_str(&mut self, s: &str) {
        if let Some(&(_, idx)) = self.str_memo.iter().find(|(v, _)| v == s) {
            if let Ok(small) = u8::try_from(idx) {
                self.write(&[BINGET, small]);
            } else {
                let b = idx.to_le_bytes();
                self.write(&[LONG_BINGET, b[0], b[1], b[2], b[3]]);
            }
            self.opcode_boundary();
            return;
        }
        self.str_memo.push((s.to_owned(), self.memo_len));
        let header = sized_header(s.len(), SHORT_BINUNICODE, BINUNICODE, BINUNICODE8);
        self.write_with_payload(&header, s.as_bytes());
        self.memoize();
        self.opcode_boundary();
    }

    fn save_value(&mut self, v: &ExtraKey) {
        match v {
            ExtraKey::None => self.save_none(),
            ExtraKey::Int(i) => self.save_int(*i),
            ExtraKey::Str(s) => self.save_str(s),
            ExtraKey::Bytes(b) => self.save_bytes(b),
            ExtraKey::Tuple(items) => self.save_tuple_of(items),
        }
    }

    fn save_tuple_of(&mut self, items: &[ExtraKey]) {
        self.save_tuple_with(items.len(), |p| {
            for item in items {
                p.save_value(item);
            }
        });
    }

    /// A tuple of `len` elements written by `elems` (C `save_tuple`): `()` for no elements,
    /// TUPLE1..3 for up to three, else MARK ... TUPLE; non-empty tuples are memoized.
    fn save_tuple_with(&mut self, len: usize, elems: impl FnOnce(&mut Self)) {
        match len {
            0 => self.write(&[EMPTY_TUPLE]),
            1..=3 => {
                elems(self);
                self.write(&[[TUPLE1, TUPLE2, TUPLE3][len - 1]]);
                self.memoize();
            }
            _ => {
                self.write(&[MARK]);
                elems(self);
                self.write(&[TUPLE]);
                self.memoize();
            }
        }
        self.opcode_boundary();
    }
}

fn sized_header(len: usize, short: u8, medium: u8, long: u8) -> Vec<u8> {
    if let Ok(l) = u8::try_from(len) {
        vec![short, l]
    } else if let Ok(l) = u32::try_from(len) {
        let mut h = vec![medium];
        h.extend_from_slice(&l.to_le_bytes());
        h
    } else {
        let mut h = vec![long];
        h.extend_from_slice(&(len as u64).to_le_bytes());
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn none_hash_matches_seed() {
        assert_eq!(none_hash_from_seed(DEFAULT_NONE_HASH_SEED), NONE_HASH);
        // pickle.dumps("vllm-none-hash", 5): a frame of 18 bytes.
        let mut p = Pickler::new();
        p.save_str("vllm-none-hash");
        assert_eq!(
            hex(&p.finish()),
            "80059512000000000000008c0e766c6c6d2d6e6f6e652d68617368942e"
        );
    }

    #[test]
    fn tiny_pickle_has_no_frame_header_below_minimum() {
        // pickle.dumps(("a",), 5) == 80 05 95 07.. 8c 01 61 94 85 94 2e (frame of 7 >= 4).
        let mut p = Pickler::new();
        p.save_tuple_of(&[ExtraKey::Str("a".into())]);
        assert_eq!(hex(&p.finish()), "80059507000000000000008c01619485942e");
        // pickle.dumps(None, 5) == 80 05 4e 2e: a 2-byte body gets no FRAME.
        let mut p = Pickler::new();
        p.save_none();
        assert_eq!(hex(&p.finish()), "80054e2e");
    }
}
