//! Multicast groups (MCAST_ATTACH / MCAST_DETACH): which UD QPs receive the packets sent to
//! a multicast GID. Bounded in both directions (`MAX_MCAST_GRP` groups of at most
//! `MAX_MCAST_QP_ATTACH` QPs), so a guest cannot grow the device's memory past them.

use thiserror::Error;

use crate::interface::{MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH};

/// Why an attach or detach was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum McastError {
    #[error("every multicast group slot is in use")]
    TableFull,
    #[error("the group has its largest number of QPs")]
    GroupFull,
    #[error("the QP is already attached to the group")]
    AlreadyAttached,
    #[error("the QP is not attached to the group")]
    NotAttached,
}

#[derive(Debug, Clone)]
struct Group {
    gid: [u8; 16],
    /// In attach order: packets are delivered to the members in this order.
    qps: Vec<u32>,
}

/// The groups of one NIC.
#[derive(Debug, Default, Clone)]
pub struct McastTable {
    groups: Vec<Group>,
}

impl McastTable {
    /// Attaches `qp` to the group of `gid`, creating the group.
    pub fn attach(&mut self, gid: &[u8; 16], qp: u32) -> Result<(), McastError> {
        let full = self.groups.len() >= MAX_MCAST_GRP as usize;
        match self.groups.iter_mut().find(|g| g.gid == *gid) {
            Some(g) if g.qps.contains(&qp) => Err(McastError::AlreadyAttached),
            Some(g) if g.qps.len() >= MAX_MCAST_QP_ATTACH as usize => Err(McastError::GroupFull),
            Some(g) => {
                g.qps.push(qp);
                Ok(())
            }
            None if full => Err(McastError::TableFull),
            None => {
                self.groups.push(Group {
                    gid: *gid,
                    qps: vec![qp],
                });
                Ok(())
            }
        }
    }

    /// Detaches `qp` from the group of `gid`; the group ends with its last QP.
    pub fn detach(&mut self, gid: &[u8; 16], qp: u32) -> Result<(), McastError> {
        let gi = self
            .groups
            .iter()
            .position(|g| g.gid == *gid)
            .ok_or(McastError::NotAttached)?;
        let g = &mut self.groups[gi];
        let qi = g
            .qps
            .iter()
            .position(|&q| q == qp)
            .ok_or(McastError::NotAttached)?;
        g.qps.remove(qi);
        if g.qps.is_empty() {
            self.groups.remove(gi);
        }
        Ok(())
    }

    /// Detaches a destroyed QP from every group (a guest need not detach before destroying).
    pub fn forget_qp(&mut self, qp: u32) {
        for g in &mut self.groups {
            g.qps.retain(|&q| q != qp);
        }
        self.groups.retain(|g| !g.qps.is_empty());
    }

    /// The QPs attached to `gid`'s group (none if there is no group).
    pub fn members(&self, gid: &[u8; 16]) -> &[u32] {
        self.groups
            .iter()
            .find(|g| g.gid == *gid)
            .map_or(&[], |g| g.qps.as_slice())
    }

    /// Whether `gid` has a group here (the NIC's multicast filter).
    pub fn has_group(&self, gid: &[u8; 16]) -> bool {
        self.groups.iter().any(|g| g.gid == *gid)
    }

    /// Number of groups.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(n: u16) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[0] = 0xff;
        g[1] = 0x0e;
        g[14..].copy_from_slice(&n.to_be_bytes());
        g
    }

    #[test]
    fn members_in_attach_order_and_the_last_detach_ends_the_group() {
        let mut t = McastTable::default();
        t.attach(&gid(1), 5).unwrap();
        t.attach(&gid(1), 3).unwrap();
        t.attach(&gid(2), 5).unwrap();
        assert_eq!(t.members(&gid(1)), &[5, 3]);
        assert_eq!(t.attach(&gid(1), 3), Err(McastError::AlreadyAttached));
        t.detach(&gid(1), 5).unwrap();
        assert_eq!(t.members(&gid(1)), &[3]);
        assert_eq!(t.detach(&gid(1), 5), Err(McastError::NotAttached));
        t.detach(&gid(1), 3).unwrap();
        assert!(!t.has_group(&gid(1)));
        assert_eq!(t.members(&gid(1)), &[] as &[u32]);
        assert_eq!(t.detach(&gid(9), 5), Err(McastError::NotAttached));
        assert_eq!(t.groups(), 1);
    }

    #[test]
    fn both_limits_hold_and_free_slots_are_reused() {
        let mut t = McastTable::default();
        for q in 0..MAX_MCAST_QP_ATTACH {
            t.attach(&gid(0), q).unwrap();
        }
        assert_eq!(t.attach(&gid(0), 999), Err(McastError::GroupFull));
        for n in 1..MAX_MCAST_GRP as u16 {
            t.attach(&gid(n), 1).unwrap();
        }
        assert_eq!(t.attach(&gid(u16::MAX), 1), Err(McastError::TableFull));
        t.detach(&gid(7), 1).unwrap();
        t.attach(&gid(u16::MAX), 1).unwrap();
        assert_eq!(t.groups(), MAX_MCAST_GRP as usize);
    }

    #[test]
    fn a_destroyed_qp_leaves_every_group() {
        let mut t = McastTable::default();
        t.attach(&gid(1), 4).unwrap();
        t.attach(&gid(2), 4).unwrap();
        t.attach(&gid(2), 6).unwrap();
        t.forget_qp(4);
        assert!(!t.has_group(&gid(1)));
        assert_eq!(t.members(&gid(2)), &[6]);
    }
}
