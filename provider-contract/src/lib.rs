//! The payout provider's contract (SPEC §4) as both sides of it read it: the service
//! (`withdrawals::provider`) and the stateful mock (`provider-mocks`). A value written once here
//! cannot drift between the client and the mock it is tested against. [`webhook`]: the signed
//! events the provider pushes (SPEC §15), signed by the mock and verified by the service.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub mod webhook;

/// A transfer's status at the provider: its name on the wire, in stored evidence and in
/// settlement reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferStatus {
    Pending,
    Paid,
    Failed,
    /// Paid, then sent back by the bank: the money did go out (SPEC §4, §14.3).
    Returned,
}

impl TransferStatus {
    pub const ALL: [TransferStatus; 4] =
        [TransferStatus::Pending, TransferStatus::Paid, TransferStatus::Failed, TransferStatus::Returned];

    pub const fn as_str(self) -> &'static str {
        match self {
            TransferStatus::Pending => "pending",
            TransferStatus::Paid => "paid",
            TransferStatus::Failed => "failed",
            TransferStatus::Returned => "returned",
        }
    }
}

impl fmt::Display for TransferStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A status the contract does not name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStatus(pub String);

impl fmt::Display for UnknownStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown transfer status `{}`", self.0)
    }
}

impl std::error::Error for UnknownStatus {}

impl FromStr for TransferStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TransferStatus::ALL.into_iter().find(|v| v.as_str() == s).ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_reads_and_writes_its_wire_name() {
        for status in TransferStatus::ALL {
            let wire = serde_json::to_value(status).unwrap();
            assert_eq!(wire, serde_json::Value::String(status.as_str().to_owned()));
            assert_eq!(serde_json::from_value::<TransferStatus>(wire).unwrap(), status);
            assert_eq!(status.as_str().parse::<TransferStatus>(), Ok(status));
            assert_eq!(status.to_string(), status.as_str());
        }
        assert_eq!("settled".parse::<TransferStatus>(), Err(UnknownStatus("settled".into())));
    }
}
