//! The per-worker parcel context. Which interfaces take parcels is in the IP tables
//! (`ip::Tables::parcel_links`), where `ipN-input` reads it too.

use ip::{HasIp, IpContext};

/// The most segments `parcelN-join` puts in one parcel.
pub const DEFAULT_JOIN_SEGMENTS: usize = 32;

pub struct ParcelContext {
    /// At most this many datagrams joined into one parcel (1..=255, NSegs is 8 bits).
    pub join_segments: usize,
    /// Segments are checked against their slots where a parcel is taken apart (split,
    /// or handed to the kernel as a GSO frame): see the crate's docs.
    pub verify_segments: bool,
    /// With `verify_segments`, also at every hop: `parcelN-input` checks every segment of
    /// every parcel, forwarded whole too (the strict mode; a bad segment makes the
    /// parcel split there and then).
    pub verify_in_transit: bool,
    /// Bit i: interface i exchanges virtio-net headers with the kernel (af_packet with
    /// `vnet_hdr`), so a UDP GSO frame leaves by it whole: `parcelN-input` sends a parcel
    /// toward it as one (see `nodes::gso`).
    pub gso_links: u64,
}

impl ParcelContext {
    /// Every segment of every parcel is read at every hop (the strict mode): no parcel
    /// goes on whole unread.
    #[inline(always)]
    pub fn reads_segments_in_transit(&self) -> bool {
        self.verify_segments && self.verify_in_transit
    }

    /// Interface `i` takes UDP GSO frames.
    #[inline]
    pub fn takes_gso(&self, i: engine::IfIndex) -> bool {
        self.gso_links.checked_shr(i.0 as u32).unwrap_or(0) & 1 != 0
    }
}

impl Default for ParcelContext {
    fn default() -> Self {
        ParcelContext { join_segments: DEFAULT_JOIN_SEGMENTS, verify_segments: true, verify_in_transit: false, gso_links: 0 }
    }
}

/// A worker context with the IP and the parcel parts.
pub trait HasParcel: HasIp {
    fn split_parcel(&mut self) -> (&mut IpContext, &mut ParcelContext);
}
