//! Why a message was rejected, and what to answer: each [`Error`] maps to one Cause value
//! (TS 29.244 §8.2.1) and, where the spec asks for it, the Offending IE.

/// Cause values (TS 29.244 Table 8.2.1-1) vecgate sends or reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    RequestAccepted,
    MoreUsageReportToSend,
    RequestRejected,
    SessionContextNotFound,
    MandatoryIeMissing,
    ConditionalIeMissing,
    InvalidLength,
    MandatoryIeIncorrect,
    InvalidForwardingPolicy,
    InvalidFTeidAllocationOption,
    NoEstablishedAssociation,
    RuleCreationModificationFailure,
    EntityInCongestion,
    NoResourcesAvailable,
    ServiceNotSupported,
    SystemFailure,
    RedirectionRequested,
    AllDynamicAddressesOccupied,
    Unknown(u8),
}

impl From<u8> for Cause {
    fn from(v: u8) -> Cause {
        match v {
            1 => Cause::RequestAccepted,
            2 => Cause::MoreUsageReportToSend,
            64 => Cause::RequestRejected,
            65 => Cause::SessionContextNotFound,
            66 => Cause::MandatoryIeMissing,
            67 => Cause::ConditionalIeMissing,
            68 => Cause::InvalidLength,
            69 => Cause::MandatoryIeIncorrect,
            70 => Cause::InvalidForwardingPolicy,
            71 => Cause::InvalidFTeidAllocationOption,
            72 => Cause::NoEstablishedAssociation,
            73 => Cause::RuleCreationModificationFailure,
            74 => Cause::EntityInCongestion,
            75 => Cause::NoResourcesAvailable,
            76 => Cause::ServiceNotSupported,
            77 => Cause::SystemFailure,
            78 => Cause::RedirectionRequested,
            79 => Cause::AllDynamicAddressesOccupied,
            o => Cause::Unknown(o),
        }
    }
}

impl From<Cause> for u8 {
    fn from(c: Cause) -> u8 {
        match c {
            Cause::RequestAccepted => 1,
            Cause::MoreUsageReportToSend => 2,
            Cause::RequestRejected => 64,
            Cause::SessionContextNotFound => 65,
            Cause::MandatoryIeMissing => 66,
            Cause::ConditionalIeMissing => 67,
            Cause::InvalidLength => 68,
            Cause::MandatoryIeIncorrect => 69,
            Cause::InvalidForwardingPolicy => 70,
            Cause::InvalidFTeidAllocationOption => 71,
            Cause::NoEstablishedAssociation => 72,
            Cause::RuleCreationModificationFailure => 73,
            Cause::EntityInCongestion => 74,
            Cause::NoResourcesAvailable => 75,
            Cause::ServiceNotSupported => 76,
            Cause::SystemFailure => 77,
            Cause::RedirectionRequested => 78,
            Cause::AllDynamicAddressesOccupied => 79,
            Cause::Unknown(o) => o,
        }
    }
}

impl Cause {
    pub fn is_accepted(self) -> bool {
        matches!(self, Cause::RequestAccepted | Cause::MoreUsageReportToSend)
    }
}

/// A message that cannot be used. Small and `Copy`; the IE type it names is the one to
/// put in the Offending IE of the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("shorter than the PFCP header or than its length field says")]
    Truncated,
    #[error("PFCP version {0} (only 1 is spoken)")]
    Version(u8),
    #[error("IE type {0} runs past its message or group, or its value has a length its type does not allow")]
    InvalidLength(u16),
    #[error("mandatory IE type {0} is missing")]
    MandatoryMissing(u16),
    #[error("conditional IE type {0} is missing")]
    ConditionalMissing(u16),
    #[error("IE type {0} carries a value that is not allowed")]
    Incorrect(u16),
}

impl Error {
    /// The Cause a response to the rejected request carries.
    pub fn cause(self) -> Cause {
        match self {
            Error::Truncated | Error::InvalidLength(_) => Cause::InvalidLength,
            Error::Version(_) => Cause::ServiceNotSupported,
            Error::MandatoryMissing(_) => Cause::MandatoryIeMissing,
            Error::ConditionalMissing(_) => Cause::ConditionalIeMissing,
            Error::Incorrect(_) => Cause::MandatoryIeIncorrect,
        }
    }

    /// The IE type the response names as offending, where the Cause calls for one.
    pub fn offending_ie(self) -> Option<u16> {
        match self {
            Error::Truncated | Error::Version(_) => None,
            Error::InvalidLength(t) | Error::MandatoryMissing(t) | Error::ConditionalMissing(t) | Error::Incorrect(t) => Some(t),
        }
    }
}
