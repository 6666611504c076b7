//! Cache-line padding so per-core counters never share a line with another core's.

/// Aligns `T` to 128 bytes (two 64-byte lines, covering adjacent-line prefetch on x86).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CachePadded<T>(pub T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
