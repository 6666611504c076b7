//! What multishot receive with a provided-buffer ring would save the data plane, measured.
//!
//! monoio (the data plane's runtime) submits one single-shot `IORING_OP_RECV` into the reader's
//! own buffer per read, re-armed after each completion. io_uring also offers a multishot receive
//! (`IORING_RECV_MULTISHOT`) that stays armed and picks a buffer from a ring the application
//! registered (`IORING_REGISTER_PBUF_RING`). This bench runs both on one thread and one ring, in
//! the data plane's shape: PAIRS loopback connections, one MSG-byte message on each per round,
//! every receive armed before its bytes arrive, one `io_uring_enter` per wait. It alternates the
//! two variants REPS times and prints, per variant, the thread's on-CPU time per message received
//! (from /proc/thread-self/schedstat, exact) and the submission entries per message, as one JSON
//! line. The writes (and the loopback delivery they run) cost both variants the same; the
//! difference is what the receive style costs.
//!
//! Run: `perf/uring-recv` (release build, results in perf/results/uring-recv-<commit>/), or
//! `cargo bench -p inferrail-dataplane --bench uring_recv -- [PAIRS MSG ROUNDS REPS]`.
//!
//! The data plane does not use this code: it is a measurement. `unsafe` here (allowed for this
//! file only, as in the socket helpers) hands buffers to the kernel; each block says why the
//! buffer outlives the operation.
#![allow(unsafe_code)]

use io_uring::{cqueue, opcode, types, IoUring};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU16, Ordering};

/// Provided buffers in the ring (a power of two) and the size of each.
const RING_BUFFERS: u16 = 512;
const RING_BUFFER_BYTES: usize = 4096;
/// The buffer group id of the ring.
const GROUP: u16 = 7;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .filter_map(|a| a.parse().ok())
        .collect();
    let pairs = args.first().copied().unwrap_or(32);
    let msg = args.get(1).copied().unwrap_or(1024);
    let rounds = args.get(2).copied().unwrap_or(4000);
    let reps = args.get(3).copied().unwrap_or(5);
    assert!(
        msg <= RING_BUFFER_BYTES,
        "MSG must be at most {RING_BUFFER_BYTES}"
    );
    let (clients, servers) = connect_pairs(pairs);
    let payload = vec![b'x'; msg];
    let mut single = Vec::new();
    let mut multi = Vec::new();
    for _ in 0..reps {
        single.push(run_single_shot(&clients, &servers, &payload, rounds));
        multi.push(run_multishot(&clients, &servers, &payload, rounds));
    }
    let ns = |v: &[Sample]| median(v.iter().map(|s| s.cpu_ns_per_message).collect());
    let sqes = |v: &[Sample]| median(v.iter().map(|s| s.sqes_per_message).collect());
    let all = |v: &[Sample]| {
        v.iter()
            .map(|s| format!("{:.1}", s.cpu_ns_per_message))
            .collect::<Vec<_>>()
            .join(",")
    };
    println!(
        "{{\"pairs\":{pairs},\"msg_bytes\":{msg},\"rounds\":{rounds},\"reps\":{reps},\
         \"messages_per_rep\":{},\
         \"single_shot\":{{\"cpu_ns_per_message\":{:.1},\"sqes_per_message\":{:.3},\"reps_ns\":[{}]}},\
         \"multishot\":{{\"cpu_ns_per_message\":{:.1},\"sqes_per_message\":{:.3},\"reps_ns\":[{}]}}}}",
        pairs * rounds,
        ns(&single),
        sqes(&single),
        all(&single),
        ns(&multi),
        sqes(&multi),
        all(&multi),
    );
}

/// One variant's run.
struct Sample {
    cpu_ns_per_message: f64,
    sqes_per_message: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The on-CPU time of this thread so far, in ns (exact: the scheduler's own count).
fn thread_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    text.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .expect("schedstat field 1")
}

/// `pairs` loopback connections: the writing ends and the reading ends.
fn connect_pairs(pairs: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..pairs {
        let c = TcpStream::connect(addr).expect("connect");
        c.set_nodelay(true).expect("nodelay");
        let (s, _) = listener.accept().expect("accept");
        clients.push(c);
        servers.push(s);
    }
    (clients, servers)
}

/// Writes one message on every connection.
fn write_round(clients: &[TcpStream], payload: &[u8]) {
    for mut c in clients {
        c.write_all(payload).expect("write");
    }
}

/// Runs `rounds` rounds on `ring` (its receives armed): a message written on every connection,
/// then completions reaped until all of them arrived, each handed to `on_completion` (with the
/// ring, to re-arm) which returns the bytes it received. Returns the thread's CPU ns meanwhile.
fn drive(
    ring: &mut IoUring,
    clients: &[TcpStream],
    payload: &[u8],
    rounds: usize,
    mut on_completion: impl FnMut(&mut IoUring, usize, i32, u32) -> usize,
    mut after_batch: impl FnMut(),
) -> u64 {
    let start = thread_cpu_ns();
    for _ in 0..rounds {
        write_round(clients, payload);
        let mut left = clients.len() * payload.len();
        while left > 0 {
            ring.submit_and_wait(1).expect("wait");
            let done: Vec<(usize, i32, u32)> = ring
                .completion()
                .map(|c| (c.user_data() as usize, c.result(), c.flags()))
                .collect();
            for (i, n, flags) in done {
                left -= on_completion(ring, i, n, flags);
            }
            after_batch();
        }
    }
    thread_cpu_ns() - start
}

/// Arms a receive on each of `pairs` connections and submits them.
fn arm_all(ring: &mut IoUring, pairs: usize, arm: &mut impl FnMut(&mut IoUring, usize)) {
    for i in 0..pairs {
        arm(ring, i);
    }
    ring.submit().expect("submit");
}

/// A run's figures: `sqes` counts every submission, the initial arming included.
fn sample(cpu_ns: u64, sqes: u64, pairs: usize, rounds: usize) -> Sample {
    let messages = (rounds * pairs) as f64;
    Sample {
        cpu_ns_per_message: cpu_ns as f64 / messages,
        sqes_per_message: (sqes as f64 - pairs as f64) / messages,
    }
}

/// monoio's way: one single-shot receive per read into the connection's own buffer, re-armed
/// after each completion (submitted with the next wait).
fn run_single_shot(
    clients: &[TcpStream],
    servers: &[TcpStream],
    payload: &[u8],
    rounds: usize,
) -> Sample {
    let mut ring = IoUring::new(256).expect("io_uring");
    let mut bufs: Vec<Vec<u8>> = servers.iter().map(|_| vec![0u8; payload.len()]).collect();
    let mut sqes = 0u64;
    let mut arm = |ring: &mut IoUring, i: usize| {
        let b = &mut bufs[i];
        let e = opcode::Recv::new(
            types::Fd(servers[i].as_raw_fd()),
            b.as_mut_ptr(),
            b.len() as u32,
        )
        .build()
        .user_data(i as u64);
        // SAFETY: `bufs[i]` is neither dropped nor touched until this receive completes (its
        // completion is reaped before the next receive into it is pushed), and the buffers are
        // leaked, never freed, after the ring is gone.
        unsafe { ring.submission().push(&e).expect("sq room") };
        sqes += 1;
    };
    arm_all(&mut ring, servers.len(), &mut arm);
    let on_completion = |ring: &mut IoUring, i: usize, n: i32, _flags: u32| {
        assert!(n > 0, "recv failed: {n}");
        arm(ring, i);
        n as usize
    };
    let cpu = drive(&mut ring, clients, payload, rounds, on_completion, || {});
    // The receives still armed are cancelled when the ring goes, asynchronously: the buffers
    // are leaked so that none can be written after it is freed.
    drop(ring);
    std::mem::forget(bufs);
    sample(cpu, sqes, servers.len(), rounds)
}

/// A page-aligned ring of provided buffers, registered with one io_uring.
struct BufRing {
    entries: *mut types::BufRingEntry,
    buffers: Vec<u8>,
    tail: u16,
}

impl BufRing {
    fn new(ring: &IoUring) -> BufRing {
        let bytes = usize::from(RING_BUFFERS) * std::mem::size_of::<types::BufRingEntry>();
        let layout = std::alloc::Layout::from_size_align(bytes, 4096).expect("layout");
        // SAFETY: a non-zero size; the memory is zeroed, which is a valid (empty) ring.
        let entries = unsafe { std::alloc::alloc_zeroed(layout) } as *mut types::BufRingEntry;
        assert!(!entries.is_null(), "alloc");
        let mut r = BufRing {
            entries,
            buffers: vec![0u8; usize::from(RING_BUFFERS) * RING_BUFFER_BYTES],
            tail: 0,
        };
        for bid in 0..RING_BUFFERS {
            r.give(bid);
        }
        r.publish();
        // SAFETY: the ring memory (and the buffers it names) is never freed: `run_multishot`
        // leaks it after the io_uring is gone.
        unsafe {
            ring.submitter()
                .register_buf_ring(entries as u64, RING_BUFFERS, GROUP)
                .expect("register_buf_ring (kernel 5.19+)");
        }
        r
    }

    /// Puts buffer `bid` back at the tail (visible to the kernel after `publish`).
    fn give(&mut self, bid: u16) {
        let slot = usize::from(self.tail & (RING_BUFFERS - 1));
        let addr = self.buffers.as_ptr() as u64 + u64::from(bid) * RING_BUFFER_BYTES as u64;
        // SAFETY: `slot` < RING_BUFFERS, inside the allocation; the kernel only reads entries
        // between its head and the published tail, and this one is past the tail.
        let e = unsafe { &mut *self.entries.add(slot) };
        e.set_addr(addr);
        e.set_len(RING_BUFFER_BYTES as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes the given buffers visible to the kernel.
    fn publish(&self) {
        // SAFETY: the tail is the `resv` field of entry 0, a u16 inside the allocation, which the
        // kernel reads concurrently: written with a release store.
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}

/// Multishot receive from a provided-buffer ring: armed once per connection, each completion
/// names the buffer it filled, which goes back to the ring after the bytes are used.
fn run_multishot(
    clients: &[TcpStream],
    servers: &[TcpStream],
    payload: &[u8],
    rounds: usize,
) -> Sample {
    let mut ring = IoUring::new(256).expect("io_uring");
    let bufs = std::cell::RefCell::new(BufRing::new(&ring));
    let mut sqes = 0u64;
    let mut arm = |ring: &mut IoUring, i: usize| {
        let e = opcode::RecvMulti::new(types::Fd(servers[i].as_raw_fd()), GROUP)
            .build()
            .user_data(i as u64);
        // SAFETY: the receive takes buffers only from the registered ring, which is leaked,
        // never freed, after the ring is gone.
        unsafe { ring.submission().push(&e).expect("sq room") };
        sqes += 1;
    };
    arm_all(&mut ring, servers.len(), &mut arm);
    let on_completion = |ring: &mut IoUring, i: usize, n: i32, flags: u32| {
        if let Some(bid) = cqueue::buffer_select(flags) {
            bufs.borrow_mut().give(bid);
        }
        if n <= 0 {
            assert_eq!(n, -libc::ENOBUFS, "recv failed: {n}");
        }
        if !cqueue::more(flags) {
            arm(ring, i);
        }
        n.max(0) as usize
    };
    let cpu = drive(&mut ring, clients, payload, rounds, on_completion, || {
        bufs.borrow().publish()
    });
    // As in the single-shot run: the ring and its buffers are leaked, not freed under the kernel.
    drop(ring);
    std::mem::forget(bufs);
    sample(cpu, sqes, servers.len(), rounds)
}
