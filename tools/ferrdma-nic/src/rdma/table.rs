//! Object tables indexed by id (QPs, CQs): a slot per id the interface allows, and the set
//! of ids in use, so that the per-doorbell and per-tick scans cost what the guest created,
//! not what it could create (16,384 QPs, most of them usually absent).

use std::collections::BTreeSet;

/// A table of `n` slots; objects are boxed so an empty slot costs a pointer.
///
/// # Invariants
///
/// `live` holds exactly the ids whose slot is `Some`.
#[derive(Debug)]
pub struct Table<T> {
    slots: Vec<Option<Box<T>>>,
    live: BTreeSet<u32>,
}

impl<T> Table<T> {
    /// `n` empty slots.
    pub fn new(n: u32) -> Self {
        Self {
            slots: (0..n).map(|_| None).collect(),
            live: BTreeSet::new(),
        }
    }

    /// The slot of `id`: `None` beyond the table, `Some(None)` if empty.
    pub fn slot(&self, id: u32) -> Option<Option<&T>> {
        self.slots.get(id as usize).map(Option::as_deref)
    }

    /// The object at `id`.
    pub fn get(&self, id: u32) -> Option<&T> {
        self.slots.get(id as usize)?.as_deref()
    }

    /// The object at `id`, mutable.
    pub fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        self.slots.get_mut(id as usize)?.as_deref_mut()
    }

    /// Puts `v` at `id`, replacing what was there; ignored beyond the table (callers check
    /// the id against the table first).
    pub fn insert(&mut self, id: u32, v: T) {
        if let Some(s) = self.slots.get_mut(id as usize) {
            *s = Some(Box::new(v));
            self.live.insert(id);
        }
    }

    /// Takes the object at `id` out.
    pub fn remove(&mut self, id: u32) -> Option<T> {
        let v = self.slots.get_mut(id as usize)?.take()?;
        self.live.remove(&id);
        Some(*v)
    }

    /// The objects, by id.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.live
            .iter()
            .filter_map(|&id| self.get(id).map(|v| (id, v)))
    }

    /// The first id in use at or after `from`: lets a caller walk the table while it
    /// changes objects (`&mut self` calls between steps) without collecting the ids.
    pub fn next_id(&self, from: u32) -> Option<u32> {
        self.live.range(from..).next().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_track_what_is_live() {
        let mut t = Table::new(8);
        assert_eq!((t.slot(3), t.slot(8)), (Some(None), None));
        t.insert(3, "c");
        t.insert(5, "e");
        t.insert(8, "beyond");
        assert_eq!((t.slot(3), t.get(5)), (Some(Some(&"c")), Some(&"e")));
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![(3, &"c"), (5, &"e")]);
        assert_eq!(
            (t.next_id(0), t.next_id(4), t.next_id(6)),
            (Some(3), Some(5), None)
        );
        assert_eq!(t.remove(3), Some("c"));
        assert_eq!((t.remove(3), t.remove(99)), (None, None));
        *t.get_mut(5).unwrap() = "E";
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![(5, &"E")]);
        t.insert(5, "again");
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![(5, &"again")]);
    }
}
