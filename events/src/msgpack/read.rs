//! A msgpack reader over a byte slice: every value any encoder may write, read without copying
//! strings or binaries, and every length checked against the bytes that are left before it is
//! trusted (a hostile `array 32` header claiming four billion items allocates nothing).

use crate::batch::Value;

/// Why a msgpack value could not be read, with the byte offset it was found at. The bytes came
/// from the peer (an engine's publisher): reading them again gives the same error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The input ended inside a value.
    #[error("msgpack ends inside a value at byte {at}")]
    Truncated {
        /// Offset of the value that is cut short.
        at: usize,
    },
    /// A value of another type was found where `expected` was needed.
    #[error("msgpack byte {at}: expected {expected}, found {found}")]
    Type {
        /// Offset of the value.
        at: usize,
        /// What the reader needed.
        expected: &'static str,
        /// What the marker byte says it is.
        found: &'static str,
    },
    /// A string that is not UTF-8.
    #[error("msgpack byte {at}: string is not UTF-8")]
    Utf8 {
        /// Offset of the string's marker.
        at: usize,
    },
    /// An integer that does not fit where it is read into.
    #[error("msgpack byte {at}: integer out of range for {into}")]
    Range {
        /// Offset of the integer.
        at: usize,
        /// The type it was read into.
        into: &'static str,
    },
    /// Containers nested deeper than [`MAX_DEPTH`].
    #[error("msgpack byte {at}: nested deeper than {MAX_DEPTH}")]
    TooDeep {
        /// Offset of the container that went too deep.
        at: usize,
    },
}

/// How deep arrays and maps may nest inside one value read or skipped.
pub const MAX_DEPTH: usize = 32;

/// The kind of the next value, from its marker byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `nil`.
    Nil,
    /// `true` / `false`.
    Bool,
    /// Any integer (positive or negative fixint, `uint 8..64`, `int 8..64`).
    Int,
    /// `float 32` / `float 64`.
    Float,
    /// Any string.
    Str,
    /// Any binary.
    Bin,
    /// Any array.
    Array,
    /// Any map.
    Map,
    /// An extension type (not used by KV events).
    Ext,
    /// The never-used marker `0xc1`.
    Reserved,
}

impl Kind {
    fn of(marker: u8) -> Kind {
        match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xcc..=0xd3 => Kind::Int,
            0x80..=0x8f | 0xde | 0xdf => Kind::Map,
            0x90..=0x9f | 0xdc | 0xdd => Kind::Array,
            0xa0..=0xbf | 0xd9..=0xdb => Kind::Str,
            0xc0 => Kind::Nil,
            0xc2 | 0xc3 => Kind::Bool,
            0xc4..=0xc6 => Kind::Bin,
            0xca | 0xcb => Kind::Float,
            0xc7..=0xc9 | 0xd4..=0xd8 => Kind::Ext,
            0xc1 => Kind::Reserved,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Nil => "nil",
            Kind::Bool => "a bool",
            Kind::Int => "an integer",
            Kind::Float => "a float",
            Kind::Str => "a string",
            Kind::Bin => "binary",
            Kind::Array => "an array",
            Kind::Map => "a map",
            Kind::Ext => "an extension",
            Kind::Reserved => "the reserved byte 0xc1",
        }
    }
}

/// A cursor over msgpack bytes.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Offset of the next value.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The kind of the next value, without reading it.
    pub fn peek(&self) -> Result<Kind, ReadError> {
        self.buf
            .get(self.pos)
            .map(|&m| Kind::of(m))
            .ok_or(ReadError::Truncated { at: self.pos })
    }

    /// Whether the next value is `nil`; reads it if so.
    pub fn take_nil(&mut self) -> Result<bool, ReadError> {
        if self.peek()? == Kind::Nil {
            self.pos += 1;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    fn take(&mut self, n: usize, at: usize) -> Result<&'a [u8], ReadError> {
        if self.remaining() < n {
            return Err(ReadError::Truncated { at });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn be(&mut self, n: usize, at: usize) -> Result<u64, ReadError> {
        Ok(self
            .take(n, at)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn marker(&mut self, expected: &'static str, want: Kind) -> Result<(u8, usize), ReadError> {
        let at = self.pos;
        let kind = self.peek()?;
        if kind != want {
            return Err(ReadError::Type {
                at,
                expected,
                found: kind.name(),
            });
        }
        self.pos += 1;
        Ok((self.buf[at], at))
    }

    /// Any integer, as an `i128` (every msgpack integer fits).
    pub fn int(&mut self) -> Result<i128, ReadError> {
        let (m, at) = self.marker("an integer", Kind::Int)?;
        Ok(match m {
            0x00..=0x7f => i128::from(m),
            0xe0..=0xff => i128::from(m as i8),
            0xcc => i128::from(self.be(1, at)?),
            0xcd => i128::from(self.be(2, at)?),
            0xce => i128::from(self.be(4, at)?),
            0xcf => i128::from(self.be(8, at)?),
            0xd0 => i128::from(self.be(1, at)? as u8 as i8),
            0xd1 => i128::from(self.be(2, at)? as u16 as i16),
            0xd2 => i128::from(self.be(4, at)? as u32 as i32),
            _ => i128::from(self.be(8, at)? as i64),
        })
    }

    /// A non-negative integer that fits a `u64`.
    pub fn u64(&mut self) -> Result<u64, ReadError> {
        let at = self.pos;
        u64::try_from(self.int()?).map_err(|_| ReadError::Range { at, into: "u64" })
    }

    /// An integer that fits an `i64`.
    pub fn i64(&mut self) -> Result<i64, ReadError> {
        let at = self.pos;
        i64::try_from(self.int()?).map_err(|_| ReadError::Range { at, into: "i64" })
    }

    /// A non-negative integer that fits a `u32`.
    pub fn u32(&mut self) -> Result<u32, ReadError> {
        let at = self.pos;
        u32::try_from(self.int()?).map_err(|_| ReadError::Range { at, into: "u32" })
    }

    /// A float, or an integer read as one (Python writes `time.time()` as a float, but a
    /// whole-second timestamp from another encoder may be an integer).
    pub fn f64(&mut self) -> Result<f64, ReadError> {
        let at = self.pos;
        match self.peek()? {
            Kind::Float => {
                let (m, _) = self.marker("a float", Kind::Float)?;
                Ok(if m == 0xca {
                    f64::from(f32::from_bits(self.be(4, at)? as u32))
                } else {
                    f64::from_bits(self.be(8, at)?)
                })
            }
            Kind::Int => Ok(self.int()? as f64),
            other => Err(ReadError::Type {
                at,
                expected: "a float",
                found: other.name(),
            }),
        }
    }

    /// `true` or `false`.
    pub fn bool(&mut self) -> Result<bool, ReadError> {
        let (m, _) = self.marker("a bool", Kind::Bool)?;
        Ok(m == 0xc3)
    }

    /// A string's bytes, not checked as UTF-8, and the offset of its marker.
    fn str_bytes(&mut self) -> Result<(&'a [u8], usize), ReadError> {
        let (m, at) = self.marker("a string", Kind::Str)?;
        let n = match m {
            0xa0..=0xbf => usize::from(m & 0x1f),
            0xd9 => self.be(1, at)? as usize,
            0xda => self.be(2, at)? as usize,
            _ => self.be(4, at)? as usize,
        };
        Ok((self.take(n, at)?, at))
    }

    /// A UTF-8 string, borrowed.
    pub fn str(&mut self) -> Result<&'a str, ReadError> {
        let (bytes, at) = self.str_bytes()?;
        std::str::from_utf8(bytes).map_err(|_| ReadError::Utf8 { at })
    }

    /// Binary data, borrowed.
    pub fn bin(&mut self) -> Result<&'a [u8], ReadError> {
        let (m, at) = self.marker("binary", Kind::Bin)?;
        let n = match m {
            0xc4 => self.be(1, at)? as usize,
            0xc5 => self.be(2, at)? as usize,
            _ => self.be(4, at)? as usize,
        };
        self.take(n, at)
    }

    /// An array's length. The items follow; the length is at most the bytes left, since every
    /// item takes at least one.
    pub fn array_len(&mut self) -> Result<usize, ReadError> {
        let (m, at) = self.marker("an array", Kind::Array)?;
        let n = match m {
            0x90..=0x9f => usize::from(m & 0x0f),
            0xdc => self.be(2, at)? as usize,
            _ => self.be(4, at)? as usize,
        };
        self.check_items(n, 1, at)
    }

    /// A map's number of pairs. The pairs follow, key then value; the count is at most half
    /// the bytes left.
    pub fn map_len(&mut self) -> Result<usize, ReadError> {
        let (m, at) = self.marker("a map", Kind::Map)?;
        let n = match m {
            0x80..=0x8f => usize::from(m & 0x0f),
            0xde => self.be(2, at)? as usize,
            _ => self.be(4, at)? as usize,
        };
        self.check_items(n, 2, at)
    }

    fn check_items(&self, n: usize, bytes_each: usize, at: usize) -> Result<usize, ReadError> {
        if n.saturating_mul(bytes_each) > self.remaining() {
            return Err(ReadError::Truncated { at });
        }
        Ok(n)
    }

    /// Skips one value of any kind, containers with everything in them, without recursion.
    pub fn skip(&mut self) -> Result<(), ReadError> {
        // Values still to skip at each open container level.
        let mut pending: [usize; MAX_DEPTH + 1] = [0; MAX_DEPTH + 1];
        let mut depth = 0usize;
        pending[0] = 1;
        loop {
            while pending[depth] == 0 {
                if depth == 0 {
                    return Ok(());
                }
                depth -= 1;
            }
            pending[depth] -= 1;
            let at = self.pos;
            let inner = match self.peek()? {
                Kind::Array => self.array_len()?,
                Kind::Map => self.map_len()? * 2,
                _ => {
                    self.skip_scalar()?;
                    continue;
                }
            };
            if inner > 0 {
                if depth == MAX_DEPTH {
                    return Err(ReadError::TooDeep { at });
                }
                depth += 1;
                pending[depth] = inner;
            }
        }
    }

    fn skip_scalar(&mut self) -> Result<(), ReadError> {
        let at = self.pos;
        match self.peek()? {
            Kind::Nil => {
                self.pos += 1;
                Ok(())
            }
            Kind::Bool => self.bool().map(drop),
            Kind::Int => self.int().map(drop),
            Kind::Float => self.f64().map(drop),
            // Skipped strings are not checked as UTF-8: nothing reads them.
            Kind::Str => self.str_bytes().map(drop),
            Kind::Bin => self.bin().map(drop),
            Kind::Ext => {
                let m = self.buf[at];
                self.pos += 1;
                let n = match m {
                    0xd4 => 1,
                    0xd5 => 2,
                    0xd6 => 4,
                    0xd7 => 8,
                    0xd8 => 16,
                    0xc7 => self.be(1, at)? as usize,
                    0xc8 => self.be(2, at)? as usize,
                    _ => self.be(4, at)? as usize,
                };
                // The type byte, then the data.
                self.take(n + 1, at).map(drop)
            }
            Kind::Reserved => Err(ReadError::Type {
                at,
                expected: "a value",
                found: Kind::Reserved.name(),
            }),
            Kind::Array | Kind::Map => unreachable!("containers are skipped by the caller"),
        }
    }

    /// A generic value (what `extra_keys` holds): nil, bools, integers that fit an `i64`,
    /// floats, strings, binaries and arrays, nested at most [`MAX_DEPTH`] deep. A map or an
    /// extension is refused: nothing vLLM publishes there has one.
    pub fn value(&mut self) -> Result<Value, ReadError> {
        self.value_at(0)
    }

    fn value_at(&mut self, depth: usize) -> Result<Value, ReadError> {
        let at = self.pos;
        Ok(match self.peek()? {
            Kind::Nil => {
                self.pos += 1;
                Value::Nil
            }
            Kind::Bool => Value::Bool(self.bool()?),
            Kind::Int => Value::Int(self.i64()?),
            Kind::Float => Value::Float(self.f64()?),
            Kind::Str => Value::Str(self.str()?.to_owned()),
            Kind::Bin => Value::Bytes(self.bin()?.to_vec()),
            Kind::Array => {
                if depth == MAX_DEPTH {
                    return Err(ReadError::TooDeep { at });
                }
                let n = self.array_len()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value_at(depth + 1)?);
                }
                Value::Array(items)
            }
            other => {
                return Err(ReadError::Type {
                    at,
                    expected: "nil, a bool, a number, a string, binary or an array",
                    found: other.name(),
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgpack::Writer;

    fn written(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
        let mut w = Writer::new();
        f(&mut w);
        w.into_bytes()
    }

    #[test]
    fn every_integer_form_reads_back() {
        for v in [
            0i64,
            1,
            127,
            128,
            255,
            256,
            65535,
            65536,
            u32::MAX as i64,
            1 << 40,
            i64::MAX,
            -1,
            -32,
            -33,
            -128,
            -129,
            -32768,
            -32769,
            i32::MIN as i64,
            i64::MIN,
        ] {
            let b = written(|w| w.int(v));
            assert_eq!(Reader::new(&b).i64().unwrap(), v, "{v}");
            let mut r = Reader::new(&b);
            r.skip().unwrap();
            assert_eq!(r.remaining(), 0);
        }
        let b = written(|w| w.uint(u64::MAX));
        assert_eq!(Reader::new(&b).u64().unwrap(), u64::MAX);
        assert!(matches!(
            Reader::new(&b).i64(),
            Err(ReadError::Range { into: "i64", .. })
        ));
        // Signed families holding non-negative values, as other encoders write them.
        assert_eq!(Reader::new(&[0xd0, 0x05]).u64().unwrap(), 5);
        assert_eq!(
            Reader::new(&[0xd3, 0, 0, 0, 0, 0, 0, 1, 0]).u32().unwrap(),
            256
        );
        assert!(Reader::new(&[0xff]).u32().is_err());
    }

    #[test]
    fn strings_binaries_and_floats() {
        for s in [
            "",
            "GPU",
            &"x".repeat(31),
            &"y".repeat(32),
            &"z".repeat(300),
            &"w".repeat(70_000),
        ] {
            let b = written(|w| w.str(s));
            assert_eq!(Reader::new(&b).str().unwrap(), s);
        }
        let b = written(|w| w.bin(&[1, 2, 3]));
        assert_eq!(Reader::new(&b).bin().unwrap(), [1, 2, 3]);
        let b = written(|w| w.f64(1764480000.25));
        assert_eq!(Reader::new(&b).f64().unwrap(), 1764480000.25);
        assert_eq!(
            Reader::new(&[0xca, 0x3f, 0x80, 0, 0]).f64().unwrap(),
            1.0,
            "float 32"
        );
        assert_eq!(
            Reader::new(&[0x05]).f64().unwrap(),
            5.0,
            "an integer as a float"
        );
        assert!(matches!(
            Reader::new(&[0xa2, 0xff, 0xfe]).str(),
            Err(ReadError::Utf8 { at: 0 })
        ));
    }

    #[test]
    fn lengths_are_checked_before_they_are_trusted() {
        // array 32 claiming u32::MAX items, then nothing.
        assert_eq!(
            Reader::new(&[0xdd, 0xff, 0xff, 0xff, 0xff]).array_len(),
            Err(ReadError::Truncated { at: 0 })
        );
        assert_eq!(
            Reader::new(&[0xdf, 0, 0, 0, 2, 0xc0, 0xc0, 0xc0]).map_len(),
            Err(ReadError::Truncated { at: 0 })
        );
        assert_eq!(
            Reader::new(&[0xdb, 0, 0, 1, 0, b'a']).str(),
            Err(ReadError::Truncated { at: 0 })
        );
        assert_eq!(Reader::new(&[]).peek(), Err(ReadError::Truncated { at: 0 }));
        assert_eq!(
            Reader::new(&[0xcd, 1]).int(),
            Err(ReadError::Truncated { at: 0 })
        );
    }

    #[test]
    fn skip_passes_over_nested_containers_and_stops_at_the_depth_bound() {
        let b = written(|w| {
            w.map_len(2);
            w.str("a");
            w.array_len(3);
            w.nil();
            w.bin(b"xy");
            w.map_len(1);
            w.str("k");
            w.f64(2.5);
            w.str("b");
            w.int(-7);
        });
        let mut with_tail = b.clone();
        with_tail.push(0x2a);
        let mut r = Reader::new(&with_tail);
        r.skip().unwrap();
        assert_eq!(r.position(), b.len());
        assert_eq!(r.u64().unwrap(), 42);

        let deep = |n: usize| {
            let mut v = vec![0x91; n];
            v.push(0xc0);
            v
        };
        let ok = deep(MAX_DEPTH);
        let mut r = Reader::new(&ok);
        r.skip().unwrap();
        assert_eq!(r.remaining(), 0);
        assert!(matches!(
            Reader::new(&deep(MAX_DEPTH + 1)).skip(),
            Err(ReadError::TooDeep { .. })
        ));
        assert!(matches!(
            Reader::new(&deep(100_000)).value(),
            Err(ReadError::TooDeep { .. })
        ));
        // Extensions are skipped whole; the reserved marker is refused.
        let mut r = Reader::new(&[0xd5, 1, 2, 3, 0xc0]);
        r.skip().unwrap();
        assert_eq!(r.position(), 4);
        assert!(Reader::new(&[0xc1]).skip().is_err());
    }

    #[test]
    fn values_read_what_the_writer_writes() {
        let v = Value::Array(vec![
            Value::Str("salt".into()),
            Value::Int(-3),
            Value::Bytes(vec![9, 9]),
            Value::Array(vec![Value::Nil, Value::Bool(true), Value::Float(0.5)]),
        ]);
        let b = written(|w| v.encode(w));
        assert_eq!(Reader::new(&b).value().unwrap(), v);
        assert!(matches!(
            Reader::new(&[0x80]).value(),
            Err(ReadError::Type { found: "a map", .. })
        ));
    }

    proptest::proptest! {
        /// On arbitrary bytes the reader never panics, and a successful skip never moves past
        /// the end.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let mut r = Reader::new(&bytes);
            if r.skip().is_ok() {
                proptest::prop_assert!(r.position() <= bytes.len());
            }
            let _ = Reader::new(&bytes).value();
        }
    }
}
