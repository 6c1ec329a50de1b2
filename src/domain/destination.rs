//! Where a withdrawal is paid to. Today only `bank_account`; the enum leaves room for more.

use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Destination {
    BankAccount { account_number: String, bank_code: String },
}

/// Debug output masks the account number, so a stray `?destination` in a log cannot leak it.
impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::BankAccount { account_number, bank_code } => f
                .debug_struct("BankAccount")
                .field("account_number", &mask_account_number(account_number))
                .field("bank_code", bank_code)
                .finish(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    #[error("destination type must be \"bank_account\"")]
    UnknownType,
    #[error("account_number must be 6 to 34 letters or digits")]
    AccountNumber,
    #[error("bank_code must be 3 to 11 letters or digits")]
    BankCode,
}

impl DestinationError {
    /// The request field the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            DestinationError::UnknownType => "destination.type",
            DestinationError::AccountNumber => "destination.account_number",
            DestinationError::BankCode => "destination.bank_code",
        }
    }
}

fn alnum_between(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl Destination {
    /// Validates a destination given as its parts. Account numbers cover domestic numbers and
    /// IBANs (up to 34); bank codes cover routing numbers, sort codes and BICs (up to 11).
    pub fn parse(kind: &str, account_number: &str, bank_code: &str) -> Result<Self, DestinationError> {
        if kind != "bank_account" {
            return Err(DestinationError::UnknownType);
        }
        let account_number = account_number.trim().to_ascii_uppercase();
        let bank_code = bank_code.trim().to_ascii_uppercase();
        if !alnum_between(&account_number, 6, 34) {
            return Err(DestinationError::AccountNumber);
        }
        if !alnum_between(&bank_code, 3, 11) {
            return Err(DestinationError::BankCode);
        }
        Ok(Destination::BankAccount { account_number, bank_code })
    }

    /// The same destination with the account number masked to its last four characters, as
    /// customers and operators see it.
    pub fn masked(&self) -> Destination {
        match self {
            Destination::BankAccount { account_number, bank_code } => Destination::BankAccount {
                account_number: mask_account_number(account_number),
                bank_code: bank_code.clone(),
            },
        }
    }
}

/// Keeps the last four characters: `"12345678"` → `"****5678"`.
pub fn mask_account_number(number: &str) -> String {
    let chars: Vec<char> = number.chars().collect();
    let keep = chars.len().min(4);
    let hidden = chars.len() - keep;
    "*".repeat(hidden) + &chars[hidden..].iter().collect::<String>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_normalises_bank_accounts() {
        let d = Destination::parse("bank_account", " gb29nwbk60161331926819 ", "nwbkgb2l").unwrap();
        assert_eq!(
            d,
            Destination::BankAccount { account_number: "GB29NWBK60161331926819".into(), bank_code: "NWBKGB2L".into() }
        );
    }

    #[test]
    fn rejects_bad_types_accounts_and_bank_codes() {
        assert_eq!(Destination::parse("card", "12345678", "021000021"), Err(DestinationError::UnknownType));
        assert_eq!(Destination::parse("bank_account", "123", "021000021"), Err(DestinationError::AccountNumber));
        assert_eq!(Destination::parse("bank_account", "1234-5678", "021000021"), Err(DestinationError::AccountNumber));
        assert_eq!(
            Destination::parse("bank_account", &"1".repeat(35), "021000021"),
            Err(DestinationError::AccountNumber)
        );
        assert_eq!(Destination::parse("bank_account", "12345678", "02"), Err(DestinationError::BankCode));
        assert_eq!(Destination::parse("bank_account", "12345678", "0210 00021"), Err(DestinationError::BankCode));
    }

    #[test]
    fn masks_all_but_the_last_four() {
        let d = Destination::parse("bank_account", "12345678", "021000021").unwrap();
        let Destination::BankAccount { account_number, .. } = d.masked();
        assert_eq!(account_number, "****5678");
        assert_eq!(mask_account_number("123"), "123");
    }
}
