//! Decoding of `SET_IRQS` requests (VFIO `VFIO_DEVICE_SET_IRQS` semantics).
//!
//! `flags` must name exactly one data type (NONE, BOOL, EVENTFD) and exactly one action
//! (MASK, UNMASK, TRIGGER); anything else is refused. What the device does with a decoded
//! request lives in `device.rs`.

use std::fs::File;

use thiserror::Error;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK,
    VFIO_IRQ_SET_ACTION_UNMASK, VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK,
};

/// Why a `SET_IRQS` request was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum IrqRequestError {
    #[error("SET_IRQS flags {0:#x} are not one data type and one action")]
    Flags(u32),
    #[error("SET_IRQS with boolean data is not supported")]
    BoolData,
    #[error("{fds} fds sent with data type {data:?}")]
    UnexpectedFds { fds: usize, data: &'static str },
}

/// The action of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqAction {
    Mask,
    Unmask,
    Trigger,
}

/// The data of a request.
#[derive(Debug)]
pub enum IrqData {
    /// No data: with `Trigger` and count 0 this disables the index; with a count it fires
    /// the interrupts (loopback).
    None,
    /// Eventfds for `start..start + count`; empty means "unwire these vectors".
    Eventfds(Vec<File>),
}

/// A decoded `SET_IRQS` request.
#[derive(Debug)]
pub struct IrqRequest {
    pub index: u32,
    pub action: IrqAction,
    pub data: IrqData,
    pub start: u32,
    pub count: u32,
}

impl IrqRequest {
    /// Decodes the raw message fields.
    pub fn decode(
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<Self, IrqRequestError> {
        let known = VFIO_IRQ_SET_DATA_TYPE_MASK | VFIO_IRQ_SET_ACTION_TYPE_MASK;
        if flags & !known != 0 {
            return Err(IrqRequestError::Flags(flags));
        }
        let action = match flags & VFIO_IRQ_SET_ACTION_TYPE_MASK {
            VFIO_IRQ_SET_ACTION_MASK => IrqAction::Mask,
            VFIO_IRQ_SET_ACTION_UNMASK => IrqAction::Unmask,
            VFIO_IRQ_SET_ACTION_TRIGGER => IrqAction::Trigger,
            _ => return Err(IrqRequestError::Flags(flags)),
        };
        let data = match flags & VFIO_IRQ_SET_DATA_TYPE_MASK {
            VFIO_IRQ_SET_DATA_NONE => {
                if !fds.is_empty() {
                    return Err(IrqRequestError::UnexpectedFds {
                        fds: fds.len(),
                        data: "none",
                    });
                }
                IrqData::None
            }
            VFIO_IRQ_SET_DATA_BOOL => return Err(IrqRequestError::BoolData),
            VFIO_IRQ_SET_DATA_EVENTFD => IrqData::Eventfds(fds),
            _ => return Err(IrqRequestError::Flags(flags)),
        };
        Ok(Self {
            index,
            action,
            data,
            start,
            count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::msix::test_util::eventfd;

    #[test]
    fn decodes_valid_combinations() {
        let r = IrqRequest::decode(
            2,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            1,
            1,
            vec![eventfd()],
        )
        .unwrap();
        assert_eq!(r.action, IrqAction::Trigger);
        assert!(matches!(r.data, IrqData::Eventfds(ref v) if v.len() == 1));
        let r = IrqRequest::decode(
            2,
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
            0,
            0,
            vec![],
        )
        .unwrap();
        assert!(matches!(r.data, IrqData::None));
        let r = IrqRequest::decode(
            0,
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_MASK,
            0,
            1,
            vec![],
        )
        .unwrap();
        assert_eq!(r.action, IrqAction::Mask);
    }

    #[test]
    fn refuses_bad_flags() {
        for flags in [
            0,
            VFIO_IRQ_SET_DATA_NONE,
            VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_MASK | VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER | 0x100,
            u32::MAX,
        ] {
            assert_eq!(
                IrqRequest::decode(2, flags, 0, 0, vec![]).err(),
                Some(IrqRequestError::Flags(flags)),
                "flags {flags:#x}"
            );
        }
        assert_eq!(
            IrqRequest::decode(
                2,
                VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_ACTION_TRIGGER,
                0,
                1,
                vec![]
            )
            .err(),
            Some(IrqRequestError::BoolData)
        );
        assert!(matches!(
            IrqRequest::decode(
                2,
                VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
                0,
                1,
                vec![eventfd()]
            ),
            Err(IrqRequestError::UnexpectedFds { fds: 1, .. })
        ));
    }
}
