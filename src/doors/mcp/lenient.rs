//! Number arguments as models and clients really send them.
//!
//! JSON has one number type: a client may send `1000.0` for a millisecond
//! count, or `"3"` for a session id it copied from text. Both mean what they
//! say; refusing them would cost a model a turn for nothing. Negative,
//! fractional or non-numeric values are still refused, with a clear message.

use serde::Deserialize;
use serde::de::{self, Deserializer};

#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Int(u64),
    Float(f64),
    Text(String),
}

fn to_u64<E: de::Error>(n: Number) -> Result<u64, E> {
    match n {
        Number::Int(v) => Ok(v),
        Number::Float(f) if f >= 0.0 && f.fract() == 0.0 && f <= u64::MAX as f64 => Ok(f as u64),
        Number::Float(f) => Err(E::custom(format!(
            "expected a whole number of at least 0, got {f}"
        ))),
        Number::Text(s) => s
            .trim()
            .parse::<u64>()
            .map_err(|_| E::custom(format!("expected a whole number, got {s:?}"))),
    }
}

/// A required whole number.
pub(crate) fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    to_u64(Number::deserialize(d)?)
}

/// An optional whole number (`null` = absent).
pub(crate) fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => to_u64(n).map(Some),
    }
}

/// An optional whole number that fits a `usize`.
pub(crate) fn opt_usize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    opt_u64(d)?
        .map(|v| usize::try_from(v).map_err(|_| de::Error::custom("number too large")))
        .transpose()
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize, Debug)]
    struct T {
        #[serde(deserialize_with = "super::u64")]
        id: u64,
        #[serde(default, deserialize_with = "super::opt_u64")]
        ms: Option<u64>,
    }

    fn parse(v: serde_json::Value) -> Result<T, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn accepts_whole_numbers_in_every_json_spelling() {
        let t = parse(serde_json::json!({"id": "7", "ms": 1000.0})).unwrap();
        assert_eq!((t.id, t.ms), (7, Some(1000)));
        let t = parse(serde_json::json!({"id": 7, "ms": null})).unwrap();
        assert_eq!((t.id, t.ms), (7, None));
    }

    #[test]
    fn refuses_negative_fractional_and_text() {
        assert!(parse(serde_json::json!({"id": -1})).is_err());
        assert!(parse(serde_json::json!({"id": 1.5})).is_err());
        assert!(parse(serde_json::json!({"id": "abc"})).is_err());
    }
}
