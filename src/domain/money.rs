//! Money: an exact decimal amount in an ISO-4217 currency (SPEC §1.2). Never `f64`.
//!
//! Storage keeps amounts as integer minor units (cents for USD, yen for JPY): exact in both
//! SQLite and PostgreSQL arithmetic, and lossless because an [`Amount`] never has more decimal
//! places than its currency's minor unit.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;

/// An ISO-4217 currency that has a minor unit (so it can be paid out). Metals and funds codes
/// without a minor unit (XAU, XDR, …) are rejected at parse time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency {
    iso: iso_currency::Currency,
    exponent: u32,
}

impl Currency {
    pub fn parse(code: &str) -> Result<Self, AmountError> {
        let iso = iso_currency::Currency::from_code(code).ok_or(AmountError::UnknownCurrency)?;
        let exponent = iso.exponent().ok_or(AmountError::UnknownCurrency)?;
        Ok(Self { iso, exponent: u32::from(exponent) })
    }

    pub fn code(&self) -> &'static str {
        self.iso.code()
    }

    /// Decimal places of the minor unit (USD 2, JPY 0, KWD 3).
    pub fn minor_units(&self) -> u32 {
        self.exponent
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl FromStr for Currency {
    type Err = AmountError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    #[error("amount must be a decimal string such as \"125.50\"")]
    NotADecimal,
    #[error("amount must be greater than zero")]
    NotPositive,
    #[error("amount has more decimal places than the currency allows ({0})")]
    TooPrecise(u32),
    #[error("amount exceeds the maximum of {0} for this currency")]
    OverLimit(Decimal),
    #[error("currency is not a supported ISO-4217 code")]
    UnknownCurrency,
}

impl AmountError {
    /// The stable error code clients see.
    pub fn code(&self) -> &'static str {
        match self {
            AmountError::NotADecimal => "invalid_amount",
            AmountError::NotPositive => "amount_not_positive",
            AmountError::TooPrecise(_) => "amount_too_precise",
            AmountError::OverLimit(_) => "amount_over_limit",
            AmountError::UnknownCurrency => "unsupported_currency",
        }
    }
}

/// Per-currency maximum for one withdrawal, with a default for currencies not listed.
#[derive(Debug, Clone)]
pub struct AmountLimits {
    pub default_max: Decimal,
    pub per_currency: HashMap<&'static str, Decimal>,
}

impl Default for AmountLimits {
    fn default() -> Self {
        Self { default_max: Decimal::from(1_000_000), per_currency: HashMap::new() }
    }
}

impl AmountLimits {
    pub fn max_for(&self, currency: Currency) -> Decimal {
        self.per_currency.get(currency.code()).copied().unwrap_or(self.default_max)
    }

    /// Parses `USD=50000,JPY=5000000` (the `WITHDRAWAL_LIMITS` setting).
    pub fn parse(spec: &str, default_max: Decimal) -> Result<Self, String> {
        let mut per_currency = HashMap::new();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (code, max) = item.split_once('=').ok_or_else(|| format!("limit `{item}` is not CODE=AMOUNT"))?;
            let currency = Currency::parse(code.trim()).map_err(|e| format!("{code}: {e}"))?;
            let max = Decimal::from_str(max.trim()).map_err(|e| format!("{item}: {e}"))?;
            if max <= Decimal::ZERO {
                return Err(format!("limit `{item}` must be positive"));
            }
            per_currency.insert(currency.code(), max);
        }
        Ok(Self { default_max, per_currency })
    }
}

/// A positive amount of money whose scale fits its currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amount {
    value: Decimal,
    currency: Currency,
}

impl Amount {
    /// Parses a customer-supplied withdrawal amount: positive, no more decimals than the
    /// currency's minor unit, and at most the currency's configured maximum.
    ///
    /// The grammar is `"-"? DIGIT+ ("." DIGIT+)?`: ASCII digits with an optional fraction. No
    /// `+`, no surrounding whitespace, no bare point (`"5."`, `".5"`), no exponent, no grouping
    /// separators. A leading `-` is read only so a negative amount is reported as not positive.
    pub fn parse(value: &str, currency: Currency, limits: &AmountLimits) -> Result<Self, AmountError> {
        if !is_plain_decimal(value) {
            return Err(AmountError::NotADecimal);
        }
        let value = Decimal::from_str_exact(value).map_err(|_| AmountError::NotADecimal)?;
        let amount = Self::new(value, currency)?;
        let max = limits.max_for(currency);
        if amount.value > max {
            return Err(AmountError::OverLimit(max));
        }
        Ok(amount)
    }

    /// An amount a provider reported (a settlement line): the same grammar, positivity and scale
    /// as [`Amount::parse`], but no customer limit — the provider's record is what it is.
    pub fn parse_reported(value: &str, currency: Currency) -> Result<Self, AmountError> {
        if !is_plain_decimal(value) {
            return Err(AmountError::NotADecimal);
        }
        Self::new(Decimal::from_str_exact(value).map_err(|_| AmountError::NotADecimal)?, currency)
    }

    /// An amount with the positivity and scale rules, without a limit (funding, internal use).
    pub fn new(value: Decimal, currency: Currency) -> Result<Self, AmountError> {
        if value <= Decimal::ZERO {
            return Err(AmountError::NotPositive);
        }
        let exponent = currency.minor_units();
        if value.scale() > exponent {
            return Err(AmountError::TooPrecise(exponent));
        }
        let mut value = value;
        value.rescale(exponent);
        // Storage keeps integer minor units in 64 bits: an amount past that is over every limit
        // (refused here, so [`Amount::to_minor`] can never fail).
        if i64::try_from(value.mantissa()).is_err() {
            return Err(AmountError::OverLimit(Decimal::new(i64::MAX, exponent)));
        }
        Ok(Self { value, currency })
    }

    /// Rebuilds an amount from storage's integer minor units.
    pub fn from_minor(minor: i64, currency: Currency) -> Result<Self, AmountError> {
        Self::new(Decimal::new(minor, currency.minor_units()), currency)
    }

    /// The amount in integer minor units (exact: the scale never exceeds the minor unit).
    pub fn to_minor(&self) -> i64 {
        let mut v = self.value;
        v.rescale(self.currency.minor_units());
        i64::try_from(v.mantissa()).expect("Amount::new keeps minor units within i64")
    }

    pub fn value(&self) -> Decimal {
        self.value
    }

    pub fn currency(&self) -> Currency {
        self.currency
    }
}

/// `"-"? DIGIT+ ("." DIGIT+)?`, the amount grammar of [`Amount::parse`].
fn is_plain_decimal(value: &str) -> bool {
    let unsigned = value.strip_prefix('-').unwrap_or(value);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(whole) && fraction.is_none_or(digits)
}

/// Formats integer minor units as a decimal string with the currency's scale ("125.50").
pub fn format_minor(minor: i64, currency: Currency) -> String {
    Decimal::new(minor, currency.minor_units()).to_string()
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.value, self.currency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd() -> Currency {
        Currency::parse("USD").unwrap()
    }

    #[test]
    fn parses_amounts_within_the_currency_scale() {
        let limits = AmountLimits::default();
        let a = Amount::parse("125.5", usd(), &limits).unwrap();
        assert_eq!(a.value().to_string(), "125.50");
        assert_eq!(a.to_minor(), 12550);
        let jpy = Currency::parse("JPY").unwrap();
        assert_eq!(Amount::parse("1000", jpy, &limits).unwrap().to_minor(), 1000);
        let kwd = Currency::parse("KWD").unwrap();
        assert_eq!(Amount::parse("1.234", kwd, &limits).unwrap().to_minor(), 1234);
    }

    #[test]
    fn rejects_zero_negative_too_precise_and_garbage() {
        let limits = AmountLimits::default();
        assert_eq!(Amount::parse("0", usd(), &limits), Err(AmountError::NotPositive));
        assert_eq!(Amount::parse("-5.00", usd(), &limits), Err(AmountError::NotPositive));
        assert_eq!(Amount::parse("1.001", usd(), &limits), Err(AmountError::TooPrecise(2)));
        assert_eq!(Amount::parse("1.000", usd(), &limits), Err(AmountError::TooPrecise(2)));
        let jpy = Currency::parse("JPY").unwrap();
        assert_eq!(Amount::parse("1.5", jpy, &limits), Err(AmountError::TooPrecise(0)));
        for bad in ["", "abc", "1e3", "1,00", "NaN", "0x10", "1.2.3"] {
            assert_eq!(Amount::parse(bad, usd(), &limits), Err(AmountError::NotADecimal), "{bad}");
        }
    }

    #[test]
    fn enforces_the_per_currency_maximum() {
        let limits = AmountLimits::parse("USD=100.00", Decimal::from(5)).unwrap();
        assert!(Amount::parse("100.00", usd(), &limits).is_ok());
        assert_eq!(Amount::parse("100.01", usd(), &limits), Err(AmountError::OverLimit(Decimal::from(100))));
        let eur = Currency::parse("EUR").unwrap();
        assert!(matches!(Amount::parse("6", eur, &limits), Err(AmountError::OverLimit(_))));
        assert!(AmountLimits::parse("USD=-1", Decimal::ONE).is_err());
        assert!(AmountLimits::parse("ZZZ=1", Decimal::ONE).is_err());
    }

    #[test]
    fn rejects_unknown_and_unit_less_currencies() {
        assert_eq!(Currency::parse("ZZZ"), Err(AmountError::UnknownCurrency));
        assert_eq!(Currency::parse("usd"), Err(AmountError::UnknownCurrency));
        assert_eq!(Currency::parse("XAU"), Err(AmountError::UnknownCurrency));
    }

    /// The grammar, pinned: `"-"? DIGIT+ ("." DIGIT+)?`.
    #[test]
    fn the_amount_grammar_takes_plain_decimals_only() {
        let limits = AmountLimits::default();
        for bad in ["+5", " 5.00 ", "5.00 ", " 5", "5.", ".5", "-.5", "--5", "5 .00", "٥", "５", "1_000", "\u{2212}5"]
        {
            assert_eq!(Amount::parse(bad, usd(), &limits), Err(AmountError::NotADecimal), "{bad:?}");
        }
        for (good, minor) in [("5", 500), ("5.0", 500), ("5.00", 500), ("0.01", 1), ("007.50", 750)] {
            assert_eq!(Amount::parse(good, usd(), &limits).map(|a| a.to_minor()), Ok(minor), "{good:?}");
        }
        assert_eq!(Amount::parse("-5", usd(), &limits), Err(AmountError::NotPositive), "a sign says why");
    }

    proptest::proptest! {
        /// Every accepted amount round-trips exactly: its value is the decimal written, and its
        /// formatted form and its minor units parse back to the same amount.
        #[test]
        fn every_accepted_amount_round_trips_exactly(
            text in "(-?[0-9]{1,13}(\\.[0-9]{0,4})?)|([ +.0-9e-]{0,8})",
            code in proptest::sample::select(vec!["USD", "JPY", "KWD", "EUR"]),
        ) {
            let currency = Currency::parse(code).unwrap();
            let limits = AmountLimits { default_max: Decimal::from(1_000_000_000), ..AmountLimits::default() };
            if let Ok(amount) = Amount::parse(&text, currency, &limits) {
                proptest::prop_assert_eq!(amount.value(), Decimal::from_str_exact(&text).unwrap());
                proptest::prop_assert_eq!(Amount::parse(&amount.value().to_string(), currency, &limits), Ok(amount));
                proptest::prop_assert_eq!(Amount::from_minor(amount.to_minor(), currency), Ok(amount));
                proptest::prop_assert_eq!(format_minor(amount.to_minor(), currency), amount.value().to_string());
            }
        }
    }

    /// Issue 27: `accounts fund --amount 1e20` panicked in `to_minor`. An amount whose minor units
    /// do not fit storage's 64 bits is over the limit, whatever the configured maximum.
    #[test]
    fn an_amount_past_64_bit_minor_units_is_over_the_limit_not_a_panic() {
        let huge = Decimal::from_str("100000000000000000000").unwrap();
        assert!(matches!(Amount::new(huge, usd()), Err(AmountError::OverLimit(_))));
        let limits = AmountLimits { default_max: Decimal::MAX, ..AmountLimits::default() };
        assert!(matches!(Amount::parse("100000000000000000000", usd(), &limits), Err(AmountError::OverLimit(_))));
        assert!(matches!(Amount::parse("92233720368547758.08", usd(), &limits), Err(AmountError::OverLimit(_))));
        assert_eq!(Amount::parse("92233720368547758.07", usd(), &limits).map(|a| a.to_minor()), Ok(i64::MAX));
    }

    #[test]
    fn minor_units_round_trip() {
        let a = Amount::from_minor(12550, usd()).unwrap();
        assert_eq!(a.value().to_string(), "125.50");
        assert_eq!(format_minor(-5, usd()), "-0.05");
    }
}
