//! Loom models of the sequence cell: run with
//! `RUSTFLAGS="--cfg loom" cargo test -p inferrail-sync --release --test loom_seq_cell`.
#![cfg(loom)]

use inferrail_sync::SeqCell;
use loom::sync::Arc;
use loom::thread;

/// A read is `None` or exactly one write's record, never a mix.
fn check(read: Option<[u64; 2]>, allowed: &[u64]) {
    if let Some(w) = read {
        assert!(w.iter().all(|&x| x == w[0]), "torn record {w:?}");
        assert!(allowed.contains(&w[0]), "{w:?} was never written");
    }
}

/// One writer replaces the record twice while another thread reads it twice: every read is
/// whole, reads never go back in time, and after the writer is joined the last write is read.
#[test]
fn a_reader_sees_whole_records_in_order() {
    loom::model(|| {
        let cell = Arc::new(SeqCell::<2>::new());
        let reader = {
            let cell = cell.clone();
            thread::spawn(move || {
                let first = cell.read();
                check(first, &[1, 2]);
                let second = cell.read();
                check(second, &[1, 2]);
                if let (Some(a), Some(b)) = (first, second) {
                    assert!(b[0] >= a[0], "read {a:?} then {b:?}");
                }
            })
        };
        assert!(cell.write([1; 2]));
        assert!(cell.write([2; 2]));
        reader.join().unwrap();
        assert_eq!(cell.read(), Some([2; 2]));
    });
}

/// Two writers race: each write lands whole or is refused, a reader never sees a mix, and at
/// least one write lands.
#[test]
fn racing_writers_never_tear_the_record() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let cell = Arc::new(SeqCell::<2>::new());
        let other = {
            let cell = cell.clone();
            thread::spawn(move || cell.write([7; 2]))
        };
        let reader = {
            let cell = cell.clone();
            thread::spawn(move || check(cell.read(), &[7, 9]))
        };
        let mine = cell.write([9; 2]);
        let theirs = other.join().unwrap();
        reader.join().unwrap();
        assert!(mine || theirs, "both writes were refused");
        let last = cell.read().expect("a write landed");
        check(Some(last), &[7, 9]);
    });
}
