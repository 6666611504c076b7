//! Small collections an exchange keeps inline, so a request allocates nothing for its actions
//! and the replicas it tried: a request issues a handful of actions at a time and tries a few
//! replicas; more spill to the heap, in order.

use std::collections::VecDeque;

/// Actions held inline before any spill.
const QUEUE_INLINE: usize = 8;
/// Replicas remembered inline before any spill.
const LIST_INLINE: usize = 8;

/// A first-in first-out queue with room for [`QUEUE_INLINE`] items inline.
#[derive(Debug)]
pub(super) struct InlineQueue<A> {
    ring: [Option<A>; QUEUE_INLINE],
    head: usize,
    len: usize,
    /// Items pushed while the ring was full, or while earlier ones still wait here: popped
    /// after the ring's, so the order holds.
    spill: VecDeque<A>,
}

impl<A> InlineQueue<A> {
    /// An empty queue (no allocation).
    pub(super) fn new() -> InlineQueue<A> {
        InlineQueue {
            ring: std::array::from_fn(|_| None),
            head: 0,
            len: 0,
            spill: VecDeque::new(),
        }
    }

    /// Appends `item` at the back.
    pub(super) fn push_back(&mut self, item: A) {
        if self.spill.is_empty() && self.len < QUEUE_INLINE {
            self.ring[(self.head + self.len) % QUEUE_INLINE] = Some(item);
            self.len += 1;
        } else {
            self.spill.push_back(item);
        }
    }

    /// Takes the front item.
    pub(super) fn pop_front(&mut self) -> Option<A> {
        if self.len == 0 {
            return self.spill.pop_front();
        }
        let item = self.ring[self.head].take();
        self.head = (self.head + 1) % QUEUE_INLINE;
        self.len -= 1;
        item
    }
}

/// An append-only list with room for [`LIST_INLINE`] items inline; read as one slice.
#[derive(Debug)]
pub(super) struct InlineList {
    inline: [usize; LIST_INLINE],
    len: usize,
    /// Every item, once there were more than fit inline.
    spilled: Vec<usize>,
}

impl InlineList {
    /// An empty list (no allocation).
    pub(super) fn new() -> InlineList {
        InlineList {
            inline: [0; LIST_INLINE],
            len: 0,
            spilled: Vec::new(),
        }
    }

    /// Appends `item`.
    pub(super) fn push(&mut self, item: usize) {
        if self.spilled.is_empty() && self.len < LIST_INLINE {
            self.inline[self.len] = item;
            self.len += 1;
            return;
        }
        if self.spilled.is_empty() {
            self.spilled.extend_from_slice(&self.inline[..self.len]);
        }
        self.spilled.push(item);
    }

    /// Every item, in the order pushed.
    pub(super) fn as_slice(&self) -> &[usize] {
        if self.spilled.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spilled
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any mix of pushes and pops gives what a plain `VecDeque` gives.
        #[test]
        fn the_queue_is_a_vecdeque(ops in proptest::collection::vec(any::<Option<u16>>(), 0..200)) {
            let mut ours = InlineQueue::new();
            let mut model = VecDeque::new();
            for op in ops {
                match op {
                    Some(v) => {
                        ours.push_back(v);
                        model.push_back(v);
                    }
                    None => prop_assert_eq!(ours.pop_front(), model.pop_front()),
                }
            }
            while let Some(v) = model.pop_front() {
                prop_assert_eq!(ours.pop_front(), Some(v));
            }
            prop_assert_eq!(ours.pop_front(), None);
        }

        /// The list reads back every item in order, however many.
        #[test]
        fn the_list_is_a_vec(items in proptest::collection::vec(any::<usize>(), 0..40)) {
            let mut ours = InlineList::new();
            for (i, &v) in items.iter().enumerate() {
                ours.push(v);
                prop_assert_eq!(ours.as_slice(), &items[..=i]);
            }
            prop_assert_eq!(ours.as_slice(), &items[..]);
        }
    }
}
