//! Wall-clock pieces of a response: the `date` header (cached per second), `created`, random ids.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Formats `secs` as an IMF-fixdate (`Mon, 30 Nov 2026 04:52:44 GMT`, always 29 bytes).
pub(crate) fn http_date(secs: u64) -> [u8; 29] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);

    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    let two = |v: u64| [b'0' + (v / 10 % 10) as u8, b'0' + (v % 10) as u8];
    out[5..7].copy_from_slice(&two(day as u64));
    out[8..11].copy_from_slice(MONTHS[(month - 1) as usize]);
    let y = year.clamp(0, 9999) as u64;
    out[12..16].copy_from_slice(&[
        b'0' + (y / 1000) as u8,
        b'0' + (y / 100 % 10) as u8,
        b'0' + (y / 10 % 10) as u8,
        b'0' + (y % 10) as u8,
    ]);
    out[17..19].copy_from_slice(&two(h));
    out[20..22].copy_from_slice(&two(m));
    out[23..25].copy_from_slice(&two(s));
    out
}

/// Per-engine clock state: the cached `date` value and a random-id generator.
pub(crate) struct Clock {
    secs: u64,
    date: [u8; 29],
    rng: u64,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        use std::hash::{BuildHasher, Hasher};
        // RandomState is seeded randomly per process and varies per instance.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        Clock {
            secs: u64::MAX,
            date: [0; 29],
            rng: h.finish(),
        }
    }

    /// The `date` header value and `created` seconds for now.
    pub(crate) fn now(&mut self) -> ([u8; 29], u64) {
        let secs = unix_now();
        if secs != self.secs {
            self.secs = secs;
            self.date = http_date(secs);
        }
        (self.date, secs)
    }

    /// A random 64-bit value (splitmix64).
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `digits` (at most 32) lowercase random hex digits as a string.
    pub(crate) fn hex(&mut self, digits: usize) -> String {
        let mut out = Vec::with_capacity(digits);
        self.push_hex(&mut out, digits);
        // Only ASCII hex digits were pushed.
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Appends `digits` lowercase hex digits of randomness (at most 32).
    pub(crate) fn push_hex(&mut self, out: &mut Vec<u8>, digits: usize) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut left = digits.min(32);
        while left > 0 {
            let mut v = self.next_u64();
            for _ in 0..left.min(16) {
                out.push(HEX[(v & 0xf) as usize]);
                v >>= 4;
            }
            left -= left.min(16);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_dates() {
        assert_eq!(&http_date(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        // The date header of shared/fixtures/vllm/http/01_health.
        assert_eq!(&http_date(1_796_014_364), b"Mon, 30 Nov 2026 04:52:44 GMT");
        assert_eq!(&http_date(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn hex_ids_have_the_asked_length() {
        let mut c = Clock::new();
        let mut out = Vec::new();
        c.push_hex(&mut out, 16);
        assert_eq!(out.len(), 16);
        c.push_hex(&mut out, 32);
        assert_eq!(out.len(), 48);
        assert!(out.iter().all(|b| b.is_ascii_hexdigit()));
    }
}
