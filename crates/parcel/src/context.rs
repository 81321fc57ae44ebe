//! The per-worker parcel context: which interfaces take parcels. Interfaces are fixed at
//! start-up, so the table is built once and shared, never republished.

use engine::IfIndex;
use ip::{HasIp, IpContext};
use std::sync::Arc;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParcelTables {
    /// By interface index: configured `parcels = true`.
    capable: Vec<bool>,
}

impl ParcelTables {
    /// `capable[i]`: interface `i` was configured to take parcels.
    pub fn new(capable: Vec<bool>) -> Self {
        ParcelTables { capable }
    }
    #[inline(always)]
    pub fn capable(&self, i: IfIndex) -> bool {
        self.capable.get(i.get()).copied().unwrap_or(false)
    }
}

pub struct ParcelContext {
    pub tables: Arc<ParcelTables>,
}

impl ParcelContext {
    pub fn new(tables: Arc<ParcelTables>) -> Self {
        ParcelContext { tables }
    }
}

/// A worker context with the IP and the parcel parts.
pub trait HasParcel: HasIp {
    fn split_parcel(&mut self) -> (&mut IpContext, &mut ParcelContext);
}
