//! A minimal msgpack writer producing msgspec's encoding of each value (the smallest form of
//! every integer, string and container header; floats always as float64), and a reader
//! ([`read`]) that decodes what any msgpack encoder writes, refusing malformed input with a
//! typed error instead of panicking.

pub mod read;

/// A minimal msgpack writer producing msgspec's encoding of each value.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Writer::default()
    }

    /// An empty writer with room for `cap` bytes.
    pub fn with_capacity(cap: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(cap),
        }
    }

    /// The bytes written so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// `nil` (Python `None`).
    pub fn nil(&mut self) {
        self.buf.push(0xc0);
    }

    /// `true` / `false`.
    pub fn bool(&mut self, v: bool) {
        self.buf.push(if v { 0xc3 } else { 0xc2 });
    }

    /// A non-negative integer in its smallest form.
    pub fn uint(&mut self, v: u64) {
        if v < 0x80 {
            self.buf.push(v as u8);
        } else if v <= u64::from(u8::MAX) {
            self.buf.extend_from_slice(&[0xcc, v as u8]);
        } else if v <= u64::from(u16::MAX) {
            self.buf.push(0xcd);
            self.buf.extend_from_slice(&(v as u16).to_be_bytes());
        } else if v <= u64::from(u32::MAX) {
            self.buf.push(0xce);
            self.buf.extend_from_slice(&(v as u32).to_be_bytes());
        } else {
            self.buf.push(0xcf);
            self.buf.extend_from_slice(&v.to_be_bytes());
        }
    }

    /// A signed integer in its smallest form (non-negative values as unsigned, like msgspec).
    pub fn int(&mut self, v: i64) {
        if v >= 0 {
            self.uint(v as u64);
        } else if v >= -32 {
            self.buf.push(v as i8 as u8);
        } else if v >= i64::from(i8::MIN) {
            self.buf.extend_from_slice(&[0xd0, v as i8 as u8]);
        } else if v >= i64::from(i16::MIN) {
            self.buf.push(0xd1);
            self.buf.extend_from_slice(&(v as i16).to_be_bytes());
        } else if v >= i64::from(i32::MIN) {
            self.buf.push(0xd2);
            self.buf.extend_from_slice(&(v as i32).to_be_bytes());
        } else {
            self.buf.push(0xd3);
            self.buf.extend_from_slice(&v.to_be_bytes());
        }
    }

    /// A float, always as float64 (msgspec never narrows floats).
    pub fn f64(&mut self, v: f64) {
        self.buf.push(0xcb);
        self.buf.extend_from_slice(&v.to_bits().to_be_bytes());
    }

    /// A UTF-8 string.
    pub fn str(&mut self, s: &str) {
        let n = s.len();
        if n < 32 {
            self.buf.push(0xa0 | n as u8);
        } else if n <= usize::from(u8::MAX) {
            self.buf.extend_from_slice(&[0xd9, n as u8]);
        } else if n <= usize::from(u16::MAX) {
            self.buf.push(0xda);
            self.buf.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            self.buf.push(0xdb);
            self.buf.extend_from_slice(&len32(n).to_be_bytes());
        }
        self.buf.extend_from_slice(s.as_bytes());
    }

    /// Binary data (Python `bytes`).
    pub fn bin(&mut self, b: &[u8]) {
        let n = b.len();
        if n <= usize::from(u8::MAX) {
            self.buf.extend_from_slice(&[0xc4, n as u8]);
        } else if n <= usize::from(u16::MAX) {
            self.buf.push(0xc5);
            self.buf.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            self.buf.push(0xc6);
            self.buf.extend_from_slice(&len32(n).to_be_bytes());
        }
        self.buf.extend_from_slice(b);
    }

    /// The header of an array of `n` elements (which the caller writes next).
    pub fn array_len(&mut self, n: usize) {
        if n < 16 {
            self.buf.push(0x90 | n as u8);
        } else if n <= usize::from(u16::MAX) {
            self.buf.push(0xdc);
            self.buf.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            self.buf.push(0xdd);
            self.buf.extend_from_slice(&len32(n).to_be_bytes());
        }
    }

    /// The header of a map of `n` pairs (which the caller writes next, key then value).
    pub fn map_len(&mut self, n: usize) {
        if n < 16 {
            self.buf.push(0x80 | n as u8);
        } else if n <= usize::from(u16::MAX) {
            self.buf.push(0xde);
            self.buf.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            self.buf.push(0xdf);
            self.buf.extend_from_slice(&len32(n).to_be_bytes());
        }
    }

    /// A string, or nil for `None`.
    pub fn opt_str(&mut self, v: Option<&str>) {
        match v {
            Some(s) => self.str(s),
            None => self.nil(),
        }
    }

    /// An integer, or nil for `None`.
    pub fn opt_int(&mut self, v: Option<i64>) {
        match v {
            Some(i) => self.int(i),
            None => self.nil(),
        }
    }
}

fn len32(n: usize) -> u32 {
    // msgpack cannot represent longer values; a KV event never comes close.
    u32::try_from(n).expect("msgpack value longer than u32::MAX")
}
