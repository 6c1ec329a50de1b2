//! The shape every stored state shares: a closed set of snake_case names, stored as TEXT on both
//! backends, sent as the same names in JSON. [`text_enum!`](crate::text_enum) writes the enum, its
//! `as_str`, `ALL`, `AsRef<str>`, `Display` and `FromStr`, so the three spellings (Rust, JSON, SQL)
//! cannot drift.
//!
//! The sqlx derive declares the PostgreSQL type as `text` (not a custom enum type named after the
//! Rust type, sqlx's default), so values bind to and decode from the TEXT columns as they are.

/// A name that is not one of an enum's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{value}`")]
pub struct UnknownValue {
    pub kind: &'static str,
    pub value: String,
}

/// `text_enum! { /// doc  pub enum Name("kind", N) { Variant = "variant", … } }`
#[macro_export]
#[doc(hidden)]
macro_rules! text_enum {
    ($(#[$meta:meta])* pub enum $name:ident($kind:literal, $n:literal) { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, sqlx::Type)]
        #[serde(rename_all = "snake_case")]
        #[sqlx(type_name = "text", rename_all = "snake_case", no_pg_array)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            pub const ALL: [$name; $n] = [$($name::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::domain::UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| $crate::domain::UnknownValue { kind: $kind, value: s.to_owned() })
            }
        }
    };
}

/// Asserts that `as_str`, serde and `FromStr` agree on every value of a [`text_enum!`] type.
#[cfg(test)]
#[macro_export]
#[doc(hidden)]
macro_rules! assert_text_enum_round_trips {
    ($name:ty) => {
        for v in <$name>::ALL {
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::Value::String(v.as_str().to_owned()));
            assert_eq!(v.as_str().parse::<$name>(), Ok(v));
        }
        assert!("no such value".parse::<$name>().is_err());
    };
}
