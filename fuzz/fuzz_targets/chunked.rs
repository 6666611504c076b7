//! Chunked decoding: never panics, and feeding the input in two pieces at any split point gives
//! the same result as feeding it whole.
#![no_main]
use inferrail_wire::ChunkedDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let split = usize::from(data[0]) % data.len();
    let input = &data[1..];
    let split = split.min(input.len());

    let mut whole_out = Vec::new();
    let whole = ChunkedDecoder::new().feed(input, Some(&mut whole_out));

    let mut parts_out = Vec::new();
    let mut d = ChunkedDecoder::new();
    let parts = d.feed(&input[..split], Some(&mut parts_out)).and_then(|p| {
        if p.done {
            Ok(p)
        } else {
            d.feed(&input[split..], Some(&mut parts_out))
                .map(|q| inferrail_wire::Progress { consumed: p.consumed + q.consumed, done: q.done })
        }
    });
    match (whole, parts) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b);
            assert_eq!(whole_out, parts_out);
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!("split changed the outcome: {a:?} vs {b:?}"),
    }
});
