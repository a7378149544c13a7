// SPDX-License-Identifier: GPL-2.0

//! Event tags (manual, "Event tags"): which object an event queue entry is really for.
//!
//! The device may write an event for a CQ or QP just before DESTROY_* and the interrupt that
//! brings it may come after the id was given to a new object (CEQ moderation holds interrupts
//! back for up to 8 ms; a TCG guest under load, longer). Matched by id alone, the old CQ's
//! completion event reaches the new CQ before anyone armed it, and libibverbs, which counts
//! events per CQ, then waits forever in that CQ's destroy. CREATE_CQ and CREATE_QP therefore
//! give each object a tag that the device echoes in its events, and an event is delivered
//! only to the object published with the same tag.

use kernel::{
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
};

/// The tag of one CQ or QP, as given to the device at create time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EventTag(u32);

impl EventTag {
    /// The tag of an event queue entry as the device wrote it.
    pub(crate) const fn from_eqe(tag: u32) -> Self {
        Self(tag)
    }

    /// The value for CREATE_CQ and CREATE_QP.
    pub(crate) const fn raw(self) -> u32 {
        self.0
    }
}

/// Hands out event tags: nonzero and different for every object of the function, or all 0
/// for a device whose interface predates tags (below 1.3): it writes 0 in every event, so ids
/// alone decide, as they did.
pub(crate) struct EventTags {
    enabled: bool,
    last: Atomic<u32>,
}

impl EventTags {
    /// Tags for a device that echoes them (`enabled`), or zeroes for one that does not.
    pub(crate) const fn new(enabled: bool) -> Self {
        Self {
            enabled,
            last: Atomic::new(0),
        }
    }

    /// The tag for a new object. After 2^32 - 1 creates tags repeat; an entry would have to
    /// wait in an event queue for all of them to be mistaken.
    pub(crate) fn next(&self) -> EventTag {
        if !self.enabled {
            return EventTag(0);
        }
        loop {
            let t = self.last.fetch_add(1, Relaxed).wrapping_add(1);
            if t != 0 {
                return EventTag(t);
            }
        }
    }
}

/// An event delivery handle published for the interrupt handlers, with its object's tag.
pub(crate) struct Published<H> {
    tag: EventTag,
    handle: H,
}

impl<H: Clone> Published<H> {
    /// Publishes `handle` of the object created with `tag`.
    pub(crate) const fn new(tag: EventTag, handle: H) -> Self {
        Self { tag, handle }
    }

    /// The handle, if an event with `tag` belongs to this object and not to an earlier one
    /// with the same id.
    pub(crate) fn for_event(&self, tag: EventTag) -> Option<H> {
        (self.tag == tag).then(|| self.handle.clone())
    }
}

#[kunit_tests(ferrdma_event_tag)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_nonzero_and_distinct() {
        let tags = EventTags::new(true);
        let a = tags.next();
        let b = tags.next();
        assert_ne!(a.raw(), 0);
        assert_ne!(a, b);
    }

    #[test]
    fn the_wrap_skips_zero() {
        let tags = EventTags::new(true);
        tags.last.store(u32::MAX - 1, Relaxed);
        assert_eq!(tags.next().raw(), u32::MAX);
        assert_eq!(tags.next().raw(), 1);
    }

    #[test]
    fn a_device_without_tags_gets_zeroes() {
        let tags = EventTags::new(false);
        assert_eq!(tags.next().raw(), 0);
        assert_eq!(tags.next().raw(), 0);
        // ... and its events, tagged 0, still find their objects.
        let p = Published::new(tags.next(), 7u32);
        assert_eq!(p.for_event(EventTag::from_eqe(0)), Some(7));
    }

    #[test]
    fn an_event_of_an_earlier_object_with_the_same_id_reaches_nobody() {
        let tags = EventTags::new(true);
        let old = tags.next();
        let new = tags.next();
        let p = Published::new(new, 7u32);
        assert_eq!(p.for_event(old), None);
        assert_eq!(p.for_event(EventTag::from_eqe(0)), None);
        assert_eq!(p.for_event(new), Some(7));
    }
}
