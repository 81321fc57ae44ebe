//! The IE walk (TS 29.244 §8.1.1): `type (2) | length (2) | [enterprise id (2)] | value`.
//! Types with the top bit set are vendor-specific and carry an enterprise id counted in
//! the length. Messages and grouped IEs are both sequences of these.

use crate::Error;

const VENDOR_BIT: u16 = 0x8000;

/// One IE as found: its type and its value (after any enterprise id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawIe<'a> {
    pub ty: u16,
    pub enterprise: Option<u16>,
    pub value: &'a [u8],
}

/// Walks the IEs of a message body or a grouped IE's value. Stops at the first IE that
/// runs past the end (an `InvalidLength` naming its type, or `Truncated` when not even its
/// type fits).
pub struct Tlvs<'a> {
    rest: &'a [u8],
}

impl<'a> Tlvs<'a> {
    pub fn new(data: &'a [u8]) -> Tlvs<'a> {
        Tlvs { rest: data }
    }
}

impl<'a> Iterator for Tlvs<'a> {
    type Item = Result<RawIe<'a>, Error>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let d = self.rest;
        if d.len() < 4 {
            self.rest = &[];
            return Some(Err(if d.len() < 2 { Error::Truncated } else { Error::InvalidLength(u16::from_be_bytes([d[0], d[1]])) }));
        }
        let ty = u16::from_be_bytes([d[0], d[1]]);
        let len = usize::from(u16::from_be_bytes([d[2], d[3]]));
        if d.len() < 4 + len || (ty & VENDOR_BIT != 0 && len < 2) {
            self.rest = &[];
            return Some(Err(Error::InvalidLength(ty)));
        }
        let (value, enterprise) =
            if ty & VENDOR_BIT != 0 { (&d[6..4 + len], Some(u16::from_be_bytes([d[4], d[5]]))) } else { (&d[4..4 + len], None) };
        self.rest = &d[4 + len..];
        Some(Ok(RawIe { ty, enterprise, value }))
    }
}

/// A typed IE: its type number, how its value parses, how it is written.
pub trait Ie: Sized {
    const TYPE: u16;
    /// Parses the value (the octets after type and length).
    fn parse(value: &[u8]) -> Result<Self, Error>;
    /// Appends the value.
    fn emit_value(&self, out: &mut Vec<u8>);

    /// Appends type, length and value.
    fn emit(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&Self::TYPE.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        self.emit_value(out);
        let len = u16::try_from(out.len() - start - 4).unwrap_or(u16::MAX);
        out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
    }

    /// The whole IE as bytes (tests, fuzzing).
    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.emit(&mut v);
        v
    }
}

/// Keeps the first of an IE that may appear once; a repeat is ignored (TS 29.244
/// §7.6: an IE received more often than expected is discarded except the first).
pub fn once<T: Ie>(slot: &mut Option<T>, raw: RawIe) -> Result<(), Error> {
    if slot.is_none() {
        *slot = Some(T::parse(raw.value)?);
    }
    Ok(())
}

/// Adds one of an IE that may repeat.
pub fn push<T: Ie>(list: &mut Vec<T>, raw: RawIe) -> Result<(), Error> {
    list.push(T::parse(raw.value)?);
    Ok(())
}

/// A mandatory IE, or the error that says which is missing.
pub fn need<T: Ie>(slot: Option<T>) -> Result<T, Error> {
    slot.ok_or(Error::MandatoryMissing(T::TYPE))
}

pub fn emit_opt<T: Ie>(slot: &Option<T>, out: &mut Vec<u8>) {
    if let Some(v) = slot {
        v.emit(out);
    }
}

pub fn emit_all<T: Ie>(list: &[T], out: &mut Vec<u8>) {
    for v in list {
        v.emit(out);
    }
}

/// Checks a fixed-length value: `Ok(value)` when at least `n` octets (later octets are
/// extensions added by newer releases and are ignored, §8.1.1).
pub fn at_least<const N: usize>(ty: u16, value: &[u8]) -> Result<[u8; N], Error> {
    value.get(..N).map(|v| v.try_into().expect("N octets")).ok_or(Error::InvalidLength(ty))
}

/// A cursor over an IE value for the variable-layout IEs (flags then optional fields).
pub struct Reader<'a> {
    ty: u16,
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(ty: u16, value: &'a [u8]) -> Reader<'a> {
        Reader { ty, rest: value }
    }
    pub fn bytes<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let v = at_least::<N>(self.ty, self.rest)?;
        self.rest = &self.rest[N..];
        Ok(v)
    }
    pub fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.bytes::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16, Error> {
        Ok(u16::from_be_bytes(self.bytes()?))
    }
    pub fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_be_bytes(self.bytes()?))
    }
    pub fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_be_bytes(self.bytes()?))
    }
    pub fn slice(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.rest.len() < n {
            return Err(Error::InvalidLength(self.ty));
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }
    pub fn ipv4(&mut self) -> Result<core::net::Ipv4Addr, Error> {
        Ok(self.bytes::<4>()?.into())
    }
    pub fn ipv6(&mut self) -> Result<core::net::Ipv6Addr, Error> {
        Ok(self.bytes::<16>()?.into())
    }
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_skips_vendor_ies_and_stops_at_overrun() {
        let data = [0, 19, 0, 1, 1, 0x80, 5, 0, 3, 0x12, 0x34, 9, 0, 60, 0, 9, 0];
        let ies: Vec<_> = Tlvs::new(&data).collect();
        assert_eq!(ies[0], Ok(RawIe { ty: 19, enterprise: None, value: &[1] }));
        assert_eq!(ies[1], Ok(RawIe { ty: 0x8005, enterprise: Some(0x1234), value: &[9] }));
        assert_eq!(ies[2], Err(Error::InvalidLength(60)));
        assert_eq!(ies.len(), 3);
        assert_eq!(Tlvs::new(&[0, 19, 0]).next(), Some(Err(Error::InvalidLength(19))));
        assert_eq!(Tlvs::new(&[0]).next(), Some(Err(Error::Truncated)));
        // A vendor IE too short for its enterprise id.
        assert_eq!(Tlvs::new(&[0x80, 1, 0, 1, 0]).next(), Some(Err(Error::InvalidLength(0x8001))));
    }
}
