//! The per-worker parcel context. Which interfaces take parcels is in the IP tables
//! (`ip::Tables::parcel_links`), where `ipN-input` reads it too.

use ip::{HasIp, IpContext};

/// The most segments `parcelN-join` puts in one parcel.
pub const DEFAULT_JOIN_SEGMENTS: usize = 32;

pub struct ParcelContext {
    /// At most this many datagrams joined into one parcel (1..=255, NSegs is 8 bits).
    pub join_segments: usize,
    /// `parcelN-input` checks each segment against its slot (see the crate's docs).
    pub verify_segments: bool,
}

impl Default for ParcelContext {
    fn default() -> Self {
        ParcelContext { join_segments: DEFAULT_JOIN_SEGMENTS, verify_segments: true }
    }
}

/// A worker context with the IP and the parcel parts.
pub trait HasParcel: HasIp {
    fn split_parcel(&mut self) -> (&mut IpContext, &mut ParcelContext);
}
