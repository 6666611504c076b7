//! The codec against a real vLLM 0.32 engine's traffic, both ways (`tests/fixtures/`, from
//! `/work/shared/fixtures/vllm/`): `kv_events/frames.bin` is the live SUB capture (per message a
//! u32be frame count, then per frame a u32be length and the bytes), `kv_events/typed.jsonl` the
//! same batches decoded by vLLM itself; `kv_events/replay_*frames.bin` the replay ROUTER's
//! answers; `kv_events_salted/` a capture with `cache_salt` requests (extra keys on the first
//! block).

#[path = "kv_capture/mod.rs"]
mod kv_capture;

use inferrail_events::{decode_batch, KvEventBatch, Value, WireEvent, END_SEQ};
use kv_capture::{batch_from_json, container, typed_batches};

const FRAMES: &[u8] = include_bytes!("fixtures/kv_events/frames.bin");
const REPLAY_0: &[u8] = include_bytes!("fixtures/kv_events/replay_frames.bin");
const SALTED_FRAMES: &[u8] = include_bytes!("fixtures/kv_events_salted/frames.bin");
const SALTED_DECODED: &str = include_str!("fixtures/kv_events_salted/decoded.json");

fn kinds(batch: &KvEventBatch) -> [usize; 3] {
    let mut k = [0; 3];
    for e in &batch.events {
        k[match e {
            WireEvent::BlockStored(_) => 0,
            WireEvent::BlockRemoved(_) => 1,
            WireEvent::AllBlocksCleared => 2,
        }] += 1;
    }
    k
}

#[test]
fn every_captured_payload_decodes_to_what_vllm_decoded() {
    let msgs = container(FRAMES);
    let typed = typed_batches();
    assert_eq!(msgs.len(), 14);
    assert_eq!(typed.len(), msgs.len());
    let mut all = [0usize; 3];
    for (frames, (seq, topic, want)) in msgs.iter().zip(&typed) {
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[0], topic.as_bytes());
        assert_eq!(frames[1], seq.to_be_bytes());
        let got = decode_batch(&frames[2]).unwrap_or_else(|e| panic!("seq {seq}: {e}"));
        assert_eq!(got.unknown_events, 0);
        assert_eq!(&got.batch, want, "seq {seq}");
        for (a, b) in all.iter_mut().zip(kinds(&got.batch)) {
            *a += b;
        }
    }
    // Every event type of the capture was covered.
    assert_eq!(all, [14, 47, 1]);
}

#[test]
fn every_captured_batch_reencodes_byte_for_byte() {
    let msgs = container(FRAMES);
    for (frames, (seq, _, batch)) in msgs.iter().zip(typed_batches()) {
        let ours = batch.encode();
        assert_eq!(ours.len(), frames[2].len(), "payload length of seq {seq}");
        assert!(ours == frames[2], "payload bytes of seq {seq} differ");
    }
}

#[test]
fn replayed_payloads_are_the_live_ones() {
    let live = container(FRAMES);
    let replay = container(REPLAY_0);
    // ["", topic, seq, payload] per batch, then the end marker.
    let (end, batches) = replay.split_last().unwrap();
    assert_eq!(
        end,
        &[b"".to_vec(), b"".to_vec(), END_SEQ.to_vec(), b"".to_vec()]
    );
    assert!(!batches.is_empty());
    for msg in batches {
        assert_eq!(msg.len(), 4);
        assert!(msg[0].is_empty());
        let seq = u64::from_be_bytes(msg[2].as_slice().try_into().unwrap());
        let original = live
            .iter()
            .find(|m| m[1] == msg[2])
            .unwrap_or_else(|| panic!("seq {seq} was not published live"));
        assert_eq!(msg[3], original[2]);
        decode_batch(&msg[3]).unwrap();
    }
}

#[test]
fn salted_requests_carry_their_salt_in_the_first_blocks_extra_keys() {
    let msgs = container(SALTED_FRAMES);
    let decoded: serde_json::Value = serde_json::from_str(SALTED_DECODED).unwrap();
    let decoded = decoded.as_array().unwrap();
    assert_eq!(msgs.len(), decoded.len());
    let mut salts = Vec::new();
    for (frames, d) in msgs.iter().zip(decoded) {
        let got = decode_batch(&frames[2]).unwrap().batch;
        let mut want = batch_from_json(&d["typed"]);
        assert!((got.ts - want.ts).abs() < 1e-6);
        want.ts = got.ts;
        assert_eq!(got, want);
        // Re-encoding gives the engine's bytes back.
        assert!(got.encode() == frames[2]);
        let WireEvent::BlockStored(s) = &got.events[0] else {
            panic!("a BlockStored")
        };
        salts.push(
            s.extra_keys
                .as_ref()
                .and_then(|k| k.first().cloned().flatten()),
        );
    }
    assert_eq!(
        salts,
        [
            None,
            Some(vec![Value::Str("abc".into())]),
            Some(vec![Value::Str("xyz".into())]),
            None
        ]
    );
}
