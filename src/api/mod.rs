//! Wire types: the JSON bodies of the HTTP interface, shared by the server, the CLI and the
//! OpenAPI document. Serde and schema derives only; no behaviour. A file per area; every type
//! is named from here (`crate::api::Agent`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

mod access;
mod accounts;
mod agents;
mod audit;
mod credentials;
mod decisions;
mod mcp;
mod vault;

pub use access::*;
pub use accounts::*;
pub use agents::*;
pub use audit::*;
pub use credentials::*;
pub use decisions::*;
pub use mcp::*;
pub use vault::*;

/// The error envelope of every non-2xx answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Stable snake_case code, e.g. `unknown_agent`.
    pub error: String,
    /// Human-readable explanation.
    pub message: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HealthResponse {
    pub ok: bool,
    /// `alive` or `ready`.
    pub status: String,
}

/// A field that may be absent (`None`, by `default`), `null` (`Some(None)`) or a value.
pub(crate) fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A nested object of a JSON body whose fields are all optional: serde reads a struct from an
/// array too (`[null, null]` as its fields in order), and the OpenAPI document says object.
pub(crate) fn optional_object<'de, D: serde::Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Option::<serde_json::Map<String, serde_json::Value>>::deserialize(d)?
        .map(|fields| serde_json::from_value(serde_json::Value::Object(fields)))
        .transpose()
        .map_err(serde::de::Error::custom)
}

/// Integers in JSON bodies: JSON Schema's `integer` is any number without a fractional part, so
/// `5.0` reads as `5`, as the OpenAPI document promises; `5.5` and text are refused.
pub mod int {
    use serde::de::{Deserializer, Error, Visitor};
    use std::fmt;

    struct Int;

    impl Visitor<'_> for Int {
        type Value = i64;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an integer")
        }

        fn visit_i64<E: Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }

        fn visit_u64<E: Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::custom("integer out of range"))
        }

        fn visit_f64<E: Error>(self, v: f64) -> Result<i64, E> {
            // An integral f64 is an exact integer, and every one strictly between -2^63 and 2^63
            // is an i64. Not -2^63 itself: an integer literal below i64's range reaches here
            // as a float rounded to it.
            const TWO_63: f64 = 9_223_372_036_854_775_808.0;
            if v.fract() == 0.0 && v > -TWO_63 && v < TWO_63 {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "a whole number strictly inside the i64 range"
                )]
                Ok(v as i64)
            } else {
                Err(E::invalid_type(serde::de::Unexpected::Float(v), &self))
            }
        }
    }

    pub fn required<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        d.deserialize_any(Int)
    }

    pub fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        struct Opt;
        impl<'de> Visitor<'de> for Opt {
            type Value = Option<i64>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer or null")
            }

            fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                required(d).map(Some)
            }
        }
        d.deserialize_option(Opt)
    }

    #[cfg(test)]
    mod tests {
        #[derive(serde::Deserialize)]
        struct T {
            #[serde(deserialize_with = "super::required")]
            a: i64,
            #[serde(default, deserialize_with = "super::optional")]
            b: Option<i64>,
        }

        fn read(text: &str) -> Option<(i64, Option<i64>)> {
            serde_json::from_str::<T>(text).ok().map(|t| (t.a, t.b))
        }

        #[test]
        fn integral_numbers_read_as_integers_and_nothing_else_does() {
            assert_eq!(read(r#"{"a": 5}"#), Some((5, None)));
            assert_eq!(read(r#"{"a": -5.0, "b": 2.0}"#), Some((-5, Some(2))));
            assert_eq!(read(r#"{"a": 1, "b": null}"#), Some((1, None)));
            assert_eq!(read(r#"{"a": 5.5}"#), None);
            assert_eq!(read(r#"{"a": "5"}"#), None);
            assert_eq!(read(r#"{"a": 1e300}"#), None);
            assert_eq!(
                read(r#"{"a": 9007199254740991.0}"#),
                Some((9_007_199_254_740_991, None))
            );
            assert_eq!(read(r#"{"a": 9223372036854775808.0}"#), None);
            assert_eq!(read(r#"{"a": -9223372036854775809}"#), None);
            assert_eq!(read(r#"{"a": 18446744073709551615}"#), None);
            assert_eq!(read(r#"{"a": 1, "b": "2"}"#), None);
        }
    }
}
