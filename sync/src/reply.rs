//! A one-shot answer from a worker thread to the task that asked: the worker publishes the value
//! into a [`Mailbox`] and rings a [`Doorbell`]; the asking task awaits it. Lock-free both ways.

use crate::doorbell::Doorbell;
use crate::mailbox::Mailbox;
use crate::Arc;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

struct Shared<T> {
    value: Mailbox<T>,
    bell: Doorbell,
}

/// The asking side: a future that completes with the answer (`None` when the sender was dropped
/// without answering).
pub struct Reply<T> {
    shared: Arc<Shared<T>>,
}

/// The answering side. Dropping it without [`ReplySender::send`] completes the reply with `None`.
pub struct ReplySender<T> {
    shared: Option<Arc<Shared<T>>>,
}

/// A connected pair.
pub fn reply_channel<T>() -> (ReplySender<T>, Reply<T>) {
    let shared = Arc::new(Shared {
        value: Mailbox::new(),
        bell: Doorbell::new(),
    });
    (
        ReplySender {
            shared: Some(shared.clone()),
        },
        Reply { shared },
    )
}

impl<T> ReplySender<T> {
    /// True when the asking side is gone (it stopped waiting): the answer would be thrown away,
    /// so the work behind it can be skipped.
    pub fn is_abandoned(&self) -> bool {
        self.shared
            .as_ref()
            .is_none_or(|s| Arc::strong_count(s) == 1)
    }

    /// Sends the answer and wakes the asking task.
    pub fn send(mut self, value: T) {
        if let Some(shared) = self.shared.take() {
            shared.value.publish(Arc::new(value));
            shared.bell.ring();
        }
    }
}

impl<T> Drop for ReplySender<T> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.bell.ring();
        }
    }
}

impl<T> Reply<T> {
    /// The answer if it has arrived, without waiting.
    pub fn try_take(&self) -> Option<Arc<T>> {
        self.shared.value.take()
    }
}

impl<T> Future for Reply<T> {
    type Output = Option<Arc<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Arc<T>>> {
        if let Some(v) = self.shared.value.take() {
            return Poll::Ready(Some(v));
        }
        let mut rung = std::pin::pin!(self.shared.bell.rung());
        match rung.as_mut().poll(cx) {
            Poll::Ready(()) => {
                // Rung: either the value is there, or the sender is gone.
                Poll::Ready(self.shared.value.take())
            }
            Poll::Pending => {
                // The value may have been published between the first take and the registration.
                match self.shared.value.take() {
                    Some(v) => Poll::Ready(Some(v)),
                    None => Poll::Pending,
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_sender_knows_when_nobody_waits_any_more() {
        let (tx, rx) = reply_channel::<u32>();
        assert!(!tx.is_abandoned());
        drop(rx);
        assert!(tx.is_abandoned());
    }
}
