//! IEEE 802.1Q VLAN tags: the 4 bytes after the source MAC when the outer EtherType is
//! 0x8100 (or 0x88a8 for an 802.1ad service tag).
//!
//! ```text
//!  0       1       2       3       4
//! +---+-+-+-------+-------+-------+
//! |PCP|D|  VLAN ID (12)   | inner EtherType |
//! +---+-+-----------------+-------+
//! ```
//! The view starts at the TCI (offset 14 of the frame).

use crate::ethernet::EtherType;

pub const TAG_LEN: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VlanError {
    #[error("VLAN tag truncated")]
    Truncated,
    #[error("VLAN ID 4095 is reserved")]
    ReservedVid,
}

/// A 12-bit VLAN identifier (0 = priority tag only, 4095 reserved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VlanId(u16);

impl VlanId {
    pub const fn new(v: u16) -> Option<VlanId> {
        if v < 4095 {
            Some(VlanId(v))
        } else {
            None
        }
    }
    pub const fn get(self) -> u16 {
        self.0
    }
}

#[derive(Debug, Clone)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        VlanTag { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Self, VlanError> {
        if buffer.as_ref().len() < TAG_LEN {
            return Err(VlanError::Truncated);
        }
        Ok(VlanTag { buffer })
    }
    fn tci(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), 0)
    }
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }
    /// The raw 12-bit VID (4095 is reserved; callers decide what to do with it).
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }
    pub fn ethertype(&self) -> EtherType {
        crate::be16(self.buffer.as_ref(), 2).into()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    pub fn set_tci(&mut self, pcp: u8, dei: bool, vid: u16) {
        let tci = ((pcp as u16 & 7) << 13) | ((dei as u16) << 12) | (vid & 0x0fff);
        crate::put16(self.buffer.as_mut(), 0, tci)
    }
    pub fn set_ethertype(&mut self, t: EtherType) {
        crate::put16(self.buffer.as_mut(), 2, t.into())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanRepr {
    pub pcp: u8,
    pub dei: bool,
    pub vid: VlanId,
    pub ethertype: EtherType,
}

impl VlanRepr {
    pub fn parse<T: AsRef<[u8]>>(t: &VlanTag<T>) -> Result<Self, VlanError> {
        Ok(VlanRepr { pcp: t.pcp(), dei: t.dei(), vid: VlanId::new(t.vid()).ok_or(VlanError::ReservedVid)?, ethertype: t.ethertype() })
    }
    pub const fn buffer_len(&self) -> usize {
        TAG_LEN
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, t: &mut VlanTag<T>) {
        t.set_tci(self.pcp, self.dei, self.vid.get());
        t.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(pcp in 0u8..8, dei: bool, vid in 0u16..4095, et: u16) {
            let r = VlanRepr { pcp, dei, vid: VlanId::new(vid).unwrap(), ethertype: et.into() };
            let mut b = [0u8; 4];
            r.emit(&mut VlanTag::new_unchecked(&mut b[..]));
            prop_assert_eq!(VlanRepr::parse(&VlanTag::new_checked(&b[..]).unwrap()).unwrap(), r);
        }
    }

    #[test]
    fn truncated() {
        assert!(VlanTag::new_checked(&[0u8; 3][..]).is_err());
    }
}
