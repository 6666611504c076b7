//! The data cores' use of [`inferrail_sync::Doorbell`], tested across real threads and runtimes
//! (the loom model of its logic is in `sync/tests/loom_doorbell.rs`).

pub use inferrail_sync::Doorbell;

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::Arc;
    use std::task::Context;
    use std::time::Duration;

    #[test]
    fn a_ring_from_another_thread_wakes_the_task() {
        let bell = Arc::new(Doorbell::new());
        let ringer = bell.clone();
        let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        let rings = rt.block_on(async move {
            let t = std::thread::spawn(move || {
                for _ in 0..3 {
                    std::thread::sleep(Duration::from_millis(20));
                    ringer.ring();
                }
            });
            let mut rings = 0;
            while rings < 3 {
                monoio::select! {
                    _ = bell.rung() => rings += 1,
                    _ = monoio::time::sleep(Duration::from_secs(10)) => break,
                }
            }
            t.join().unwrap();
            rings
        });
        assert_eq!(rings, 3);
    }

    #[test]
    fn a_ring_before_the_wait_is_kept() {
        let bell = Doorbell::new();
        bell.ring();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut f = std::pin::pin!(bell.rung());
        assert!(f.as_mut().poll(&mut cx).is_ready());
        let mut g = std::pin::pin!(bell.rung());
        assert!(g.as_mut().poll(&mut cx).is_pending());
    }
}
